"""Correct candidate for level2/3_Matmul_Scale_Residual: a PyTorch-only algebraic rewrite (no custom kernel).

The reference computes y = linear(x); y * s + y (the residual is a detached copy of y), i.e. y * (1 + s).
That folds into one GEMM call: torch.addmm(bias, x, W^T, beta=1+s, alpha=1+s) = (1+s) * (x W^T + bias),
which saves the two extra elementwise passes and the copy. An example of a candidate that uses PyTorch only.
Keeps the reference's `self.matmul` so the weights are copied in.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scaling_factor: float):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = 1.0 + float(self.scaling_factor)
        x2 = x.reshape(-1, x.shape[-1])
        y = torch.addmm(self.matmul.bias, x2, self.matmul.weight.t(), beta=f, alpha=f)
        return y.reshape(*x.shape[:-1], y.shape[-1])
