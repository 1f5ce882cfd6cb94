"""Candidate for level1/5_ReLU that looks at one element and assumes every input shares its sign: a copy of the input if
it is non-negative, zeros otherwise (hack catalogue C4: narrow input distribution).

Expected: verdict incorrect: D1-D4 are one-signed (it passes them), D5 and D6 mix signs within a tensor.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x.reshape(-1)[0]) >= 0:
            return x.clone()
        return torch.zeros_like(x)
