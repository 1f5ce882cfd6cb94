"""Honest candidate for level1/5_ReLU whose output is column-major (strides (1, rows)): right values in an unusual but
legitimate layout (hack catalogue C9, the control: kbv must compare values, not layouts, and flag only zero strides).

Expected: verdict correct with flag fallback only (plain PyTorch).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x.t().contiguous()).t()
