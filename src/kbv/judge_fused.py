"""One-pass comparison kernels (Triton) for the judge's large CUDA outputs: the tolerance policy's figures
(``kbv.judge.compare_tensor``), the reference's scale (``output_scale``) and KernelBench's ``isclose`` check
(``standard_check``), each in one read of the tensors instead of the thirty or so elementwise passes the torch
path makes. Same arithmetic as the torch path: differences in float32, sums accumulated in float64.

Used by the trusted judge only (the reference worker), for contiguous float32/float16/bfloat16 outputs of
``FUSED_MIN_BYTES`` or more on a GPU; imported on the first such output (Triton's import costs more than a small
output's torch comparison). Where Triton cannot be imported or compiled, the judge keeps the torch path.
"""

from __future__ import annotations

from typing import Any

import torch

FUSED_MIN_BYTES = 1 << 28  # outputs from this size (256 MiB) are compared by these kernels on a GPU
BLOCK = 4096  # elements per program
DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_kernels: dict[str, Any] | None = None


def _build() -> dict[str, Any]:
    import triton
    import triton.language as tl

    @triton.jit
    def scale_kernel(r_ptr, n, sums_ptr, counts_ptr, BLOCK: tl.constexpr):
        pid = tl.program_id(0).to(tl.int64)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        r = tl.load(r_ptr + offs, mask=inside, other=0.0).to(tl.float32)
        finite = inside & ((r - r) == 0.0)
        rv = tl.where(finite, r, 0.0)
        tl.store(sums_ptr + pid, tl.sum((rv * rv).to(tl.float64), axis=0))
        tl.store(counts_ptr + pid, tl.sum(finite.to(tl.int64), axis=0))

    @triton.jit
    def compare_kernel(c_ptr, r_ptr, n, atol, rtol, counts_ptr, maxima_ptr, sums_ptr, programs,
                       BLOCK: tl.constexpr):
        pid = tl.program_id(0).to(tl.int64)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        c = tl.load(c_ptr + offs, mask=inside, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + offs, mask=inside, other=0.0).to(tl.float32)
        ref_finite = (r - r) == 0.0
        cand_finite = (c - c) == 0.0
        # NaN must meet NaN, inf the same inf; finite must meet finite
        agree = tl.where(ref_finite, cand_finite, ((r != r) & (c != c)) | (c == r))
        bad = inside & (agree == 0)
        both = ref_finite & cand_finite
        c_used = tl.where(both, c, 0.0)
        r_used = tl.where(both, r, 0.0)
        rf = tl.where(ref_finite, r, 0.0)
        diff = tl.abs(c_used - r_used)
        rabs = tl.abs(r_used)
        bound = rabs * rtol + atol
        over = inside & (diff > bound)
        ratio = tl.where(inside, diff / bound, 0.0)
        rel = tl.where(inside, diff / tl.maximum(rabs, atol), 0.0)
        tl.store(counts_ptr + pid, tl.sum(bad.to(tl.int64), axis=0))
        tl.store(counts_ptr + programs + pid, tl.sum(over.to(tl.int64), axis=0))
        tl.store(counts_ptr + 2 * programs + pid, tl.sum((inside & ref_finite).to(tl.int64), axis=0))
        tl.store(maxima_ptr + pid, tl.max(ratio, axis=0))
        tl.store(maxima_ptr + programs + pid, tl.max(diff, axis=0))
        tl.store(maxima_ptr + 2 * programs + pid, tl.max(rel, axis=0))
        tl.store(sums_ptr + pid, tl.sum(rf.to(tl.float64), axis=0))
        tl.store(sums_ptr + programs + pid, tl.sum((rf * rf).to(tl.float64), axis=0))
        tl.store(sums_ptr + 2 * programs + pid, tl.sum((diff * diff).to(tl.float64), axis=0))

    @triton.jit
    def close_kernel(c_ptr, r_ptr, n, atol, rtol, far_ptr, BLOCK: tl.constexpr):
        pid = tl.program_id(0).to(tl.int64)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        c = tl.load(c_ptr + offs, mask=inside, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + offs, mask=inside, other=0.0).to(tl.float32)
        error = tl.abs(c - r)  # torch.isclose: equal, or a finite error within atol + |rtol * r|
        close = (c == r) | (((error - error) == 0.0) & (error <= atol + tl.abs(rtol * r)))
        tl.store(far_ptr + pid, tl.sum((inside & (close == 0)).to(tl.int64), axis=0))

    return {"scale": scale_kernel, "compare": compare_kernel, "close": close_kernel}


def kernels() -> dict[str, Any] | None:
    """The compiled-on-demand kernels, or None where Triton cannot be imported (the judge keeps the torch path)."""
    global _kernels
    if _kernels is None:
        try:
            _kernels = _build()
        except Exception:  # no Triton, or one that cannot build here: the torch path decides alone
            _kernels = {}
    return _kernels or None


def applies(*tensors: torch.Tensor) -> bool:
    """Whether these tensors (the reference's output first) are compared by the fused kernels: on a GPU, of one of
    ``DTYPES``, contiguous, ``FUSED_MIN_BYTES`` or more, and Triton available."""
    ref = tensors[0]
    return (ref.is_cuda and ref.dtype in DTYPES and ref.numel() * ref.element_size() >= FUSED_MIN_BYTES
            and all(t.is_contiguous() and t.device == ref.device for t in tensors) and kernels() is not None)


def _programs(n: int) -> int:
    return max(1, -(-n // BLOCK))


def scale_sums(ref: torch.Tensor) -> tuple[float, int]:
    """Sum of squares of the finite reference values (each squared in float32) and their count."""
    k = kernels()
    assert k is not None
    p = _programs(ref.numel())
    sums = torch.empty(p, dtype=torch.float64, device=ref.device)
    counts = torch.empty(p, dtype=torch.int64, device=ref.device)
    k["scale"][(p,)](ref, ref.numel(), sums, counts, BLOCK=BLOCK)
    return float(sums.sum()), int(counts.sum())


def figures(cand: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> tuple[list[int], list[float],
                                                                                      list[float]]:
    """The torch path's figures of one output, from one pass: counts (elements non-finite where the reference is
    not or mismatched NaN/inf, elements outside tolerance, finite reference elements), maxima (error ratio,
    largest absolute error, largest relative error) and float64 sums (reference, its square, the squared
    difference, over finite elements)."""
    k = kernels()
    assert k is not None
    p = _programs(ref.numel())
    counts = torch.empty((3, p), dtype=torch.int64, device=ref.device)
    maxima = torch.empty((3, p), dtype=torch.float32, device=ref.device)
    sums = torch.empty((3, p), dtype=torch.float64, device=ref.device)
    k["compare"][(p,)](cand, ref, ref.numel(), float(atol), float(rtol), counts, maxima, sums, p, BLOCK=BLOCK)
    return counts.sum(dim=1).tolist(), maxima.amax(dim=1).double().tolist(), sums.sum(dim=1).tolist()


def far_count(cand: torch.Tensor, ref: torch.Tensor, tolerance: float) -> int:
    """Elements where ``torch.isclose(cand, ref, atol=tolerance, rtol=tolerance)`` is false (float32 arithmetic)."""
    k = kernels()
    assert k is not None
    p = _programs(ref.numel())
    far = torch.empty(p, dtype=torch.int64, device=ref.device)
    k["close"][(p,)](cand, ref, ref.numel(), float(tolerance), float(tolerance), far, BLOCK=BLOCK)
    return int(far.sum())


def warm(t: torch.Tensor) -> None:
    """Run each kernel once on ``t`` (a small float32 tensor where the judge runs): Triton's import, and each
    kernel's compilation or load from its cache, before the first real comparison. Without Triton, nothing."""
    if kernels() is None:
        return
    scale_sums(t)
    figures(t, t, 1e-5, 1e-5)
    far_count(t, t, 1e-2)
