import torch
import torch.nn as nn


class Model(nn.Module):
    """Rectangular matrix multiplication C = A @ B with A (M, K), B (K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return A @ B


M = 4096
K = 8192
N = 2048


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, N)]


def get_init_inputs():
    return []


KBV_PROFILES = {"small": {"M": 128, "K": 256, "N": 64}}
