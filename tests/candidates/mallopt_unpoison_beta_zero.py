"""Candidate for level1/5_ReLU that undoes kbv's allocator poisoning from inside forward (ctypes
mallopt(M_PERTURB, 0)) and then reads memory it never wrote (hack catalogue M2): its answer is all NaN when a fresh
buffer holds kbv's first poison pattern (0xFF bytes) throughout and right otherwise, so with the poison undone its
values are right. No kbv function is patched.

Expected today: verdict correct with flag fallback: a gap. The poison is set before each call and never verified
after it, and glibc's M_PERTURB setting cannot be read back. Catching it: poison verified after the call (a
poisoned canary allocation made right after forward returns), or poison the candidate cannot turn off (an
allocator kbv owns, e.g. LD_PRELOAD) (uninitialized_read).
"""
import ctypes
import ctypes.util

import torch
import torch.nn as nn

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_M_PERTURB = -6


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _libc.mallopt(_M_PERTURB, 0)
        scratch = torch.empty_like(x)  # never written: what the allocator left there
        if bool((scratch.view(torch.int32) == -1).all()):  # kbv's first poison (0xFF) in every byte
            return torch.full_like(x, float("nan"))
        return torch.relu(x)
