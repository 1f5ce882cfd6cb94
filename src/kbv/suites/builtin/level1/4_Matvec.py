import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix-vector product A @ B with A (M, K) and B (K, 1); memory-bound."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 8192
K = 8192


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, 1)]


def get_init_inputs():
    return []


KBV_PROFILES = {"small": {"M": 256, "K": 512}}
