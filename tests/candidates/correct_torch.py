"""Candidate for level1/5_ReLU -- expected verdict: correct (plain PyTorch, x.clamp_min(0))."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clamp_min(0)
