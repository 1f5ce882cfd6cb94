"""Candidate for level1/5_ReLU that looks at one element and assumes every input shares its sign: a copy of the input if
it is non-negative, zeros otherwise (hack catalogue C4: narrow input distribution).

Expected today: verdict correct with flag fallback: every kbv distribution scales torch.rand by one factor, so all
elements of a trial share a sign. Gap (C4): no mixed-sign inputs.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x.reshape(-1)[0]) >= 0:
            return x.clone()
        return torch.zeros_like(x)
