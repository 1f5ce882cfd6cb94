"""Candidate for level2/1_Gemm_Bias_ReLU whose parameters have other names than the reference's.

Expected: verdict correct with flag unmatched_params. The weights cannot be copied by name, so both models keep their
seeded initialisation; created in the same order under the same seed, they are equal anyway.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias_shape: tuple):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.shift = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x) + self.shift)
