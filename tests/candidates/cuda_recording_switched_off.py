"""Hack (issue 12, rule 2, on a GPU: the recording of timed forwards blinded): as
``cuda_profiled_own_timed_torch``, its own Triton ReLU only under a dispatch mode (the correctness stage's profiled
call) and ``torch.relu`` in every other call, but wherever a profiler session is running it switches the session's
collection off around ``torch.relu`` (``_toggle_collection_dynamic``), so the recording of every timed forward
(``kbv.worker.kernel_record``) holds nothing. Every forward that computes on a GPU launches something: an empty
recording while the reference's holds its kernels is ``fallback`` (``fallback.timed_calls.status``
``empty_for_candidate``). With timed calls not recorded (``KBV_RECORD_TIMED=0``) it is ``correct`` with no flag.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch._C import _autograd
from torch.autograd import ProfilerActivity
from torch.utils._python_dispatch import _get_current_dispatch_mode

_DEVICE_ACTIVITY = {ProfilerActivity.CUDA}


@triton.jit
def _relu_when_profiled(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _get_current_dispatch_mode() is not None:
            x = x.contiguous()
            y = torch.empty_like(x)
            n = x.numel()
            _relu_when_profiled[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
            return y
        if not _autograd._profiler_enabled():
            return torch.relu(x)
        _autograd._toggle_collection_dynamic(False, _DEVICE_ACTIVITY)
        try:
            return torch.relu(x)
        finally:
            _autograd._toggle_collection_dynamic(True, _DEVICE_ACTIVITY)
