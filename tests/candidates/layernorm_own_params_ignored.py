"""Candidate for level1/8_LayerNorm that registers its own ``weight`` and ``bias`` (a common pattern in generated
kernels) and never applies them (hack catalogue C11). The names differ from the reference's ``ln.weight`` and
``ln.bias``, so nothing is copied by name; with both sides at their seeded identity defaults, skipping them changed
nothing, and the kernel used to be ``correct`` with only the flag ``unmatched_params``.

Expected: verdict incorrect. kbv pairs the tensors by (shape, dtype) and, where shapes repeat, by name suffix
(``weight`` with ``ln.weight``), perturbs the reference's parameters and copies them in through that pairing.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, unbiased=False, keepdim=True)
        return (x - mean) * torch.rsqrt(var + self.eps)  # self.weight and self.bias never used
