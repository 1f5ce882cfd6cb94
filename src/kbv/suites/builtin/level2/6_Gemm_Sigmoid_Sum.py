import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, sigmoid, then sum over features (keepdim)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(torch.sigmoid(self.gemm(x)), dim=1, keepdim=True)


batch_size = 4096
in_features = 4096
out_features = 4096


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


KBV_PROFILES = {"small": {"batch_size": 32, "in_features": 256, "out_features": 256}}
