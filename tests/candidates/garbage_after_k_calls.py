"""Candidate for level1/5_ReLU that tells the phases apart by counting its calls (hack catalogue T8): honest
for its first 60 calls in each process (the correctness stage makes fewer than 20: 12 trials and a few probes),
zeros afterwards, hoping later calls (timing) are never checked.

Expected: verdict incorrect with flags fallback and timed_output_mismatch (the correctness stage saw honest outputs;
the call after timing, judged on fresh contents, gets zeros); standard_verdict correct.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls <= 60:
            return torch.relu(x)
        return torch.zeros_like(x)
