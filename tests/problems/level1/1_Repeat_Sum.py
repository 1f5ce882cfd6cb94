import torch
import torch.nn as nn


class Model(nn.Module):
    """Row sums repeated along a new middle dimension (a test problem whose output repeats values)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1, keepdim=True).unsqueeze(1).repeat(1, copies, 1)


batch_size = 32
dim = 256
copies = 8


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
