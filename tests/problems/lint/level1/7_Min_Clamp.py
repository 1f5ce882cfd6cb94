import torch
import torch.nn as nn


class Model(nn.Module):
    """min(x, 0) then clamp to [0, 1]: the output is zero for every input (KernelBench L2/83's design; kbv lint must
    flag: degenerate)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(torch.minimum(x, torch.zeros_like(x)), 0.0, 1.0)


batch_size = 16
dim = 128


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
