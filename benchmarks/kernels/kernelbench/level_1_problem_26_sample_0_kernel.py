"""KernelBench level 1, problem 26 (26_GELU_): y = gelu(x), PyTorch's default exact (erf) form.

A custom Triton elementwise kernel over the flattened input (BLOCK elements per program, masked tail, 64-bit
offsets): y = 0.5 * x * (1 + erf(x / sqrt(2))), the same formula as torch.nn.functional.gelu(approximate='none')
(not the tanh approximation). Numerics: erf is bounded in [-1, 1], so for any finite x (|x| up to 100 and
beyond) there is no overflow; for very negative x, 1 + erf -> 0 and y -> -0. NaN stays NaN.
"""

import contextlib

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _on_device(x: torch.Tensor):
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def triton_gelu(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    if n == 0:
        return y
    BLOCK = 4096
    with _on_device(x):
        _gelu_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK, num_warps=8)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return triton_gelu(x)
