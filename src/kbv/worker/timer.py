"""Timing one forward call: warm-up, cache flush between trials, many individually timed trials.

On CUDA each trial is bracketed by events, with a device-wide synchronize before the end event so work on side
streams is counted; on the CPU each trial is timed with ``time.perf_counter_ns``. The raw per-trial times go back
to the parent, which computes the statistics.
"""

from __future__ import annotations

import math
import secrets
import time
from pathlib import Path
from typing import Any, Callable

import torch

from kbv.protocol import TIMING_TRUNCATED_TRIALS, TimingRule

_perf_counter_ns = time.perf_counter_ns  # captured before any candidate import
_randbelow = secrets.randbelow


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


def _trial_count(estimate_ms: float, rule: TimingRule, share: float,
                 cap_ms: float | None = None) -> tuple[int, int, bool]:
    """Warm-up calls and timed trials for one timing call that takes ``share`` of the rule's budget, and whether
    they were cut: trials that would take more than ``cap_ms`` become ``TIMING_TRUNCATED_TRIALS`` (or as many as
    fit) after one warm-up call."""
    estimate_ms = max(estimate_ms, 1e-4)
    warmup = max(rule.min_warmup_calls, math.ceil(rule.warmup_ms / estimate_ms))
    low, high = math.ceil(rule.min_trials * share), max(1, math.floor(rule.max_trials * share))
    trials = min(high, max(low, math.ceil(rule.budget_ms * share / estimate_ms)))
    if cap_ms is not None and trials * estimate_ms > cap_ms:
        return 1, max(1, min(trials, TIMING_TRUNCATED_TRIALS, math.floor(cap_ms / estimate_ms) or 1)), True
    return warmup, trials, False


def time_calls(fn: Callable[[], Any], device: str, rule: TimingRule, share: float = 1.0,
               max_trials: int | None = None, prepare: Callable[[], None] | None = None,
               keep: Callable[[Any], None] | None = None, cap_ms: float | None = None) -> dict[str, Any]:
    """Time ``fn``: three estimate calls, warm-up, then individually timed trials with a cache flush before each.

    ``share`` is the fraction of the rule's budget and trial bounds this call takes (the parent interleaves several
    calls of reference and candidate). ``prepare`` runs before every call, outside the timed region (it loads
    fresh input contents). ``keep`` receives the output of one timed trial, picked at random, as soon as that trial
    ends (before anything else runs): the timed calls' own outputs get judged, not only calls outside the timer.
    ``cap_ms`` bounds the trials' total time (a kernel far slower than the reference: see ``_trial_count``).
    Returns ``{"times_ms": [...], "warmup": n, "flush_bytes": b, "truncated": bool}``.
    """
    flush_bytes = int(rule.flush_l2_factor * cache_bytes(device))
    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device=device)
    prepare = prepare or _no_sync
    if device.startswith("cuda"):
        sync = torch.cuda.synchronize

        def one() -> tuple[float, Any]:
            prepare()
            flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            sync()  # device-wide: work on side streams finishes before the end event
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)), out
    else:
        sync = _no_sync

        def one() -> tuple[float, Any]:
            prepare()
            flush.fill_(1)
            t0 = _perf_counter_ns()
            out = fn()
            return (_perf_counter_ns() - t0) / 1e6, out

    estimate = sorted(one()[0] for _ in range(3))[1]
    warmup, trials, truncated = _trial_count(estimate, rule, share, cap_ms)
    if max_trials is not None:
        trials = min(trials, max_trials)
    for _ in range(warmup):
        prepare()
        fn()
    sync()
    keep_at = _randbelow(trials) if keep is not None else -1
    times: list[float] = []
    for index in range(trials):
        ms, out = one()
        times.append(ms)
        if index == keep_at and keep is not None:
            keep(out)
        del out
    return {"times_ms": times, "warmup": warmup, "flush_bytes": flush_bytes, "truncated": truncated}


def burst(fn: Callable[[], Any], device: str, calls: int) -> None:
    """``calls`` back-to-back calls and one device-wide synchronize: no flush, no events, nothing the candidate can
    reach to shorten. The parent times the whole command on its own clock (``PairEvaluation._burst_check``)."""
    for _ in range(calls):
        fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _no_sync() -> None:
    return None
