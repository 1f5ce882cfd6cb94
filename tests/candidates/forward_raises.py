"""Bad candidate for level1/5_ReLU -- expected verdict: runtime_error (forward raises)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("kbv test: this candidate fails in forward")
