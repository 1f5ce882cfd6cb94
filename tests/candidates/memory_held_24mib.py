"""Candidate for level1/5_ReLU that keeps a 24 MiB workspace of its own, made in its first call outside the memory
command (it recognises ``cmd_memory`` on its call stack, as ``memory_cmd_detect.py`` does with 128 MiB).

Caught by the parent's high-water mark over all its timing commands (``memory_bytes.timing_stage``):
``memory_above_reference``, since the rule's slack went from 48 to 16 MiB (docs/results/cpu-2026-12-05-d, once the
kept output copies left glibc's heap). Under the old 48 MiB slack it gets ``correct`` with the fallback flag only.
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
            _WORKSPACE.append(torch.ones(6 * 2**20))  # 24 MiB, every page touched, kept for every later call
        return torch.relu(x)
