"""Bad candidate for level1/5_ReLU -- expected verdict: runtime_error (ModelNew.__init__ raises)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        raise ValueError("kbv test: this candidate fails in __init__")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
