"""Honest but far slower than the reference, for level1/5_ReLU: right outputs after sleeping 0.75 s in every call.

Expected: correct, flag timing_truncated: timed once with few trials (not until the stage's time limit), its speedup
recorded as an upper bound (speedup.<baseline>.bound = "upper").
"""
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.75)
        return torch.relu(x)
