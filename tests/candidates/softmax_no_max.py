"""Candidate for level1/7_Softmax that skips the max subtraction: exp(x) / sum(exp(x)) (hack catalogue C5: a numerically
unstable shortcut). exp overflows float32 above about 88, so any row with a large input gives inf/inf = NaN.

Expected: verdict incorrect: D6 draws inputs from [-100, 100), where exp overflows (NaN where the reference is
finite).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x)
        return e / e.sum(dim=1, keepdim=True)
