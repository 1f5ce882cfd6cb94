"""KernelBench level 2, problem 12 (12_Gemm_Multiply_LeakyReLU): y = leaky_relu(linear(x) * multiplier, slope).

Partial custom kernel: the GEMM stays in PyTorch (the same `self.gemm` nn.Linear as the reference, weights and
bias included, so the matmul is exactly the reference's call), and the elementwise tail runs in one fused custom
Triton kernel over the flattened GEMM output: t = y * multiplier; out = t if t > 0 else t * negative_slope
(one read and one write instead of PyTorch's two elementwise passes). Masked tail, 64-bit offsets.
Numerics: two multiplies and a select in fp32, no overflow for finite inputs; NaN stays NaN.
"""

import contextlib

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scale_leaky_relu_kernel(y_ptr, out_ptr, n, multiplier, negative_slope, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    t = tl.load(y_ptr + offs, mask=mask).to(tl.float32) * multiplier
    out = tl.where(t > 0.0, t, t * negative_slope)
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def _on_device(x: torch.Tensor):
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def triton_scale_leaky_relu(y: torch.Tensor, multiplier: float, negative_slope: float) -> torch.Tensor:
    y = y.contiguous()
    out = torch.empty_like(y)
    n = y.numel()
    if n == 0:
        return out
    BLOCK = 4096
    with _on_device(y):
        _scale_leaky_relu_kernel[(triton.cdiv(n, BLOCK),)](y, out, n, float(multiplier), float(negative_slope),
                                                           BLOCK=BLOCK, num_warps=8)
    return out


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super(ModelNew, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.leaky_relu = nn.LeakyReLU(negative_slope)

    def forward(self, x):
        y = self.gemm(x)
        return triton_scale_leaky_relu(y, self.multiplier, self.leaky_relu.negative_slope)
