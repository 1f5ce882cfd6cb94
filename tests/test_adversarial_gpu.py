"""The CUDA part of the adversarial corpus (tests/candidates/MANIFEST.json, entries with device "cuda"; marker ``gpu``,
skipped without CUDA): work left on a side stream, cuBLAS called from a load_inline extension, the caching allocator
(leftover blocks, pointer-keyed caches, uninitialised reads), memory outside torch's allocator, event tricks, no work
while timed, and a fallback on a thread the dispatch recorder cannot see.

Everything runs in one ``run_pairs`` batch at the problems' full sizes, with one C++ build
(tests/candidates/cuda_cublas_extension.py: host code with CUDA headers, no nvcc). Several entries reuse the CPU
fixtures on the GPU. Checks and strict-xfail gaps are tests/test_adversarial.py's.
"""

from __future__ import annotations

from typing import Any

import pytest

from conftest import ROOT, problem_path
from test_adversarial import BY_ID, OPTIONS, check_entry, corpus_records, params, record_of

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return corpus_records(tmp_path_factory, "cuda")


@pytest.mark.parametrize("entry", params("cuda"))
def test_gpu_corpus(gpu_corpus: dict[str, dict[str, Any]], entry: dict[str, Any]) -> None:
    check_entry(entry, record_of(gpu_corpus, entry["id"]))


def test_side_stream_work_is_timed(gpu_corpus: dict[str, dict[str, Any]]) -> None:
    """The candidate does the reference's work on another stream and returns before it ends. kbv's timer synchronises
    the device before its end event, so the work is counted: no better than the reference beyond noise (an
    unsynchronised event timer reports ~20x on an H200)."""
    record = record_of(gpu_corpus, "cuda_side_stream")
    assert record["correctness"]["failed_distributions"] == []
    timing = record["timing_ms"]
    for baseline in ("standard", "verified"):
        assert timing[f"candidate_{baseline}"]["median"] >= timing[f"reference_{baseline}"]["median"] / 1.5, timing


def test_cublas_inside_an_extension_is_seen_by_its_imports(gpu_corpus: dict[str, dict[str, Any]]) -> None:
    """No ATen compute op reaches the dispatcher; the symbol route sees cublasSgemm_v2 in the object, and the GPU
    route sees only library kernels (cuBLAS's GEMM, none from the candidate's binary)."""
    fallback = record_of(gpu_corpus, "cuda_cublas_extension")["fallback"]
    assert fallback["compute_ops"] == {}, fallback
    assert "cublasSgemm_v2" in fallback["library_symbols"] and "cublas" in fallback["libraries"], fallback
    assert "kbv_test_cuda_cublas" in fallback["library_backed_modules"], fallback
    assert fallback["gpu"] and fallback["gpu"]["library_share_time"] == 1.0, fallback


def test_a_fallback_on_another_thread_is_seen_by_the_gpu_route(gpu_corpus: dict[str, dict[str, Any]]) -> None:
    """torch.relu on a helper thread escapes the dispatch recorder (per thread: the CPU route misses it, see
    fallback_in_thread in tests/test_adversarial.py); the kernels it launches do not escape the GPU route."""
    fallback = record_of(gpu_corpus, "cuda_fallback_in_thread")["fallback"]
    assert fallback["compute_ops"] == {}, fallback
    assert fallback["decided_by"] == "gpu device time" and fallback["gpu"]["library_share_time"] == 1.0, fallback


def test_memory_outside_the_allocator_is_seen(gpu_corpus: dict[str, dict[str, Any]]) -> None:
    """A 1 GiB workspace from cuMemAlloc is invisible to torch's allocator peak, not to device memory in use."""
    memory = record_of(gpu_corpus, "cuda_hidden_workspace")["memory_bytes"]
    assert memory["candidate_peak"] <= memory["reference_peak"], memory  # the allocator sees nothing extra
    assert memory["candidate_device_in_use"] - memory["reference_device_in_use"] >= 2**30, memory


def test_cuda_allocator_holds_no_answer(gpu_corpus: dict[str, dict[str, Any]]) -> None:
    """torch.empty_like in the candidate's process gets its own freed blocks (inputs, earlier outputs), never the
    reference's output: the reference runs in another process with its own CUDA context."""
    record = record_of(gpu_corpus, "cuda_leftover_empty")
    assert "D1" in record["correctness"]["failed_distributions"]
    cached = record_of(gpu_corpus, "cuda_cache_by_data_ptr")
    assert cached["correctness"]["failed_distributions"] or "timed_output_mismatch" in cached["flags"]


def test_gpu_work_while_idle_is_stopped_with_the_idle_worker(gpu_corpus: dict[str, dict[str, Any]]) -> None:
    """Issue 12: a candidate whose thread launches matmuls onto the GPU whenever the reference is timed cannot,
    since its worker's processes are stopped while the reference is timed (``kbv.sandbox.freeze``): its CPU clock
    while idle stays within the rule's slack, and its speedup is no gain. The driver's utilisation samples of its
    idle worker are recorded beside it (recorded only). Work it queued in the instant before its stop would slow
    the reference's commands beside it but not the clean one: no gain, or ``reference_slowed``."""
    record = record_of(gpu_corpus, "cuda_idle_gpu_load")
    idle = record["timing_ms"]["idle_cpu"]
    assert not idle["flagged"] and idle["cpu_ms"]["candidate"] <= idle["allowed_ms"], idle
    assert record["timing_ms"]["idle_gpu"]["flagged"] is None  # recorded only
    assert record["speedup"]["verified"]["value"] < 1.5 or (
        record["verdict"] == "rejected" and "reference_slowed" in record["flags"]), record["speedup"]
    honest = record_of(gpu_corpus, "cuda_example_triton_gelu")["timing_ms"]["idle_cpu"]
    assert not honest["flagged"], honest


def test_a_scratch_hidden_from_the_memory_command_is_seen_in_every_timed_call(gpu_corpus: dict[str, dict[str, Any]],
                                                                              monkeypatch) -> None:
    """Issue 12, rule 2: a 64 MiB caching-allocator scratch made in every forward but the memory command's is seen
    by the median of every timed call's own peak allocation (both roles' timers report it), 64 MiB above the
    reference's. With the per-call rule off the same candidate is ``correct`` with no memory flag."""
    from kbv.eval import EvalOptions, evaluate
    from kbv.eval import performance as perf_mod

    calls = record_of(gpu_corpus, "cuda_scratch_except_measured")["memory_bytes"]["timed_calls"]
    assert calls["flagged"] and calls["median"]["candidate"] - calls["median"]["reference"] >= 64 * 2**20, calls
    honest = record_of(gpu_corpus, "cuda_example_triton_gelu")["memory_bytes"].get("timed_calls")
    assert honest is None or not honest["flagged"], honest
    monkeypatch.setattr(perf_mod.PerformanceStage, "_judge_call_memory", lambda self: None)
    entry = BY_ID["cuda_scratch_except_measured"]
    off = evaluate(problem_path(entry["problem"]), ROOT / entry["file"], EvalOptions(**OPTIONS[("cuda", "fast")]))
    assert off.verdict == "correct" and "memory_above_reference" not in off.flags, off.flags


def test_gpu_work_launched_while_the_other_role_is_timed_needs_the_idle_worker_stopped(
        gpu_corpus: dict[str, dict[str, Any]]) -> None:
    """Issue 12: a candidate whose thread replays a CUDA graph of 120 matmuls once its timing command has replied
    (a few launches of the CPU: under the idle-CPU rule's slack) read the reference 7.3 times slower in every one of
    its commands on the H100 (docs/results/h100-2026-12-06: the queued work outlasts the next command, so the
    reference's commands right after the candidate's were no slower than its others). With the idle worker stopped
    while the other role is timed (``kbv.sandbox.freeze``) it cannot launch then; what it queues in the instant
    before its stop still runs, but not past the candidate's processes, so the reference's clean command (timed once
    they are gone) shows it: no gain, or ``reference_slowed``. With the workers left running (``freeze_idle=False``)
    the clean command alone rejects it; with neither defence the same candidate claims a speedup of 2 or more. Two
    holes the first GPU run of the clean command showed (docs/results/h100-2026-12-06-b): a cut pair
    (``timing_truncated``, its own command slowed by its queue) got no clean command (6.46x with the stop off), and
    with the stop on it slowed two of four reference commands, which the least command's ratio missed (2.65x); a cut
    pair is cleaned now, and the rule reads the pair's pooled reference median."""
    from kbv.eval import EvalOptions, evaluate

    record = record_of(gpu_corpus, "cuda_queue_after_reply")
    assert record["speedup"]["verified"]["value"] < 1.5 or (
        record["verdict"] == "rejected" and "reference_slowed" in record["flags"]), (
        record["speedup"], record["timing_ms"].get("reference_after_candidate"), record["timing_ms"].get(
            "reference_clean"))
    for honest_id in ("cuda_example_triton_gelu",):
        timing = record_of(gpu_corpus, honest_id)["timing_ms"]
        for rule in ("reference_after_candidate", "reference_clean"):
            assert not (timing.get(rule) or {}).get("flagged"), (honest_id, rule, timing.get(rule))
    entry = BY_ID["cuda_queue_after_reply"]
    running = evaluate(problem_path(entry["problem"]), ROOT / entry["file"],
                       EvalOptions(**OPTIONS[("cuda", "fast")], freeze_idle=False))
    assert running.verdict == "rejected" and "reference_slowed" in running.flags, (
        running.flags, running.speedup, running.timing_ms.get("reference_clean"))
    off = evaluate(problem_path(entry["problem"]), ROOT / entry["file"],
                   EvalOptions(**OPTIONS[("cuda", "fast")], freeze_idle=False, clean_reference=False))
    assert off.speedup["verified"]["value"] >= 2.0, (off.verdict, off.flags, off.speedup)