"""WRONG on purpose (instructive bad candidate) for level1/13_Sum_Reduction: forgets keepdim=True.

The values are right, but the output has shape (batch, dim2) instead of the reference's (batch, 1, dim2).
Expected verdict: incorrect (shape mismatch, on every distribution). kbv does not broadcast or squeeze outputs.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim)  # bug: missing keepdim=True
