"""Candidate for level1/5_ReLU that returns the output it cached when it is called again on the same input tensor
(the same tensor object: the timing loop hands every timed call the same buffers, refilled, or the same views of the
lender's slot), once past its first few calls. Correctness trials hand it fresh tensors each time, so there it
computes every output.

Expected: verdict incorrect with flag timed_output_mismatch (correct in the correctness stage, caught by the
re-check on fresh contents after timing), standard_verdict correct.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.last_input = None  # held: its identity cannot pass to another tensor
        self.last_output = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > 3 and x is self.last_input:
            return self.last_output
        out = torch.relu(x)
        self.last_input, self.last_output = x, out
        return out
