"""Bad candidate for level1/5_ReLU -- expected verdict: incorrect (always zeros; right only where x <= 0, i.e. D4)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)
