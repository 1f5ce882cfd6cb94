"""CUDA candidate for level1/5_ReLU that makes a 64 MiB scratch with PyTorch's caching allocator in every forward,
timed calls included, except the one kbv's memory command measures, which it recognises by ``cmd_memory`` on its
call stack (hack catalogue M6 and T8: memory hidden from the measured call).

Expected: verdict correct with flags fallback and memory_above_reference. The memory command's call shows nothing
extra and the driver's figure after it holds no scratch yet (64 MiB is under its 128 MiB slack in any case); every
timed call's own peak allocation, which both roles' timers report (``memory_bytes.timed_calls``), shows the 64 MiB.
Before h100-2026-12-05-c it passed with no memory flag (with the per-call rule off it still does:
tests/test_adversarial_gpu.py).
"""
import sys

import torch
import torch.nn as nn

SCRATCH_FLOATS = 16 * 2**20  # 64 MiB


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
            scratch = torch.zeros(SCRATCH_FLOATS, device=x.device)
            out = out + scratch[:1]
        return out
