import torch
import torch.nn as nn


class Model(nn.Module):
    """Minimum over a huge dimension of torch.rand inputs: the minimum of 2**23 uniform values is about 1e-7, inside
    the fp32 atol floor (1e-6), so all-zeros passes, and so does the minimum of another seed's inputs (kbv lint must
    flag: zeros, wrong_seed)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amin(x, dim=1)


batch_size = 1
dim = 1 << 23


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
