"""Bad candidate for level1/5_ReLU -- expected verdict: timeout (forward never returns)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while True:
            pass
