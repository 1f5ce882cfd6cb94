"""WRONG on purpose (instructive bad candidate) for level1/5_ReLU: returns its input unchanged.

On D1 (torch.rand, uniform [0, 1)), D2 (x3.0) and D3 (x0.01) every input is non-negative, so relu(x) == x and
this "kernel" matches the reference exactly. Only D4 (x -1.0, all inputs <= 0) exposes it: relu gives 0 there.
Expected verdict: incorrect (caught by D4 only). This is why kbv checks more than one input distribution.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()  # "ReLU is a no-op on the test inputs" -- true for torch.rand, false in general
