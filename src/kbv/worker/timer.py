"""Timing one forward call: warm-up, cache flush between trials, many individually timed trials.

On CUDA each trial is bracketed by events, with a device-wide synchronize before the end event so work on side
streams is counted; on the CPU each trial is timed with ``time.perf_counter_ns``. The raw per-trial times go back
to the parent, which computes the statistics. On CUDA every timed trial's peak allocation (the caching allocator's
high-water mark over the call, less what was allocated before it) goes back too, in both roles: no one call is the
memory-measured one. With a ``record`` (``kbv.worker.kernel_record``) every forward, estimate, warm-up and timed
alike, runs in one of the recording's windows, and nothing else does: the harness's draws and copies fall
between its windows (on CUDA they finish before a window opens), and so does the CPU's flush; on CUDA a call's
window opens with a spin kernel and its flush, which keep the GPU busy while the forward is launched, and the
recording leaves both out, so only the forwards' work is kept.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable

import torch

from kbv.protocol import (ESTIMATE_CALLS, FIRST_TIMED_CALL, RECORD_LEAD_CYCLES, TIMING_TRUNCATE_MIN_MS, TIMING_TRUNCATED_TRIALS,
                          TimingRule)

_perf_counter_ns = time.perf_counter_ns  # captured before any candidate import
_Event = torch.cuda.Event  # the same
_allocated, _reset_peak, _peak = (torch.cuda.memory_allocated, torch.cuda.reset_peak_memory_stats,
                                  torch.cuda.max_memory_allocated)  # the same
_memory_stats = torch.cuda.memory_stats  # the same
_numel, _element_size = torch.Tensor.numel, torch.Tensor.element_size
_device_sync = getattr(torch._C, "_cuda_synchronize", None)  # the builtin itself, not the module attribute
_spin = getattr(torch.cuda, "_sleep", None)  # a kernel that spins for so many GPU cycles: captured the same way


def settle(device: str) -> None:
    """A device-wide synchronize at the end of a timing command, before its reply: whatever this process's threads
    launched until then has run before the parent moves on to the other role (and stops this worker:
    ``kbv.sandbox.freeze``), so it cannot run beside the other role's timed calls. The builtin is captured before
    any candidate code; a candidate that hooks the driver natively is not covered (docs/security.md)."""
    if device.startswith("cuda") and _device_sync is not None:
        _device_sync()


def cpu_l2_bytes() -> int:
    """The per-core L2 size from sysfs (falls back to 2 MiB)."""
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            if (index / "level").read_text().strip() == "2":
                text = (index / "size").read_text().strip().upper()
                unit = {"K": 2**10, "M": 2**20}.get(text[-1], 1)
                best = max(best, int(text.rstrip("KM")) * unit)
        except (OSError, ValueError):
            continue
    return best or 2 * 2**20


def cache_bytes(device: str) -> int:
    if device.startswith("cuda"):
        return int(torch.cuda.get_device_properties(torch.device(device)).L2_cache_size)
    return cpu_l2_bytes()


def _trial_count(estimate_ms: float, rule: TimingRule, share: float, slow_ms: float | None = None,
                 wall_ms: float | None = None, warmed: bool = False) -> tuple[int, int, bool]:
    """Warm-up calls and timed trials for one timing call that takes ``share`` of the rule's budget, and whether
    they were cut: a call estimated slower than ``slow_ms`` whose trials would take more than
    ``TIMING_TRUNCATE_MIN_MS`` gets ``TIMING_TRUNCATED_TRIALS`` trials after one warm-up call.

    Warm-up lasts ``rule.warmup_ms`` by the wall clock (``wall_ms``: one call and its synchronize, as the evaluator's
    clock saw it; a launch-bound kernel's device time would ask for many times more calls than that), and once this
    worker has already warmed this forward up under the same baseline (``warmed``) ``rule.rewarm_ms``, at least one
    call and at most ``rule.min_warmup_calls``."""
    estimate_ms = max(estimate_ms, 1e-4)
    per_call = max(estimate_ms, wall_ms or 0.0)
    if warmed:
        warmup = max(1, min(rule.min_warmup_calls, math.ceil(rule.rewarm_ms / per_call)))
    else:
        warmup = max(rule.min_warmup_calls, math.ceil(rule.warmup_ms / per_call))
    low, high = math.ceil(rule.min_trials * share), max(1, math.floor(rule.max_trials * share))
    trials = min(high, max(low, math.ceil(rule.budget_ms * share / estimate_ms)))
    if slow_ms is not None and estimate_ms > slow_ms and trials * estimate_ms > TIMING_TRUNCATE_MIN_MS:
        return 1, min(trials, TIMING_TRUNCATED_TRIALS), True
    return warmup, trials, False


def time_calls(fn: Callable[[], Any], device: str, rule: TimingRule, share: float = 1.0,
               max_trials: int | None = None, prepare: Callable[[int], None] | None = None,
               keep: Callable[[int, Any], None] | None = None, slow_ms: float | None = None,
               ring_bytes: int | None = None, warmed: bool = False, record: Any = None,
               estimate_ms: float | None = None) -> dict[str, Any]:
    """Time ``fn``: ``ESTIMATE_CALLS`` estimate calls and the warm-up (all on one input set), then individually
    timed trials, each on fresh inputs with a cache flush before it.

    ``share`` is the fraction of the rule's budget and trial bounds this call takes (the parent interleaves several
    calls of reference and candidate). ``prepare(i)`` runs before call ``i``, outside the timed region (it loads
    call ``i``'s fresh inputs). ``keep(i, out)`` receives every timed trial's output as soon as that trial ends
    (before anything else runs), so the parent can judge any of them; ``ring_bytes`` bounds the trials to as many
    outputs as fit. ``slow_ms`` is the time per call above which a kernel counts as far slower than the reference
    (few trials: see ``_trial_count``); ``warmed``: this worker already warmed this forward up under the same flags
    (a short warm-up only). ``estimate_ms``: the parent's estimate of one call (the median of this worker's previous
    command under the same flags): no estimate calls, and the ring bounds the trials once the first has shown its
    output's size. ``record``: a ``kernel_record.Recording`` switched on around each forward and its synchronize,
    off around everything else. Returns ``{"times_ms": [...], "warmup": n, "estimates": n, "flush_bytes": b,
    "truncated": bool, "split_ms": {...}}``, on CUDA with ``"peak_bytes": [...]`` (each timed trial's peak
    allocation) and ``"allocator"`` (the caching allocator's device allocations and retries during the timed
    trials); ``split_ms`` (where the command's time went, by the worker's own clock: before the trials, and of that
    the first input set, the estimates and the warm-up; the trials, the keeping of outputs, the calls themselves, the
    trials' prepare steps) is a diagnostic that decides nothing, and so is CUDA's ``sync_tail_ms``: from the end of
    the last warm-up call's work to an event recorded once the device-wide synchronize has returned, the part of a
    timed trial's events that the host's latency makes.
    """
    t_start = _perf_counter_ns()
    flush_bytes = int(rule.flush_l2_factor * cache_bytes(device))
    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device=device)
    prepare = prepare or _no_prepare
    known = estimate_ms if estimate_ms is not None and math.isfinite(estimate_ms) and estimate_ms > 0 else None
    estimates = 0 if known is not None else ESTIMATE_CALLS
    calls: Any = iter([None] * estimates)  # the estimate calls: no inputs of their own (they read the warm-up's set)
    walls: list[float] = []  # the evaluator's clock around each call and its synchronize
    events: list[tuple[Any, Any]] = []  # CUDA: the timed trials' event pairs, made before the first (as do_bench)
    prepared: list[int] = []  # nanoseconds each call's prepare step took (asking for and loading its inputs)
    peaks: list[int] = []  # CUDA: each timed trial's peak allocation beyond what was allocated before it
    on, off = (record.on, record.off) if record is not None else (_not_recorded, _no_sync)

    def next_inputs() -> int | None:
        """The next call's index, its inputs loaded (``prepare``), the time that took noted; None for an estimate
        call, which reads the inputs already loaded."""
        index = next(calls)
        if index is not None:
            t_prepare = _perf_counter_ns()
            prepare(index)
            prepared.append(_perf_counter_ns() - t_prepare)
        return index
    if device.startswith("cuda"):
        sync = torch.cuda.synchronize
        if record is not None:  # a window holds the kernels that run in it: the harness's queued draws finish
            # first (recording only), so the GPU is idle when it opens, where unrecorded the draws keep it busy
            # while the forward is launched. A trial's window opens with a spin kernel (``RECORD_LEAD_CYCLES``)
            # and the flush, which the recording leaves out (``flushed``), so the forward is launched while they
            # run, as unrecorded: opened with the flush alone, recorded calls still read 8-240 us slower on the
            # 80 GB H100 (h100-2026-12-06-g); with the spin, still 1.078 times slower (h100-2026-12-06-h)
            def on(timed: bool = False, flushed: bool = False) -> None:
                sync()
                record.on(timed, flushed)
                if flushed and RECORD_LEAD_CYCLES and _spin is not None:
                    _spin(RECORD_LEAD_CYCLES)

        def one() -> tuple[int | None, float, Any]:
            index = next_inputs()
            if record is not None:
                on(index is not None, True)
            flush.zero_()
            start, end = events.pop() if events else (_Event(enable_timing=True), _Event(enable_timing=True))
            before = None
            if index is not None:  # a timed trial: its peak allocation, outside the events
                before = _allocated()
                _reset_peak()
            t0 = _perf_counter_ns()  # the wall clock also waits for the flush: a bound, for warm-up only
            start.record()
            out = fn()
            sync()  # device-wide: work on side streams finishes before the end event
            end.record()
            end.synchronize()
            off()
            walls.append((_perf_counter_ns() - t0) / 1e6)
            if before is not None:
                peaks.append(max(0, _peak() - before))
            return index, float(start.elapsed_time(end)), out
    else:
        sync = _no_sync

        def one() -> tuple[int | None, float, Any]:
            index = next_inputs()
            flush.fill_(1)
            on(index is not None)
            t0 = _perf_counter_ns()
            out = fn()
            ms = (_perf_counter_ns() - t0) / 1e6
            off()
            walls.append(ms)
            return index, ms, out

    # the estimate and warm-up calls share one input set: only timed calls need contents of their own, and on the
    # CPU a redraw per estimate call cost more than the calls (a 256 MiB input: 27 of a pair's 156 s)
    prepare(FIRST_TIMED_CALL - 1)
    t_inputs = _perf_counter_ns()
    # one output alive at a time: the three held together made a 6 GiB output's timing worker hold 24 GiB and run
    # out of memory on an 80 GB H100 beside the other role's (h100-2026-12-06-c)
    estimated: list[float] = []
    out_bytes = 0
    for _ in range(estimates):
        _, ms, out = one()
        estimated.append(ms)
        out_bytes = output_bytes(out)  # the last one's counts
        del out
    t_estimated = _perf_counter_ns()
    estimate = float(known) if known is not None else _middle(estimated)
    warmup, trials, truncated = _trial_count(estimate, rule, share, slow_ms, _middle(walls) if walls else None,
                                             warmed)
    if max_trials is not None:
        trials = min(trials, max_trials)
    trials = _ring_bound(trials, ring_bytes, out_bytes)
    on()
    for _ in range(warmup):  # on the estimates' input set
        fn()
    tail = (_Event(enable_timing=True), _Event(enable_timing=True)) if device.startswith("cuda") else None
    if tail is not None:  # the last warm-up call's end, then the host's return from the synchronize: a diagnostic
        tail[0].record()
    sync()
    if tail is not None:
        tail[1].record()
        tail[1].synchronize()
    off()
    t_warm = _perf_counter_ns()
    calls = iter(range(FIRST_TIMED_CALL, 2**62))  # timed trials: one fresh input set each, from this index on
    if device.startswith("cuda"):
        events = [(_Event(enable_timing=True), _Event(enable_timing=True)) for _ in range(trials)]
    times: list[float] = []
    allocs = _allocator_counts(device)
    t_trials = _perf_counter_ns()
    kept_ns = 0
    while len(times) < trials:
        index, ms, out = one()
        assert index is not None
        times.append(ms)
        if not out_bytes:  # no estimate calls: the first trial's output sizes the ring
            out_bytes = output_bytes(out)
            trials = _ring_bound(trials, ring_bytes, out_bytes)
        if keep is not None:
            t_keep = _perf_counter_ns()
            keep(index, out)
            kept_ns += _perf_counter_ns() - t_keep
        del out
    t_end = _perf_counter_ns()
    split = {"before_trials": (t_trials - t_start) / 1e6, "trials": (t_end - t_trials) / 1e6, "keep": kept_ns / 1e6,
             "timed_calls": sum(walls[estimates:]), "prepare": sum(prepared) / 1e6,
             # of before_trials: the first input set asked for and loaded, the estimate calls, the warm-up
             "first_inputs": (t_inputs - t_start) / 1e6, "estimate_calls": (t_estimated - t_inputs) / 1e6,
             "warmup_calls": (t_warm - t_estimated) / 1e6}  # diagnostics from the worker's clock: they decide nothing
    result = {"times_ms": times, "warmup": warmup, "estimates": estimates, "flush_bytes": flush_bytes,
              "truncated": truncated, "split_ms": split}
    if tail is not None:  # what a timed trial's events also hold after its work: the device-wide synchronize's
        # return to this thread and the end event's launch (decides nothing; compared with the medians by command)
        result["sync_tail_ms"] = float(tail[0].elapsed_time(tail[1]))
    if peaks:
        result["peak_bytes"] = peaks
    if allocs is not None:  # device allocations and retries inside the timed trials: a diagnostic, decides nothing
        after = _allocator_counts(device) or allocs
        result["allocator"] = {k: after[k] - allocs[k] for k in allocs}
    return result


def _middle(values: list[float]) -> float:
    """The middle of ``values`` sorted (the median of an odd count): builtins only, as the rest of the timer."""
    return sorted(values)[len(values) // 2]


def _ring_bound(trials: int, ring_bytes: int | None, out_bytes: int) -> int:
    """At most as many trials as the ring holds outputs of ``out_bytes`` (at least one), where both are known."""
    if ring_bytes is not None and out_bytes:
        return max(1, min(trials, ring_bytes // out_bytes))
    return trials


def _allocator_counts(device: str) -> dict[str, int] | None:
    """On CUDA, the caching allocator's device allocations (``cudaMalloc``) and out-of-memory retries (each frees
    the cache and allocates again) so far; a timed trial that makes one pays it between its events."""
    if not device.startswith("cuda"):
        return None
    stats = _memory_stats(torch.device(device))
    return {"device_allocs": int(stats.get("num_device_alloc", 0)), "retries": int(stats.get("num_alloc_retries", 0))}


def output_bytes(out: Any) -> int:
    """Bytes of the tensors in a forward's result (one tensor, or a tuple or list of them)."""
    items = out if isinstance(out, (tuple, list)) else [out]
    return sum(int(_numel(x)) * int(_element_size(x)) for x in items if isinstance(x, torch.Tensor))


def burst(fn: Callable[[int], Any], device: str, calls: int) -> None:
    """``calls`` back-to-back calls (``fn(i)`` for call ``i``) and one device-wide synchronize: no flush, no events,
    nothing the candidate can reach to shorten. The parent times the whole command on its own clock
    (``kbv.eval.performance``)."""
    for i in range(calls):
        fn(i)
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _no_prepare(index: int) -> None:
    return None


def _no_sync() -> None:
    return None


def _not_recorded(timed: bool = False, flushed: bool = False) -> None:
    return None
