"""Correct candidate for level1/9_RMSNorm: one Triton program per row.

y = x * rsqrt(mean(x^2, -1) + eps) * weight, accumulated in fp32. BLOCK = next_power_of_2(dim) with a mask,
so any dim works (each row is held in registers; fine for the problem's sizes).
Keeps the reference's parameter name `weight`, so kbv copies the reference weights in.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, dim, stride_row, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < dim
    x = tl.load(x_ptr + row * stride_row + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=0) / dim
    inv = 1.0 / tl.sqrt(ms + eps)
    y = x * inv * w
    tl.store(y_ptr + row * stride_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dim = x.shape[-1]
        x2 = x.contiguous().view(-1, dim)
        w = self.weight.contiguous()
        # the reference's `x * rsqrt(...) * weight` promotes to the wider of x and weight
        y = torch.empty(x2.shape, dtype=torch.promote_types(x.dtype, w.dtype), device=x.device)
        rows = x2.shape[0]
        if rows == 0:
            return y.view(x.shape)
        BLOCK = triton.next_power_of_2(dim)
        num_warps = 4 if BLOCK <= 2048 else (8 if BLOCK <= 8192 else 16)
        _rmsnorm_kernel[(rows,)](x2, w, y, dim, x2.stride(0), float(self.eps),
                                 BLOCK=BLOCK, num_warps=num_warps)
        return y.view(x.shape)
