"""Stopping a timing worker while the other role is timed (issue 12): no worker runs beside another's timing.

A timing worker waits for its next command while the other role's worker is timed, and a candidate's process can
use that time: a thread that launches GPU work onto the device the reference is being timed on (on the H100 a
CUDA graph of 120 matmuls replayed once per idle spell read the reference 7.3 times slower, in every one of its
commands: docs/results/h100-2026-12-06), or that spins on the CPUs the timed worker was pinned to. The parent
stops every process of the idle worker's tree (``SIGSTOP``, which no process can catch, block or ignore) before it
sends the other role its timing command, and lets them go on (``SIGCONT``) once that command has replied: no
thread of the idle worker runs, so none can launch, while the other is timed. Both roles alike. Work the stopped
process had already queued on a GPU still runs (stopping a process does not stop its kernels): that is left to the
reference's own times (``reference_slowed``: among them the clean command, timed once the candidate's processes
have been killed, which does end their kernels; ``kbv.eval.performance``).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

from kbv.sandbox import observe

STOP_WAIT_S = 0.05  # how long to wait for every stopped process to read as stopped (``T`` in /proc/<pid>/stat)


def _state(pid: int) -> str | None:
    fields = observe.stat_fields(pid)
    return fields[0].decode() if fields else None


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            continue


def stop(pid: int) -> list[int]:
    """Stop ``pid`` and every process under it; returns the processes stopped. Read the tree again after stopping
    (a fork between the reading and the signal) until no new process appears, then wait up to ``STOP_WAIT_S`` for
    each to read as stopped."""
    stopped: list[int] = []
    for _ in range(4):
        new = [p for p in observe.tree(pid) if p not in stopped]
        if not new:
            break
        _signal(new, signal.SIGSTOP)
        stopped += new
    until = time.monotonic() + STOP_WAIT_S
    for p in stopped:
        while _state(p) not in ("T", "t", "Z", "X", None) and time.monotonic() < until:
            time.sleep(0.0002)
    return stopped


def resume(pids: list[int]) -> None:
    _signal(pids, signal.SIGCONT)


@contextmanager
def stopped(pid: int | None) -> Iterator[list[int]]:
    """``pid``'s tree stopped for the block (nothing where ``pid`` is None), and resumed after it whatever happens."""
    pids = stop(pid) if pid is not None else []
    try:
        yield pids
    finally:
        resume(pids)
