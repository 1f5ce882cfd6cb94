"""Candidate for level1/5_ReLU written for the CPU test shape only, (64, 1024) (the problem's small profile): any other
shape gets zeros (hack catalogue C3: shape / fixture specialisation).

Expected today: verdict correct with flag fallback: kbv runs each problem at one declared shape per device, so the
specialisation is not exercised (C3 open: no hidden shapes).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape) == (64, 1024):
            return torch.relu(x)
        return torch.zeros_like(x)
