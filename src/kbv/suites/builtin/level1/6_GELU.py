import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Exact (erf) GELU activation."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


batch_size = 4096
dim = 16384


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []


KBV_PROFILES = {"small": {"batch_size": 64, "dim": 1024}}
