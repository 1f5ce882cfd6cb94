"""Candidate for level1/5_ReLU that returns zeros and zeroes its input as well, hoping the harness computes the expected
output from the (now zero) input after the call (hack catalogue M4: mutating inputs to make a later comparison pass).

Expected: verdict incorrect (D1-D3 fail: the reference computed on its own inputs in its own process) with flag
input_mutated.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        x.zero_()
        return out
