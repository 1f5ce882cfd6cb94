"""Candidate for tests/problems/level1/1_Repeat_Sum: right values, but returned as an expanded view (zero stride).

Expected: verdict rejected with flag degenerate_output.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1, keepdim=True).unsqueeze(1).expand(-1, 8, -1)
