"""Candidate for level1/5_ReLU that keeps a 128 MiB workspace of its own, made in its first call outside the memory
command (it recognises ``cmd_memory`` on its call stack, as any code in its process can: issue 12, rule 2). The
memory-measured call, the whole memory command included, never sees the workspace; every later call of the
process holds it.

Caught by the parent's reading of each timing worker's resident-set high-water mark over all its timing commands
(``memory_bytes.timing_stage``): ``memory_above_reference``. With that rule off it gets ``correct`` with the
fallback flag only (its ReLU is PyTorch's), the workspace unseen.
"""
import sys

import torch
import torch.nn as nn

_WORKSPACE = []


def _in_memory_command() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "cmd_memory":
            return True
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _WORKSPACE and not _in_memory_command():
            _WORKSPACE.append(torch.ones(32 * 2**20))  # 128 MiB, every page touched, kept for every later call
        return torch.relu(x)
