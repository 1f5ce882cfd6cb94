"""Candidate for level1/5_ReLU that computes in place and returns its input: right values, broken rules.

Expected: verdict rejected with flags output_aliases_input (every distribution) and input_mutated (D4, where
ReLU changes the input), standard_verdict correct (KernelBench checks neither).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.relu_()
