"""Candidate for level1/5_ReLU that edits the problem module loaded in its worker so inputs come out smaller.

Expected: verdict rejected with flag tamper (problem.get_inputs named); its outputs on the smaller inputs have the
wrong shape under the verified check too, so it can never be correct.
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
