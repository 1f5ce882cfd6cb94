"""Candidate for level1/7_Softmax that skips the max subtraction: exp(x) / sum(exp(x)) (hack catalogue C5: a numerically
unstable shortcut). exp overflows float32 above about 88, so any row with a large input gives inf/inf = NaN.

Expected today: verdict correct with flag fallback: kbv's largest inputs are D2's, torch.rand x 3 < 3. Gap (C5): no
large-magnitude inputs (and no float64 oracle).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x)
        return e / e.sum(dim=1, keepdim=True)
