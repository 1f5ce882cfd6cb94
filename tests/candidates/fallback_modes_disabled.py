"""Candidate for level1/5_ReLU that calls torch.relu with the dispatch modes switched off
(torch.utils._python_dispatch._disable_current_modes), so a TorchDispatchMode recording the forward sees nothing (hack
catalogue F1: library fallback hidden from the dispatch route).

Expected: verdict correct with flag fallback: the CPU profiler that runs beside the recorder sees aten::relu (hidden_ops).
"""
import torch
import torch.nn as nn
from torch.utils._python_dispatch import _disable_current_modes


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with _disable_current_modes():
            return torch.relu(x)
