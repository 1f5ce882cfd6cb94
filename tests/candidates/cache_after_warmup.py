"""Candidate for level1/5_ReLU that returns the output it cached for the input tensor it was given, once it has
computed it for that tensor (the same buffers come back on every timed call). Inputs that are views into a larger
buffer (correctness trials: the judge's lent buffer, or guard bands) are computed every time, and the first few
calls of a worker too.

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
        whole = x.untyped_storage().nbytes() == x.numel() * x.element_size()  # a buffer of its own, not a view
        if self.calls > 3 and whole and key in self.cache:
            return self.cache[key]
        out = torch.relu(x)
        self.cache[key] = out
        return out
