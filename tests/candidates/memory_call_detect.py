"""Candidate for level1/5_ReLU that uses a 32 MiB scratch buffer outside torch (numpy) in every forward except the
one kbv measures for memory, which it recognises by kbv.worker.memory on its call stack (hack catalogue M6: memory
hidden from the measured call). Timed calls skip the scratch too, so its timing stays clean.

Expected today: verdict correct with flag fallback: a gap. Peak memory is measured on the memory command's calls
only (VmHWM reset around them), so the calls that allocate are never measured. Catching it: the whole command's or
worker's peak (the parent's VmHWM of each worker, correctness stage included) held against the reference's
(memory_above_reference).
"""
import sys

import numpy as np
import torch
import torch.nn as nn


def _unmeasured() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.endswith(("worker/memory.py", "worker/timer.py")):
            return False
        frame = frame.f_back
    return True


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(x)
        if _unmeasured():
            scratch = np.ones(8 * 2**20, dtype=np.float32)  # 32 MiB, every page touched
            out = out + float(scratch[-1] - 1.0)
        return out
