"""WRONG on purpose (instructive bad candidate) for level1/8_LayerNorm: normalises without eps.

y = (x - mean) / sqrt(var) * weight + bias, i.e. LayerNorm with eps dropped. On D1/D2/D4 the row variance
(~0.083 * scale^2) dwarfs eps = 1e-5, so the error is ~1e-4 or less and it passes. On D3 (x0.01) the variance is
~8e-6, comparable to eps, and the outputs are off by a factor sqrt(1 + eps/var) ~ 1.5. Expected verdict:
incorrect (caught by D3). Keeps the reference's `self.ln` so the affine weight/bias are copied in.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: int):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dims = tuple(range(-len(self.ln.normalized_shape), 0))
        mean = x.mean(dim=dims, keepdim=True)
        var = x.var(dim=dims, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var) * self.ln.weight + self.ln.bias  # bug: no + self.ln.eps
