"""Candidate for level1/10_BatchNorm2d that normalises with batch statistics but never updates the running stats.

Expected: verdict correct (the training-mode output is right) with flag buffer_mismatch (the reference's
running_mean/running_var moved, this candidate's did not).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=(0, 2, 3), keepdim=True)
        var = x.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
        w = self.bn.weight.view(1, -1, 1, 1)
        b = self.bn.bias.view(1, -1, 1, 1)
        return (x - mean) / torch.sqrt(var + self.bn.eps) * w + b
