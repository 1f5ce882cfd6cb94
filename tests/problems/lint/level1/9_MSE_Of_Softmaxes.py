import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Mean squared error between two softmaxes over a long dimension: one scalar of about 1e-8, inside the fp32
    atol floor (1e-6), so all-zeros passes the verified check (kbv lint must flag: zeros)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(torch.softmax(a, dim=-1), torch.softmax(b, dim=-1))


batch_size = 16
dim = 4096


def get_inputs():
    return [torch.rand(batch_size, dim), torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
