"""KernelBench level 2, problem 76 (76_Gemm_Add_ReLU): y = relu(x @ W.T + bias).

Partial custom kernel: the bias-free GEMM stays in PyTorch (the same `self.gemm` nn.Linear(bias=False) as the
reference), and the bias add and ReLU run in one fused custom Triton kernel. The GEMM output is viewed as
(rows, N) with N = out_features; a 2-D grid gives each program one row and BLOCK_N columns, so the bias slice is
one vector load per program and there is no per-element division: out = where(t < 0, 0, t), t = y + bias[col].
Masked column tail, 64-bit row offsets.
Numerics: one add and a select in fp32, no overflow for finite inputs; NaN stays NaN (as torch.relu).
"""

import contextlib

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _bias_relu_kernel(y_ptr, b_ptr, out_ptr, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    offs = row * N + cols
    t = tl.load(y_ptr + offs, mask=mask).to(tl.float32) + tl.load(b_ptr + cols, mask=mask).to(tl.float32)
    out = tl.where(t < 0.0, 0.0, t)
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def _on_device(x: torch.Tensor):
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def triton_bias_relu(y: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    y = y.contiguous()
    N = y.shape[-1]
    if bias.numel() != N:
        raise ValueError(f"bias of {bias.numel()} elements does not broadcast over the last dim ({N})")
    bias = bias.contiguous()
    out = torch.empty_like(y)
    if y.numel() == 0:
        return out
    rows = y.numel() // N
    BLOCK_N = min(max(triton.next_power_of_2(N), 16), 2048)
    with _on_device(y):
        _bias_relu_kernel[(rows, triton.cdiv(N, BLOCK_N))](y, bias, out, N, BLOCK_N=BLOCK_N,
                                                           num_warps=4 if BLOCK_N <= 1024 else 8)
    return out


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super(ModelNew, self).__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        y = self.gemm(x)
        return triton_bias_relu(y, self.bias)
