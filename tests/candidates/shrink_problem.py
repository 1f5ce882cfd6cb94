"""Candidate for level1/5_ReLU that edits the problem module loaded in its worker so inputs come out smaller.

Expected: verdict incorrect with flags tamper (problem.get_inputs named), fallback and timed_output_mismatch. Its
correctness trials run on the inputs the judge lends (kbv.worker.lending), at the problem's own size, so those pass;
its timed calls draw smaller inputs in its own worker, and the judged timed call's output has the wrong shape
against the reference's on the inputs the parent handed over.
"""
import sys

import torch
import torch.nn as nn

_problem = sys.modules.get("kbv_problem")
if _problem is not None:
    _original = _problem.get_inputs
    _problem.get_inputs = lambda: [x[:1] for x in _original()]


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
