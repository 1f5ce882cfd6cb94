"""KernelBench level 1, problem 23 (23_Softmax): y = softmax(x, dim=1).

Custom Triton row kernels. The input is viewed (no copy, after .contiguous()) as (outer, C, inner) around dim 1,
and each program owns one softmax row of C elements at stride `inner` (inner == 1 for the problem's 2-D input).
  * Rows with C <= 8192: one pass with the whole row in registers: m = max(x), e = exp(x - m), y = e / sum(e).
  * Longer rows (the problem's rows are 393216 long): an online softmax over BLOCK-sized chunks. Pass 1 keeps, per
    lane, a running max m and a running sum s of exp(x - m), rescaling s by exp(m_old - m_new) whenever the max
    grows; the lanes are then merged into the row max M and row sum S. Pass 2 writes exp(x - M) / S.
Numerics: every exponent is x - (a running or final max) <= 0, so exp never overflows for any finite input
(|x| up to 100 and beyond); lanes that have seen only masked (-inf) padding are kept at s = 0 instead of
computing exp(-inf - -inf). A row containing NaN gives NaN, as in PyTorch.
"""

import contextlib

import torch
import torch.nn as nn
import triton
import triton.language as tl

_SINGLE_PASS_MAX = 8192
_CHUNK = 4096


@triton.jit
def _softmax_row_kernel(x_ptr, y_ptr, C, inner, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    o = row // inner
    i = row - o * inner
    base = o * C * inner + i
    cols = tl.arange(0, BLOCK)
    mask = cols < C
    offs = base + cols.to(tl.int64) * inner
    x = tl.load(x_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    e = tl.where(mask, e, 0.0)
    s = tl.sum(e, axis=0)
    y = e / s
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_online_kernel(x_ptr, y_ptr, C, inner, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    o = row // inner
    i = row - o * inner
    base = o * C * inner + i
    cols = tl.arange(0, BLOCK)
    m_vec = tl.full([BLOCK], float("-inf"), tl.float32)
    s_vec = tl.zeros([BLOCK], tl.float32)
    # pass 1: per-lane running max and rescaled running sum
    for start in range(0, C, BLOCK):
        c = start + cols
        mask = c < C
        x = tl.load(x_ptr + base + c.to(tl.int64) * inner, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m_vec, x)
        upd = s_vec * tl.exp(m_vec - m_new) + tl.exp(x - m_new)
        s_vec = tl.where(m_new == float("-inf"), 0.0, upd)
        m_vec = m_new
    m = tl.max(m_vec, axis=0)
    scale = tl.where(m_vec == float("-inf"), 0.0, tl.exp(m_vec - m))
    s = tl.sum(s_vec * scale, axis=0)
    inv = 1.0 / s
    # pass 2: normalise
    for start in range(0, C, BLOCK):
        c = start + cols
        mask = c < C
        offs = base + c.to(tl.int64) * inner
        x = tl.load(x_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - m) * inv
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _on_device(x: torch.Tensor):
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def triton_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y
    dim = dim % x.dim()
    C = x.shape[dim]
    inner = 1
    for d in x.shape[dim + 1:]:
        inner *= d
    rows = x.numel() // C
    with _on_device(x):
        if C <= _SINGLE_PASS_MAX:
            BLOCK = max(triton.next_power_of_2(C), 16)
            warps = 4 if BLOCK <= 2048 else 8
            _softmax_row_kernel[(rows,)](x, y, C, inner, BLOCK=BLOCK, num_warps=warps)
        else:
            _softmax_online_kernel[(rows,)](x, y, C, inner, BLOCK=_CHUNK, num_warps=8)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return triton_softmax(x, 1)
