import torch
import torch.nn as nn


class Model(nn.Module):
    """Batched matrix multiplication C[b] = A[b] @ B[b]."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


batch_size = 128
M = 512
K = 512
N = 1024


def get_inputs():
    return [torch.rand(batch_size, M, K), torch.rand(batch_size, K, N)]


def get_init_inputs():
    return []


KBV_PROFILES = {"small": {"batch_size": 8, "M": 64, "K": 64, "N": 64}}
