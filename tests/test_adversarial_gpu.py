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


def test_gpu_work_while_idle_is_seen_from_the_workers_cpu_clock(gpu_corpus: dict[str, dict[str, Any]],
                                                                monkeypatch) -> None:
    """Issue 12, rule 4: a candidate whose thread launches matmuls onto the GPU whenever the reference is timed, and
    sleeps between them, is ``idle_work`` by the parent's reading of its worker's CPU clock while it had no command
    (its launches: 55 ms over 0.6 s idle on the H100, docs/results/h100-2026-12-05); the driver's utilisation
    samples of its idle worker are recorded beside it. With the rule's slack unbounded the same candidate is
    ``correct`` without ``idle_work``."""
    from kbv.eval import EvalOptions, evaluate
    from kbv.eval import performance as perf_mod

    record = record_of(gpu_corpus, "cuda_idle_gpu_load")
    idle = record["timing_ms"]["idle_cpu"]
    assert idle["flagged"] and idle["cpu_ms"]["candidate"] > idle["allowed_ms"], idle
    assert record["timing_ms"]["idle_gpu"]["flagged"] is None  # recorded only
    honest = record_of(gpu_corpus, "cuda_example_triton_gelu")["timing_ms"]["idle_cpu"]
    assert not honest["flagged"], honest
    monkeypatch.setattr(perf_mod, "IDLE_CPU_SLACK_MS", float("inf"))
    entry = BY_ID["cuda_idle_gpu_load"]
    off = evaluate(problem_path(entry["problem"]), ROOT / entry["file"], EvalOptions(**OPTIONS[("cuda", "fast")]))
    assert off.verdict == "correct" and "idle_work" not in off.flags, off.flags


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


def test_a_profiled_call_told_apart_is_seen_in_the_recording_of_every_timed_forward(
        gpu_corpus: dict[str, dict[str, Any]]) -> None:
    """Issue 12, rule 2 on a GPU: a candidate that runs its own Triton kernel under the profiled call's dispatch mode
    and torch.relu everywhere else shows only its own kernel when profiled, and PyTorch's in every recorded timed
    forward: ``fallback`` added from ``fallback.timed_calls``. The honest Triton GELU's recording is all its own.
    With timed calls not recorded the same candidate is ``correct`` with no flag."""
    from kbv.eval import EvalOptions, evaluate

    fallback = record_of(gpu_corpus, "cuda_profiled_own_timed_torch")["fallback"]
    assert fallback["gpu"]["library_share_time"] == 0.0, fallback["gpu"]  # the profiled call: its own kernel
    timed = fallback["timed_calls"]
    assert timed["status"] == "ok" and timed["flags_added"] == ["fallback"], timed
    assert timed["library_share_time"] == 1.0, timed
    honest = record_of(gpu_corpus, "cuda_example_triton_gelu")["fallback"]["timed_calls"]
    assert honest["status"] == "ok" and honest["flags"] == [] and honest["own_us"] > 0, honest
    entry = BY_ID["cuda_profiled_own_timed_torch"]
    off = evaluate(problem_path(entry["problem"]), ROOT / entry["file"],
                   EvalOptions(**OPTIONS[("cuda", "fast")], record_timed=False))
    assert off.verdict == "correct" and "fallback" not in off.flags, off.flags


def test_a_recording_switched_off_by_the_candidate_is_a_fallback(gpu_corpus: dict[str, dict[str, Any]]) -> None:
    """Issue 12, rule 2 on a GPU: a candidate that switches the running session's collection off around its
    library call leaves every timed forward's recording empty, while the reference's holds its kernels:
    ``fallback`` (``empty_for_candidate``). With timed calls not recorded it is ``correct`` with no flag."""
    from kbv.eval import EvalOptions, evaluate

    timed = record_of(gpu_corpus, "cuda_recording_switched_off")["fallback"]["timed_calls"]
    assert timed["status"] == "empty_for_candidate" and timed["flags_added"] == ["fallback"], timed
    assert timed["coverage"]["candidate"] == 0.0 and timed["coverage"]["reference"] > 0, timed
    # a CUDA graph's replayed kernels are recorded: a candidate that replays one is not read as switched off
    graph = record_of(gpu_corpus, "cuda_graph_replay")["fallback"]["timed_calls"]
    assert graph["status"] == "ok" and graph["kernels"], graph
    entry = BY_ID["cuda_recording_switched_off"]
    off = evaluate(problem_path(entry["problem"]), ROOT / entry["file"],
                   EvalOptions(**OPTIONS[("cuda", "fast")], record_timed=False))
    assert off.verdict == "correct" and "fallback" not in off.flags, off.flags


def test_gpu_work_queued_after_the_reply_is_seen_in_the_references_next_command(
        gpu_corpus: dict[str, dict[str, Any]], monkeypatch) -> None:
    """Issue 12, rule 1's queued work: a candidate whose thread replays a CUDA graph of matmuls once its timing
    command has replied (a few launches of the CPU: under the idle-CPU rule's slack) slows the reference's next
    command: ``reference_slowed``. With the rule's bound unbounded it is ``correct`` without it."""
    from kbv.eval import EvalOptions, evaluate
    from kbv.eval import performance as perf_mod

    found = record_of(gpu_corpus, "cuda_queue_after_reply")["timing_ms"]["reference_after_candidate"]
    assert found["flagged"], found
    honest = record_of(gpu_corpus, "cuda_example_triton_gelu")["timing_ms"].get("reference_after_candidate")
    assert honest is None or not honest["flagged"], honest
    monkeypatch.setattr(perf_mod, "REFERENCE_AFTER_CANDIDATE_MAX", float("inf"))
    entry = BY_ID["cuda_queue_after_reply"]
    off = evaluate(problem_path(entry["problem"]), ROOT / entry["file"], EvalOptions(**OPTIONS[("cuda", "fast")]))
    assert "reference_slowed" not in off.flags, off.flags
