"""Candidate for level1/5_ReLU whose worker burns the CPU whenever it has no forward to run: a thread started at
import through ``_thread`` (no ``threading`` record, no thread growth after the first call) spins while no forward
has run for 50 ms, that is while the reference is timed (on a CPU pinned for both roles it shares the reference's
core; on a GPU it could launch work there). Its own timed calls are honest.

Expected: verdict rejected with flag idle_work (the parent's reading of the worker's CPU clock while it had no
command); with that rule off, correct with no flag (tests/test_adversarial.py).
"""
import _thread
import time

import torch
import torch.nn as nn

_last = [time.perf_counter()]


def _spin() -> None:
    while True:
        if time.perf_counter() - _last[0] > 0.05:  # no forward for 50 ms: the other role is being timed
            end = time.perf_counter() + 0.005
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(0.002)


_thread.start_new_thread(_spin, ())


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _last[0] = time.perf_counter()
        out = torch.relu(x)
        _last[0] = time.perf_counter()
        return out
