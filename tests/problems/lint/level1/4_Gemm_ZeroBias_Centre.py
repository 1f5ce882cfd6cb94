import torch
import torch.nn as nn


class Model(nn.Module):
    """A GEMM plus a zero-initialised bias, centred over the batch: the centring cancels any bias, so the bias never
    matters (kbv lint must flag: ignores_weights, parameter bias)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) / in_features ** 0.5)
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.weight.t() + self.bias
        return y - y.mean(dim=0, keepdim=True)


batch_size = 32
in_features = 64
out_features = 48


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
