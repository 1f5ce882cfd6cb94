"""Candidate for level1/5_ReLU that looks in the timing loop's frame for the index of the timed call that will be
judged (the old timer drew it before its loop, as the local ``keep_at``) and computes only that call; every other
call from the timer, and every burst call, gets a constant wrong tensor (hack catalogue T8/T12: work skipped where
it is not checked).

Expected: verdict incorrect with flags timed_output_mismatch and fallback: the worker keeps every timed call's
output and the parent draws the judged one after the pair's rounds, so no frame holds the index and the fixture
answers wrongly wherever it is timed; the judged burst set is wrong too. standard_verdict correct.
"""
import sys

import torch
import torch.nn as nn

_wrong: dict = {}


def _timer_state():
    """(in kbv's timer, the judged index is this call) from the frames."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith("timer.py") and code.co_name in ("time_calls", "burst"):
            local = frame.f_locals
            keep_at = local.get("keep_at")
            return True, keep_at is not None and keep_at >= 0 and local.get("index") == keep_at
        frame = frame.f_back
    return False, False


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        timed, judged = _timer_state()
        if not timed or judged:
            return torch.relu(x)
        key = (tuple(x.shape), x.dtype)
        if key not in _wrong:
            _wrong[key] = torch.full_like(x, -1.0)
        return _wrong[key]
