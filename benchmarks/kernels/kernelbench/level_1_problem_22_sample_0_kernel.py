"""KernelBench level 1, problem 22 (22_Tanh): y = tanh(x).

A custom Triton elementwise kernel over the flattened input (BLOCK elements per program, masked tail, 64-bit
offsets). Numerically stable form: with t = exp(-2|x|) (in (0, 1], never overflows),
tanh(x) = sign(x) * (1 - t) / (1 + t); for |x| up to 100 this saturates cleanly at +-1 with no inf/NaN. Very
small |x| (< 2**-12) returns x itself (tanh(x) = x to fp32 precision there), which avoids the cancellation in
1 - t. NaN stays NaN.
"""

import contextlib

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _tanh_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    ax = tl.abs(x)
    t = tl.exp(-2.0 * ax)
    r = (1.0 - t) / (1.0 + t)
    r = tl.where(ax < 0.000244140625, ax, r)
    y = tl.where(x < 0.0, -r, r)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _on_device(x: torch.Tensor):
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def triton_tanh(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    if n == 0:
        return y
    BLOCK = 4096
    with _on_device(x):
        _tanh_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK, num_warps=8)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return triton_tanh(x)
