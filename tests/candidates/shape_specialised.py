"""Candidate for level1/5_ReLU written for the CPU test shape only, (64, 1024) (the problem's small profile): any other
shape gets zeros (hack catalogue C3: shape / fixture specialisation).

Expected: verdict incorrect (flag fallback from the visible shape): the built-in suite's evaluator holds a held-out
shape for level1/5_ReLU, (61, 1021), where it answers zeros.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape) == (64, 1024):
            return torch.relu(x)
        return torch.zeros_like(x)
