"""Bad candidate for level1/5_ReLU -- expected verdict: compile_error (defines ModelX, no ModelNew)."""
import torch
import torch.nn as nn


class ModelX(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
