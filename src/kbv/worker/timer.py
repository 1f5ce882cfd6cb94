"""Timing one forward call: warm-up, cache flush between trials, many individually timed trials.

On CUDA each trial is bracketed by events, with a device-wide synchronize before the end event so work on side
streams is counted; on the CPU each trial is timed with ``time.perf_counter_ns``. The raw per-trial times go back
to the parent, which computes the statistics.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable

import torch

from kbv.protocol import TimingRule

_perf_counter_ns = time.perf_counter_ns  # captured before any candidate import


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


def _trial_count(estimate_ms: float, rule: TimingRule) -> tuple[int, int]:
    estimate_ms = max(estimate_ms, 1e-4)
    warmup = max(rule.min_warmup_calls, math.ceil(rule.warmup_ms / estimate_ms))
    trials = min(rule.max_trials, max(rule.min_trials, math.ceil(rule.budget_ms / estimate_ms)))
    return warmup, trials


def time_calls(fn: Callable[[], Any], device: str, rule: TimingRule, max_trials: int | None = None) -> dict[str, Any]:
    """Time ``fn`` and return ``{"times_ms": [...], "warmup": n, "flush_bytes": b}``."""
    flush_bytes = int(rule.flush_l2_factor * cache_bytes(device))
    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device=device)
    if device.startswith("cuda"):
        times = _time_cuda(fn, flush, rule, max_trials)
    else:
        times = _time_cpu(fn, flush, rule, max_trials)
    return {"times_ms": times[1], "warmup": times[0], "flush_bytes": flush_bytes}


def _time_cuda(fn: Callable[[], Any], flush: torch.Tensor, rule: TimingRule, cap: int | None) -> tuple[int, list[float]]:
    sync = torch.cuda.synchronize

    def one() -> float:
        flush.zero_()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        sync()  # device-wide: side streams finish before the end event
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))

    estimate = sorted(one() for _ in range(3))[1]
    warmup, trials = _trial_count(estimate, rule)
    if cap is not None:
        trials = min(trials, cap)
    for _ in range(warmup):
        fn()
    sync()
    return warmup, [one() for _ in range(trials)]


def _time_cpu(fn: Callable[[], Any], flush: torch.Tensor, rule: TimingRule, cap: int | None) -> tuple[int, list[float]]:
    def one() -> float:
        flush.fill_(1)
        t0 = _perf_counter_ns()
        fn()
        return (_perf_counter_ns() - t0) / 1e6

    estimate = sorted(one() for _ in range(3))[1]
    warmup, trials = _trial_count(estimate, rule)
    if cap is not None:
        trials = min(trials, cap)
    for _ in range(warmup):
        fn()
    return warmup, [one() for _ in range(trials)]
