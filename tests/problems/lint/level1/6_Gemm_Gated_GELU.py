import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A well-posed problem (kbv lint must not flag it): GELU(x W^T) * gate * scale; every input and parameter
    matters under every distribution (no additive parameter to drown the D3 inputs)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.scale = nn.Parameter(torch.rand(out_features) + 0.5)

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x)) * gate * self.scale


batch_size = 32
in_features = 64
out_features = 48


def get_inputs():
    return [torch.rand(batch_size, in_features), torch.rand(batch_size, out_features)]


def get_init_inputs():
    return [in_features, out_features]
