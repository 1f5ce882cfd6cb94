"""Stopping the idle timing worker (``kbv.sandbox.freeze``): every process of its tree stops, a child it forked
too, and each goes on once resumed."""

from __future__ import annotations

import subprocess
import sys
import time

from kbv.sandbox import freeze, observe

# a process that spins, and forks a child that spins too
SPINNER = """
import os, time
if os.fork() == 0:
    while True: pass
while True: pass
"""


def _cpu_ms(pid: int) -> float:
    return (observe.cpu_ns(pid) or 0) / 1e6


def test_a_stopped_tree_uses_no_cpu_until_it_is_resumed() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SPINNER])
    try:
        deadline = time.monotonic() + 10
        while len(observe.tree(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(observe.tree(proc.pid)) == 2  # the spinner and its child
        with freeze.stopped(proc.pid) as pids:
            assert sorted(pids) == sorted(observe.tree(proc.pid))
            assert all(freeze._state(p) == "T" for p in pids)
            before = _cpu_ms(proc.pid)
            time.sleep(0.3)
            assert _cpu_ms(proc.pid) - before < 5  # neither process ran while stopped
        before = _cpu_ms(proc.pid)
        time.sleep(0.3)
        assert _cpu_ms(proc.pid) - before > 50  # both run again
        assert all(freeze._state(p) in ("R", "S") for p in observe.tree(proc.pid))
        with freeze.stopped(None) as none:  # nothing to stop: freeze_idle off
            assert none == []
    finally:
        for pid in observe.tree(proc.pid):
            subprocess.run(["kill", "-9", str(pid)], check=False)
        proc.wait()
