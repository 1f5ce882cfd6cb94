import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Gated MLP input projection: silu(gate(x)) * up(x)."""

    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.gate = nn.Linear(dim, hidden_dim, bias=False)
        self.up = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.gate(x)) * self.up(x)


batch_size = 4096
dim = 4096
hidden_dim = 8192


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return [dim, hidden_dim]


KBV_PROFILES = {"small": {"batch_size": 32, "dim": 256, "hidden_dim": 512}}
