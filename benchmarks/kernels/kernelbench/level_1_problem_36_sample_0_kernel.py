"""KernelBench level 1, problem 36 (36_RMSNorm_): y = x / sqrt(mean(x**2, dim=1, keepdim=True) + eps).

Custom Triton kernels. The input (batch, features, *) is viewed (no copy, after .contiguous()) as (B, C, S),
S being the product of the trailing dims (1 for a 2-D input). Each program owns one batch item and a block of
BLOCK_S positions along S (the contiguous axis, so loads are coalesced) and reduces over the C features:
  * when all C features times BLOCK_S fit in one tile (<= 8192 elements), one pass: the [C, BLOCK_S] tile is
    loaded once, summed in squares along C, and divided by its rms;
  * otherwise two passes over C in [BLOCK_C, BLOCK_S] chunks: accumulate the sum of squares, then re-read and
    write x / rms.
Numerics: squares and sums are accumulated in fp32 (|x| up to 100 gives x**2 = 1e4, far from overflow), the
mean is sum / C, eps is added before the square root as in the reference, and the result is a true division
x / rms (same operation order as PyTorch). NaN stays NaN.
"""

import contextlib

import torch
import torch.nn as nn
import triton
import triton.language as tl

_TILE = 8192


@triton.jit
def _rmsnorm_tile_kernel(x_ptr, y_ptr, C, S, eps, BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr):
    pid = tl.program_id(0)
    nsb = tl.cdiv(S, BLOCK_S)
    b = (pid // nsb).to(tl.int64)
    sb = pid % nsb
    s = sb * BLOCK_S + tl.arange(0, BLOCK_S)
    c = tl.arange(0, BLOCK_C)
    offs = b * C * S + c[:, None].to(tl.int64) * S + s[None, :]
    mask = (c[:, None] < C) & (s[None, :] < S)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    ss = tl.sum(x * x, axis=0)
    rms = tl.sqrt(ss / C + eps)
    y = x / rms[None, :]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_chunked_kernel(x_ptr, y_ptr, C, S, eps, BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr):
    pid = tl.program_id(0)
    nsb = tl.cdiv(S, BLOCK_S)
    b = (pid // nsb).to(tl.int64)
    sb = pid % nsb
    s = sb * BLOCK_S + tl.arange(0, BLOCK_S)
    s_mask = s < S
    cc = tl.arange(0, BLOCK_C)
    base = b * C * S
    acc = tl.zeros([BLOCK_C, BLOCK_S], tl.float32)
    for c0 in range(0, C, BLOCK_C):
        c = c0 + cc
        offs = base + c[:, None].to(tl.int64) * S + s[None, :]
        mask = (c[:, None] < C) & s_mask[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        acc += x * x
    ss = tl.sum(acc, axis=0)
    rms = tl.sqrt(ss / C + eps)
    for c0 in range(0, C, BLOCK_C):
        c = c0 + cc
        offs = base + c[:, None].to(tl.int64) * S + s[None, :]
        mask = (c[:, None] < C) & s_mask[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = x / rms[None, :]
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _on_device(x: torch.Tensor):
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def triton_rmsnorm(x: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y
    B, C = x.shape[0], x.shape[1]
    S = x.numel() // (B * C)
    bc = triton.next_power_of_2(C)
    bs = min(triton.next_power_of_2(S), 256)
    while bc * bs > _TILE and bs > 32:
        bs //= 2
    with _on_device(x):
        if bc * bs <= _TILE:
            grid = (B * triton.cdiv(S, bs),)
            warps = 8 if bc * bs >= 4096 else 4
            _rmsnorm_tile_kernel[grid](x, y, C, S, float(eps), BLOCK_C=bc, BLOCK_S=bs, num_warps=warps)
        else:
            bs = min(triton.next_power_of_2(S), 128)
            bcc = max(1, 4096 // bs)
            grid = (B * triton.cdiv(S, bs),)
            _rmsnorm_chunked_kernel[grid](x, y, C, S, float(eps), BLOCK_C=bcc, BLOCK_S=bs, num_warps=8)
    return y


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super(ModelNew, self).__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return triton_rmsnorm(x, self.eps)
