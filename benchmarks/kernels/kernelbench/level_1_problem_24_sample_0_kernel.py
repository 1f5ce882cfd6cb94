"""KernelBench level 1, problem 24 (24_LogSoftmax): y = log_softmax(x, dim) (dim from the constructor, default 1).

Custom Triton row kernels. The input is viewed (no copy, after .contiguous()) as (outer, C, inner) around `dim`,
and each program owns one row of C elements at stride `inner` (inner == 1 for the problem's 2-D input, dim=1).
  * Rows with C <= 8192: one pass with the row in registers: y = (x - m) - log(sum(exp(x - m))), m = max(x).
  * Longer rows (the problem's rows are 393216 long): pass 1 is an online log-sum-exp over BLOCK-sized chunks
    (per-lane running max m and running sum s of exp(x - m), rescaled by exp(m_old - m_new) when the max grows,
    lanes merged at the end into M and S); pass 2 writes y = x - (M + log(S)).
Numerics: all exponents are x - (a max) <= 0, so exp cannot overflow for any finite input (|x| up to 100 and
beyond), and S >= 1 so log(S) is finite; the result is formed as a difference (x - M) - log(S), never as
log(softmax), so tiny probabilities do not underflow to log(0) = -inf. Lanes that saw only masked padding keep
s = 0. NaN in a row gives NaN, as in PyTorch.
"""

import contextlib

import torch
import torch.nn as nn
import triton
import triton.language as tl

_SINGLE_PASS_MAX = 8192
_CHUNK = 4096


@triton.jit
def _log_softmax_row_kernel(x_ptr, y_ptr, C, inner, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    o = row // inner
    i = row - o * inner
    base = o * C * inner + i
    cols = tl.arange(0, BLOCK)
    mask = cols < C
    offs = base + cols.to(tl.int64) * inner
    x = tl.load(x_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    d = x - m
    e = tl.where(mask, tl.exp(d), 0.0)
    lse = tl.log(tl.sum(e, axis=0))
    y = d - lse
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _log_softmax_online_kernel(x_ptr, y_ptr, C, inner, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    o = row // inner
    i = row - o * inner
    base = o * C * inner + i
    cols = tl.arange(0, BLOCK)
    m_vec = tl.full([BLOCK], float("-inf"), tl.float32)
    s_vec = tl.zeros([BLOCK], tl.float32)
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
    lse = tl.log(tl.sum(s_vec * scale, axis=0))
    for start in range(0, C, BLOCK):
        c = start + cols
        mask = c < C
        offs = base + c.to(tl.int64) * inner
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = (x - m) - lse
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _on_device(x: torch.Tensor):
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def triton_log_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
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
            _log_softmax_row_kernel[(rows,)](x, y, C, inner, BLOCK=BLOCK, num_warps=warps)
        else:
            _log_softmax_online_kernel[(rows,)](x, y, C, inner, BLOCK=_CHUNK, num_warps=8)
    return y


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return triton_log_softmax(x, self.dim)
