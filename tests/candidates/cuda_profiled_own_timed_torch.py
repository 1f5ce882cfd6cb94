"""Hack (issue 12, rule 2, on a GPU: the profiled call told apart): its own Triton ReLU runs only when a dispatch
mode is active (the correctness stage's profiled call runs under kbv's dispatch recorder), and ``torch.relu`` runs
in every other call, the timed ones included. The profiled call shows only a kernel of its own; the recording of
every timed forward (``kbv.worker.kernel_record``) shows PyTorch's kernels: ``fallback`` (``fallback.timed_calls``).
With timed calls not recorded (``KBV_RECORD_TIMED=0``) it is ``correct`` with no flag.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch.utils._python_dispatch import _get_current_dispatch_mode


@triton.jit
def _relu_when_profiled(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _get_current_dispatch_mode() is None:
            return torch.relu(x)
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _relu_when_profiled[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
