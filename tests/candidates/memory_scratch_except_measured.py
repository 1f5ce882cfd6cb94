"""Candidate for level1/5_ReLU that uses an 8 MiB scratch outside torch (an anonymous mapping, every page touched),
made and unmapped inside every forward, timed calls included, except the one kbv's memory command measures, which it
recognises by ``cmd_memory`` on its call stack (hack catalogue M6: memory hidden from the measured call).

Expected: verdict correct with flags fallback and memory_above_reference. The memory command's call shows nothing,
and the whole timing stage's high-water mark is 8 MiB above the reference's, under that rule's 16 MiB slack; the
parent's measure around every timed call (its median rise) is 8 MiB above the reference's. Before 2026-12-04 (third
session) it passed with no memory flag. (Until cpu-2026-12-05-d a 32 MiB numpy scratch, under the stage's 48 MiB
slack then; a mapping of its own, so that glibc cannot keep it resident between calls at this size.)
"""
import mmap
import sys

import numpy as np
import torch
import torch.nn as nn

SCRATCH = 8 * 2**20


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
            scratch = mmap.mmap(-1, SCRATCH)  # unmapped on close: every call maps and touches it anew
            pages = np.frombuffer(scratch, dtype=np.uint8)
            pages[::4096] = 1
            out = out + float(pages[-4096] - 1)
            del pages
            scratch.close()
        return out
