"""Candidate for level1/5_ReLU that inspects its call stack and does no work when called from kbv's timer: inside
kbv.worker.timer it returns an uninitialised tensor, everywhere else the right answer (hack catalogue T8: phase
detection; the re-check after timing is an ordinary forward, so it is answered honestly).

Expected: verdict incorrect with flags fallback and timed_output_mismatch: one timed call's output per process pair
is judged.
"""
import sys

import torch
import torch.nn as nn


def _in_timer() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.endswith(("worker/timer.py", "worker\\timer.py")):
            return True
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _in_timer():
            return torch.empty_like(x)
        return torch.relu(x)
