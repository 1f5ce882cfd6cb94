"""Candidate for level1/5_ReLU that does no work in kbv's burst (the back-to-back calls the parent times on its own
clock): inside kbv.worker.timer.burst it returns a constant wrong tensor, everywhere else the right answer (hack
catalogue T8: behaviour that differs in the calls that were never judged; a fast burst also hides a timer cheat
from the clock cross-check).

Expected: verdict incorrect with flags timed_output_mismatch and fallback: one of the burst's input sets, drawn
after the burst, is judged like a timed call. standard_verdict correct.
"""
import sys

import torch
import torch.nn as nn

_wrong: dict = {}


def _in_burst() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "burst" and code.co_filename.endswith(("worker/timer.py", "worker\\timer.py")):
            return True
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _in_burst():
            return torch.relu(x)
        key = (tuple(x.shape), x.dtype)
        if key not in _wrong:
            _wrong[key] = torch.full_like(x, -1.0)
        return _wrong[key]
