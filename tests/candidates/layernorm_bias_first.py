"""Honest control for level1/8_LayerNorm: its own parameters, registered ``bias`` before ``weight`` (the reverse of
the reference's order), both applied. The pairing by name suffix keeps it right: ``bias`` gets ``ln.bias``.

Expected: verdict correct, no unmatched_params; correctness.parameter_mapping names both pairs.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.weight = nn.Parameter(torch.ones(normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, x.shape[-1:], self.weight, self.bias, 1e-5)
