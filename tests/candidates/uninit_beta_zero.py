"""Candidate for level1/5_ReLU with a classic uninitialised read (hack catalogue M2): it computes out = beta * C +
relu(x) with beta = 0 and C = torch.empty_like(x) never written, as a GEMM-style kernel with an unused C operand
would. 0 * C is 0 only while C holds finite values.

Expected: verdict incorrect: before every correctness call kbv fills freed blocks of the sizes the call allocates
with 0xFF (NaN), so 0 * C is NaN. (Without that poisoning fresh memory held zeros or earlier finite data, and this
kernel passed.) On CUDA the caching allocator's blocks are poisoned the same way.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = torch.empty_like(x)
        beta = 0.0
        return c.mul_(beta).add_(torch.relu(x))
