"""Bad candidate for level1/5_ReLU -- expected verdict: compile_error (RuntimeError raised at import)."""
import torch
import torch.nn as nn

raise RuntimeError("kbv test: this candidate fails at import time")


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
