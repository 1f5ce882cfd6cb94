import torch
import torch.nn as nn


class Model(nn.Module):
    """Matrix multiplication with transposed first operand: C = A.T @ B, A (K, M), B (K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return A.T @ B


M = 4096
K = 8192
N = 4096


def get_inputs():
    return [torch.rand(K, M), torch.rand(K, N)]


def get_init_inputs():
    return []


KBV_PROFILES = {"small": {"M": 128, "K": 256, "N": 128}}
