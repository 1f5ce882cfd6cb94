"""Candidate for level1/5_ReLU that raises its own torch thread count at import (hack catalogue T2: more CPU than the
reference; kbv runs both roles with one torch thread on the CPU): torch.set_num_threads(4), so ATen's ReLU runs on
four threads (on every core the worker may use; kbv's parent pins both roles to the same CPUs).

Expected: verdict rejected with flags background_threads and fallback. The extra OpenMP threads start in the first
forward, after the parent's CPU baseline (taken before any forward), so they are growth beyond the reference's.
untimed_work may come too: four threads on the two pinned CPUs of a 2-core machine slow the worker's own untimed
steps (loading inputs, keeping outputs) beyond the reference's (seen once in CI, 2026-12-03)."""
import torch
import torch.nn as nn

torch.set_num_threads(4)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
