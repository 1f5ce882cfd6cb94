"""Candidate for level1/5_ReLU that turns TF32 matmuls on from inside forward (after the harness set its flags).

Expected: verdict rejected with flag tamper (a changed numeric flag is reported as "flag ...").
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.backends.cuda.matmul.allow_tf32 = True
        return torch.relu(x)
