import torch
import torch.nn as nn


class Model(nn.Module):
    """Attention probabilities: softmax(q @ k^T * head_dim**-0.5) over keys."""

    def __init__(self, head_dim: int):
        super().__init__()
        self.scale = head_dim ** -0.5

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1)


batch_size = 32
seq_len = 2048
head_dim = 128


def get_inputs():
    return [torch.rand(batch_size, seq_len, head_dim), torch.rand(batch_size, seq_len, head_dim)]


def get_init_inputs():
    return [head_dim]


KBV_PROFILES = {"small": {"batch_size": 4, "seq_len": 128, "head_dim": 64}}
