"""Candidate for level1/5_ReLU that uses a 32 MiB scratch buffer outside torch (numpy), made and freed inside every
forward, timed calls included, except the one kbv's memory command measures, which it recognises by
``cmd_memory`` on its call stack (hack catalogue M6: memory hidden from the measured call).

Expected: verdict correct with flags fallback and memory_above_reference. The memory command's call shows nothing,
and the whole timing stage's high-water mark is 32 MiB above the reference's, under that rule's 48 MiB slack; the
parent's measure around every timed call (its median rise) is 32 MiB above the reference's. Before 2026-12-04 (third
session) it passed with no memory flag.
"""
import sys

import numpy as np
import torch
import torch.nn as nn


def _measured() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "cmd_memory":
            return True
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(x)
        if not _measured():
            scratch = np.ones(8 * 2**20, dtype=np.float32)  # 32 MiB, every page touched, freed on return
            out = out + float(scratch[-1] - 1.0)
        return out
