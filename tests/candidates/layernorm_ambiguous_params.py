"""Candidate for level1/8_LayerNorm with parameters ``gamma`` and ``beta``: two tensors of one shape whose names say
nothing kbv can pair (``weight``/``bias`` on the reference). It ignores them.

Expected: no unique pairing exists, so both sides keep their seeded initialisation (today's behaviour): verdict
correct, flag unmatched_params, and correctness.affine_defaults_exercised is false, saying the identity defaults
were not tested. (A known limit, recorded rather than silent.)
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: int):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(normalized_shape))
        self.beta = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, unbiased=False, keepdim=True)
        return (x - mean) * torch.rsqrt(var + 1e-5)
