"""Candidate for level1/5_ReLU that tries to learn a later timed call's inputs before that call is due (hack catalogue
T7/C14): in its first timed call of a timing command it takes the worker's channel to the parent (Session.ask, found
through the timing loop's frames) and asks for the inputs of the call five ahead, to compute that answer while it is
not timed.

Expected: verdict runtime_error (the performance stage's worker fails: the parent refuses a request out of turn,
kbv.eval.pacing, and kills the worker as a protocol failure). Its correctness trials are right (torch.relu), so the
standard verdict is runtime_error too (the standard protocol needed that timing).
"""
import sys

import torch
import torch.nn as nn


def _ahead() -> None:
    frame = sys._getframe(2)
    one = time_calls = cmd_time = None
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith("timer.py"):
            one = frame if code.co_name == "one" else one
            time_calls = frame if code.co_name == "time_calls" else time_calls
        elif code.co_filename.endswith("session.py") and code.co_name == "cmd_time":
            cmd_time = frame
        frame = frame.f_back
    if one is None or time_calls is None or cmd_time is None or "trials" not in time_calls.f_locals:
        return
    prepare = time_calls.f_locals["prepare"]
    session = dict(zip(prepare.__code__.co_freevars, (c.cell_contents for c in prepare.__closure__)))["self"]
    session.ask([cmd_time.f_locals["baseline"], one.f_locals["index"] + 5])


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _ahead()
        return torch.relu(x)
