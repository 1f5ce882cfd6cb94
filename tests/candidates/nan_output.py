"""Bad candidate for level1/5_ReLU -- expected verdict: incorrect (correct except one element is NaN)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x)
        y.view(-1)[y.numel() // 2] = float("nan")
        return y
