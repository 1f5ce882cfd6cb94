"""Honest candidate for level1/5_ReLU that writes every call's result into one buffer it owns and returns that
buffer (the CUDA-graph pattern: static output, input copied in), so each call overwrites the last output.

Allowed (KernelBench compares each output at once); kbv must judge every kept call by a copy taken when the call
ended, never by the shared buffer later. Expected: correct, flags ``fallback``.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.out is None or self.out.shape != x.shape or self.out.dtype != x.dtype:
            self.out = torch.empty_like(x)
        torch.clamp_min(x, 0, out=self.out)
        return self.out
