"""Bad candidate for level1/5_ReLU -- expected verdict: incorrect (output shape (batch, dim - 1))."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)[:, :-1]
