import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU activation."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 4096
dim = 16384


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []


KBV_PROFILES = {"small": {"batch_size": 512, "dim": 4096}}
