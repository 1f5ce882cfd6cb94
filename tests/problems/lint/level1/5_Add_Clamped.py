import torch
import torch.nn as nn


class Model(nn.Module):
    """x + min(y, 0): torch.rand inputs are never negative, so y never matters under D1-D3 (kbv lint must flag:
    ignores_inputs, input 1)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + torch.clamp(y, max=0.0)


batch_size = 16
dim = 128


def get_inputs():
    return [torch.rand(batch_size, dim), torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
