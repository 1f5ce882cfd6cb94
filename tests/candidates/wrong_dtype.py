"""Bad candidate for level1/5_ReLU -- expected verdict: incorrect (right values, but float64 output)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).to(torch.float64)
