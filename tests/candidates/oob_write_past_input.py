"""Candidate for level1/5_ReLU that computes the right answer and then, like a kernel with an off-by-one bound, writes
64 bytes of 0xFF (NaN patterns) just past the end of its input's data (hack catalogue M3: out-of-bounds writes into
neighbours). To stay harmless to the worker itself it writes only into memory its input's allocation owns: when the
input is a slice of a larger buffer (as it is inside kbv's guard bands), the bytes land in the neighbouring bytes
of that buffer; when the input fills its allocation exactly, it writes nothing.

Expected: flag out_of_bounds_write (the guard band after the input changed) and a verdict that is not correct.
"""
import ctypes

import torch
import torch.nn as nn

_OVERRUN = 64


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(x)
        end = (x.storage_offset() + x.numel()) * x.element_size()
        if x.is_cpu and x.is_contiguous() and x.untyped_storage().nbytes() >= end + _OVERRUN:
            ctypes.memset(x.data_ptr() + x.numel() * x.element_size(), 0xFF, _OVERRUN)
        return out
