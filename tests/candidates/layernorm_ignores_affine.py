"""Candidate for level1/8_LayerNorm that normalises but ignores the affine weight and bias (hack catalogue C11:
parameters left at their identity defaults). It keeps the reference's parameter names, so the reference's weight and
bias are copied into it; while those are nn.LayerNorm's defaults (all ones, all zeros), skipping them changes nothing.

Expected: verdict incorrect (every distribution): kbv perturbs the reference's parameters with fresh noise before
copying them in, so weight and bias are no longer 1 and 0. (Before that, this candidate was correct.)
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: int):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, unbiased=False, keepdim=True)
        return (x - mean) * torch.rsqrt(var + self.ln.eps)  # self.ln.weight and self.ln.bias never used
