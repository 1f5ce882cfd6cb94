"""GPU checks (marker ``gpu``; skipped without CUDA). scripts/gpu_check.py runs them on the H200 with the suite."""

from __future__ import annotations

import pytest
import torch

from conftest import CANDIDATES, EXAMPLES, problem_path
from kbv.protocol import RING_BYTES, RING_DEVICE_FRACTION, TIMING_ROUNDS, TIMING_RULES
from kbv.problems.candidates import Candidate, Pair, write_reference_candidate
from kbv.eval import EvalOptions, evaluate
from kbv.problems import load_problem
from kbv.records import read_records
from kbv.eval.runner import run_pairs

pytestmark = pytest.mark.gpu
GPU = dict(device="cuda", timeout=120.0)


def test_cuda_load_inline_candidate_builds_and_is_correct() -> None:
    record = evaluate(problem_path("level1/5_ReLU"), EXAMPLES / "cuda" / "level_1_problem_5_sample_0_kernel.py",
                      EvalOptions(**GPU))
    assert record.verdict == "correct", record.error
    assert record.env["device"]["name"]
    assert record.timing_ms["gpu_clocks"]["start"] and record.timing_ms["flush_bytes"] >= 2 * 50 * 2**20
    assert record.memory_bytes["method"] == "torch.cuda.max_memory_allocated"
    assert record.memory_bytes["candidate_peak"] > 0 and record.memory_bytes["reference_peak"] > 0
    assert record.memory_bytes["candidate_device_in_use"] > 0 and record.memory_bytes["reference_device_in_use"] > 0
    # at least the rule's trials, unless the kept outputs' ring caps them: on an 80 GB H100 a command keeps 5 of the
    # 256 MiB outputs, 60 trials over 12 commands (docs/results/h100-2026-12-05); 120 on the H200
    total = torch.cuda.get_device_properties(0).total_memory
    per_command = max(RING_BYTES["cuda"], int(RING_DEVICE_FRACTION * total)) // (TIMING_ROUNDS * 2)
    commands = TIMING_ROUNDS * TIMING_RULES["cuda"].process_pairs
    assert record.timing_ms["candidate_verified"]["n"] >= min(TIMING_RULES["cuda"].min_trials,
                                                              commands * (per_command // (4096 * 16384 * 4)))
    # the GPU fallback route: its own kernel did the work, by device time; honest kernels carry no flag
    gpu = record.fallback["gpu"]
    assert record.fallback["decided_by"] == "gpu device time" and gpu["own_us"] > 0, gpu
    assert gpu["library_share_time"] == 0.0 and not {"fallback", "partial_fallback"} & set(record.flags), gpu
    assert record.flags == [], (record.flags, record.integrity, record.timing_ms.get("burst"))  # honest: no flag
    # issue 13: CUDA started before each worker's hello (its time split out of the start), and the timing stage's
    # processes started while correctness ran
    assert record.wall_seconds.get("correctness/cuda_init", 0) > 0, record.wall_seconds
    assert "performance/process_start" not in record.wall_seconds, str({  # whole (a dict's repr is cut short)
        "wall_seconds": record.wall_seconds, **{k: record.timing_ms.get(k) for k in (
            "untimed_confirmation_pair", "reference_clean", "reference_after_candidate", "truncation_refused")}})
    assert all(check["passed"] for check in record.correctness["timed_rechecks"])
    assert record.correctness["poison"]["passed"] and record.correctness["poison"]["identical"]
    assert not record.correctness["precision"]["low"], record.correctness["precision"]


def test_illegal_memory_access_is_survived(tmp_path) -> None:
    relu = load_problem(problem_path("level1/5_ReLU"))
    pairs = [Pair(relu, Candidate.from_path(CANDIDATES / "cuda_illegal_access.py", sample=0)),
             Pair(relu, Candidate.from_path(CANDIDATES / "correct_torch.py", sample=1))]
    out = tmp_path / "r.jsonl"
    run_pairs(pairs, EvalOptions(**GPU), out)
    records = {r["sample"]: r for r in read_records(out)}
    assert records[0]["verdict"] == "runtime_error"
    assert "illegal memory access" in (records[0]["error"]["message"] + records[0]["error"]["log_tail"]).lower()
    assert records[1]["verdict"] == "correct"


def test_tf32_baseline_is_faster_for_fp32_matmul_and_self_speedup_is_one(tmp_path) -> None:
    problem = load_problem(problem_path("level1/1_Square_Matmul"))
    record = evaluate(problem, write_reference_candidate(problem, tmp_path), EvalOptions(**GPU))
    assert record.verdict == "correct"
    t = record.timing_ms
    assert t["reference_verified"]["median"] * 2 < t["reference_standard"]["median"]  # TF32 really is on
    # evaluate() of the problem alone times its main shape only (4096-square; a suite adds the held-out 127-square).
    # The reference against itself there read 1.000-1.005 under the standard baseline (fp32, 2.7 ms a call on the
    # H100) and 0.93-1.03 under TF32 (about 0.3 ms) in four suite runs, and 0.889 once in this test, under a
    # baseline its log does not name (docs/results/h100-2026-12-05-b): bounded at 0.8-1.25, TF32's speed-up over
    # fp32 (above) being the point here. Process pairs that differ on one shape are an open item (docs/security.md).
    assert record.shape_results is None or len(record.shape_results) == 1, record.shape_results
    for baseline in ("standard", "verified"):
        assert 0.8 < record.speedup[baseline]["value"] < 1.25, record.speedup
    flags = record.env["baseline_flags"]["reference"]
    assert flags["verified"]["cuda.matmul.allow_tf32"] is True
    assert flags["standard"]["cuda.matmul.allow_tf32"] is False
    # PyTorch's own matmul is a fallback by GPU time (cuBLAS or nvjet kernels launched under aten::mm)
    gpu = record.fallback["gpu"]
    assert "fallback" in record.flags and gpu["library_share_time"] == 1.0 and gpu["own_us"] == 0.0, gpu
    # the precision check: the reference's own TF32 error is the yardstick, so the reference is not low precision
    assert not record.correctness["precision"]["low"], record.correctness["precision"]
    assert record.correctness["precision"]["outputs"][0]["verified_error"] > 1e-5  # TF32 is visible against fp64


@pytest.mark.xfail(reason="on the H200 (2026-12-01) this read is launch-bound: 28.1 us after the flush, 40.6 us "
                          "without it (docs/results/h200-2026-12-01); the test needs a read that is bandwidth-bound "
                          "and still fits in L2", strict=False)
def test_l2_flush_makes_a_cache_resident_read_slower() -> None:
    """The flush between trials is what keeps inputs out of L2 (T13): a 24 MiB read fits in the H200's L2, so timed
    without the flush it comes from cache and is faster than with it."""
    import dataclasses
    import statistics

    import torch

    from kbv.protocol import TIMING_RULES
    from kbv.worker import timer

    x = torch.rand(6 * 2**20, device="cuda")  # 24 MiB
    assert x.numel() * 4 < timer.cache_bytes("cuda")
    rule = TIMING_RULES["cuda"]
    flushed = statistics.median(timer.time_calls(lambda: x.sum(), "cuda", rule, share=0.3)["times_ms"])
    warm = statistics.median(timer.time_calls(lambda: x.sum(), "cuda", dataclasses.replace(rule, flush_l2_factor=0.0),
                                              share=0.3)["times_ms"])
    print(f"24 MiB sum: {flushed * 1e3:.1f} us after the flush, {warm * 1e3:.1f} us warm")
    assert flushed > 1.1 * warm, (flushed, warm)


def test_a_timing_recording_holds_the_forwards_kernels_and_none_of_the_harnesss() -> None:
    """The timed calls' recording on a GPU (``kbv.worker.kernel_record``): collection on for the whole session and
    the events kept by their windows. The forwards' matmul kernels are in it, every call's, and the harness's own
    work between calls (the L2 flush's fill, a ``prepare``'s tanh) is not. The first version switched collection
    on and off around each forward and recorded no kernel at all on torch 2.11 + CUDA 13 (h100-2026-12-06)."""
    from kbv.worker import timer
    from kbv.worker.kernel_record import Recording

    a = torch.randn(512, 512, device="cuda")
    x = torch.randn(4096, device="cuda")

    def prepare(index: int) -> None:
        torch.tanh(x)  # the harness's input draw

    recording = Recording("cuda")
    recording.start()
    result = timer.time_calls(lambda: a @ a, "cuda", TIMING_RULES["cuda"], max_trials=5, prepare=prepare,
                              record=recording)
    recorded = recording.stop()
    print(recorded)
    assert recorded["status"] == "ok", recorded
    names = recorded["kernels"]
    assert names, recorded  # the first version's failure: nothing at all
    assert not [n for n in names if "tanh" in n.lower() or "fill" in n.lower() or "spin" in n.lower()], names
    windows = 3 + 1 + len(result["times_ms"])  # one per estimate and timed call, one for the warm-up's calls
    assert recorded["leads_left_out"] == recorded["flushes_left_out"] == windows - 1, recorded  # the warm-up's: none
    assert recorded["outside_windows"] > 0, recorded  # the flush and the draws: recorded, left out by time
    calls = 3 + result["warmup"] + len(result["times_ms"])
    assert max(c for c, _ in names.values()) >= calls, (calls, names)  # the matmul, every call's
    assert recorded["timed"]["windows"] == len(result["times_ms"]) and recorded["timed"]["device_us"] > 0, recorded


def test_with_the_timed_calls_recorded_a_kernel_used_only_when_profiled_is_a_fallback(tmp_path) -> None:
    """The two GPU corpus gaps with every timed forward recorded (``record_timed``, KBV_RECORD_TIMED=1), in one run:
    ``cuda_profiled_own_timed_torch`` (its own Triton ReLU only under the profiled call's dispatch mode) and
    ``cuda_recording_switched_off`` (the same, with the session's collection switched off around ``torch.relu``)
    are ``fallback``, and the honest Triton GELU stays ``correct`` with no flag."""
    relu, gelu = load_problem(problem_path("level1/5_ReLU")), load_problem(problem_path("level1/6_GELU"))
    pairs = [Pair(relu, Candidate.from_path(CANDIDATES / "cuda_profiled_own_timed_torch.py", sample=0)),
             Pair(relu, Candidate.from_path(CANDIDATES / "cuda_recording_switched_off.py", sample=1)),
             Pair(gelu, Candidate.from_path(EXAMPLES / "common" / "level_1_problem_6_sample_0_kernel.py", sample=2))]
    out = tmp_path / "r.jsonl"
    run_pairs(pairs, EvalOptions(**GPU, record_timed=True), out)
    records = {r["sample"]: r for r in read_records(out)}
    for sample in (0, 1):
        timed = records[sample]["fallback"].get("timed_calls")
        print(sample, records[sample]["verdict"], records[sample]["flags"], timed)
        assert records[sample]["verdict"] == "correct" and "fallback" in records[sample]["flags"], timed
    assert records[1]["fallback"]["timed_calls"]["status"] == "empty_for_candidate", records[1]["fallback"]
    honest = records[2]
    print(honest["verdict"], honest["flags"], honest["fallback"].get("timed_calls"))
    assert honest["verdict"] == "correct" and not {"fallback", "partial_fallback"} & set(honest["flags"]), honest


def test_a_digest_is_the_same_on_the_gpu_as_on_the_cpu() -> None:
    """The GPU digests a kept output in fewer, fused kernels (``kbv.worker.commit``: launch-bound there); the words
    summed are the same, so the digest is the same as the CPU's for every element width, across chunks, and for
    large outputs digested by rows and columns."""
    import torch

    from kbv.worker import commit

    gen = torch.Generator().manual_seed(7)
    cases = [torch.randn(64, 2048, generator=gen), torch.randn(5, generator=gen).half(),
             torch.randint(0, 255, (1001,), dtype=torch.uint8, generator=gen), torch.randn(3, 7, generator=gen).double(),
             torch.randn(0), torch.randn(commit.CHUNK + 3, generator=gen), torch.randn(8, 9, generator=gen).t(),
             torch.randn(commit.GRID_MIN_BYTES // 4 + 6, generator=gen),  # by rows and columns, words past them
             torch.randn(commit.GRID_MIN_BYTES // 4 + 9, generator=gen)[1:]]  # the same, 4 bytes into its storage
    for t in cases:
        assert commit.tensor_digest(t.cuda()) == commit.tensor_digest(t), (t.dtype, tuple(t.shape))
    assert commit.tensor_digest(cases[0].cuda()) != commit.tensor_digest((cases[0] + 1).cuda())


def test_the_digest_warm_up_leaves_the_devices_memory_as_it_found_it() -> None:
    """``commit.warm`` runs in both roles' timing workers before their setup reads the device memory in use: it
    gives back every block it allocated, so no measurement of the candidate's memory starts beside its cache. (In
    the whole GPU run the count fell by 0.5 MiB across the warm-up, h100-2026-12-07-i: earlier tests' garbage that
    a collection during it freed; it is collected first, and what is left may only stay or fall.)"""
    import gc

    from kbv.worker import commit

    gc.collect()
    torch.cuda.synchronize()
    allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    commit.warm("cuda")
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() <= allocated and torch.cuda.memory_reserved() <= reserved, (allocated,
                                                                                                     reserved)


def test_the_timer_counts_the_device_allocations_its_timed_trials_make() -> None:
    """``time_calls``' ``allocator``: a timed trial that allocates from the device (``cudaMalloc``, between its
    events) is counted, one served from the allocator's cache is not (a diagnostic for the reference's clean command,
    which read up to 2.3x slower than the commands beside the candidate on the H100: h100-2026-12-06-c)."""
    from kbv.worker import timer

    n = 64 * 2**20  # 256 MiB of float32: each call's output

    def fresh(i: int) -> None:
        torch.cuda.empty_cache()  # the cache emptied before each call: its output comes from the device

    result = timer.time_calls(lambda: torch.ones(n, device="cuda"), "cuda", TIMING_RULES["cuda"], max_trials=5,
                              prepare=fresh)
    assert result["allocator"]["device_allocs"] >= len(result["times_ms"]), result["allocator"]
    cached = timer.time_calls(lambda: torch.ones(n, device="cuda"), "cuda", TIMING_RULES["cuda"], max_trials=5)
    assert cached["allocator"] == {"device_allocs": 0, "retries": 0}, cached["allocator"]


# A convolution of D6's ±100 inputs, then tanh: where the output crosses zero, the reference's TF32 rounding (cuDNN's
# default for fp32 convolutions) comes through at the scale of the convolution, not of the output (on the H100 the
# reference failed as its own candidate under D6: 0.033 against 0.0098 allowed, docs/results/h100-2026-12-06-d).
CONV_TANH = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 64, 3, padding=1)

    def forward(self, x):
        return torch.tanh(self.conv(x))


def get_inputs():
    return [torch.rand(16, 64, 64, 64)]


def get_init_inputs():
    return []
'''

# the same model in strict IEEE float32: more precise than the reference's TF32 run, never less
CONV_TANH_IEEE = CONV_TANH + '''

class ModelNew(Model):
    def forward(self, x):
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            return torch.tanh(self.conv(x))
'''


def test_a_gpu_command_sent_an_estimate_makes_no_estimate_calls_and_its_ring_bounds_its_trials() -> None:
    """On a GPU as on the CPU (``tests/test_timer.py``): a command sent the previous command's median
    (``estimate_ms``) makes no estimate calls, the first trial's output bounds the trials to the ring (three outputs
    here), and the worker's split counts every timed call."""
    from kbv.worker import timer

    x = torch.randn(1 << 20, device="cuda")
    rule = TIMING_RULES["cuda"]
    calls: list[int] = []

    def forward() -> torch.Tensor:
        calls.append(1)
        return x * 2

    result = timer.time_calls(forward, "cuda", rule, warmed=True, estimate_ms=0.05, ring_bytes=3 * x.numel() * 4,
                              keep=lambda i, out: None)
    assert result["estimates"] == 0 and len(result["times_ms"]) == 3, result
    assert len(calls) == rule.min_warmup_calls + 3
    assert result["split_ms"]["timed_calls"] >= sum(result["times_ms"]) * 0.5, result["split_ms"]


def test_a_gpu_command_reports_the_hosts_latency_after_its_synchronize_and_its_trials_are_unchanged() -> None:
    """``sync_tail_ms`` (a diagnostic of the two speeds): from the end of the last warm-up call's work to an event
    recorded once the device-wide synchronize has returned; positive, and far under a 20 ms kernel's own time, and
    the command's trials are as many as without it (the warm-up calls themselves run as before)."""
    from kbv.worker import timer

    x = torch.randn(1 << 20, device="cuda")

    def slow() -> torch.Tensor:
        torch.cuda._sleep(20_000_000)  # about 10-20 ms of GPU time
        return x * 2

    result = timer.time_calls(slow, "cuda", TIMING_RULES["cuda"], max_trials=3)
    assert 0.0 < result["sync_tail_ms"] < 5.0, result["sync_tail_ms"]
    assert len(result["times_ms"]) == 3 and min(result["times_ms"]) > result["sync_tail_ms"]


def test_a_kernel_more_precise_than_the_references_tf32_run_is_correct(tmp_path) -> None:
    """Judged against the reference's TF32 run alone, the IEEE kernel's D6 outputs differ by the reference's own
    rounding where tanh crosses zero; the precision recheck compares it with the reference's strict run instead,
    allowing twice the reference's own deviation (``kbv.judge.recheck_with_noise``)."""
    (tmp_path / "level2").mkdir()
    problem_file = tmp_path / "level2" / "1_Conv_Tanh.py"
    problem_file.write_text(CONV_TANH)
    candidate = tmp_path / "ieee.py"
    candidate.write_text(CONV_TANH_IEEE)
    record = evaluate(load_problem(problem_file), candidate, EvalOptions(**GPU))
    assert record.verdict == "correct", (record.error, record.correctness.get("distributions"))
    rechecked = {name: d["precision_recheck"] for name, d in record.correctness["distributions"].items()
                 if "precision_recheck" in d}
    assert "D6" in rechecked and rechecked["D6"]["passed"] == rechecked["D6"]["trials"] > 0, rechecked
    assert rechecked["D6"]["noise"][0][0] > 1e-3  # the reference's TF32 run lies that far from its strict run
