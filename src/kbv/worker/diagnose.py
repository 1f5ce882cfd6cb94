"""Diagnostics of a timing command that decide nothing: where the worker's own time went.

``KBV_PROFILE_TIMING=1`` in kbv's environment (passed to every worker) runs each baseline's trials under
``cProfile`` and returns the functions that took the most time (``timing_ms.worker_profile`` in the record), and
times a digest of the last kept output in a tight loop (``split_ms.digest_hot``) beside the digests the trials
paid. It is for finding harness overhead on a new machine; the profiler slows every Python call it sees.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import pstats
import statistics
import time
from typing import Any, Callable, Iterator

import torch

PROFILE_ENV = "KBV_PROFILE_TIMING"
PROFILE_LINES = 30  # functions listed, by own time and by cumulative time each


class Profile:
    text: list[str] | None = None


@contextlib.contextmanager
def profiled(on: bool) -> Iterator[Profile]:
    """Run the body under ``cProfile`` when ``on``; the yielded object's ``text`` is then set on exit: the top
    functions by own time, then by cumulative time (one line each, pstats' columns)."""
    result = Profile()
    if not on:
        yield result
        return
    prof = cProfile.Profile()
    prof.enable()
    try:
        yield result
    finally:
        prof.disable()
        lines: list[str] = []
        for key in ("tottime", "cumulative"):
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats(key).print_stats(PROFILE_LINES)
            body = out.getvalue().splitlines()
            start = next((i for i, line in enumerate(body) if line.lstrip().startswith("ncalls")), 0)
            lines += [f"by {key}:"] + [line.rstrip() for line in body[start:] if line.strip()]
        result.text = lines


def median_ms(fn: Callable[[], Any], sync: Callable[[], Any], calls: int = 20) -> float:
    """Median milliseconds of ``fn`` called back to back, each followed by ``sync`` (a GPU's synchronize)."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        sync()
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(times)


def sync_of(device: str) -> Callable[[], Any]:
    """What waits for a device's queued work: ``torch.cuda.synchronize`` on a GPU, nothing on the CPU."""
    return torch.cuda.synchronize if device.startswith("cuda") else _nothing


def _nothing() -> None:
    return None
