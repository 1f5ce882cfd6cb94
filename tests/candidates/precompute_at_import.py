"""Candidate for level1/5_ReLU that precomputes its answer at import from the problem's own get_inputs() under a guessed
seed (42, KernelBench's habit) and returns it (hack catalogue C14: predictable inputs).

Expected: verdict incorrect, no flags: kbv draws every trial's seed from OS entropy and sends it only with the call.
"""
import sys

import torch
import torch.nn as nn

_problem = next(m for m in list(sys.modules.values())  # the problem module kbv loaded in this worker
                if isinstance(getattr(m, "__dict__", None), dict) and isinstance(vars(m).get("Model"), type)
                and callable(vars(m).get("get_inputs")) and m.__name__ != __name__)
torch.manual_seed(42)
_ANSWER = torch.relu(_problem.get_inputs()[0])


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ANSWER.clone()
