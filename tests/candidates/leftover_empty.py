"""Candidate for level1/5_ReLU that computes nothing and returns torch.empty_like(x), hoping the allocator hands back
the block that held the reference's (just freed) output (hack catalogue M1, the Sakana AI CUDA Engineer hole).

Expected: verdict incorrect, no flags: kbv runs the reference in another process, so no block in this one ever held
the answer.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)
