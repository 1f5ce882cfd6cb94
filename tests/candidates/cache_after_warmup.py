"""Candidate for level1/5_ReLU that computes honestly for its first calls, then returns the output it cached for
the input tensor it was given (the same buffers come back on every timed call).

Expected: verdict incorrect with flag timed_output_mismatch (correct in the correctness stage, caught by the
re-check on fresh contents after timing), standard_verdict correct.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.cache = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        key = (id(x), x.data_ptr())
        if self.calls > 20 and key in self.cache:
            return self.cache[key]
        out = torch.relu(x)
        self.cache[key] = out
        return out
