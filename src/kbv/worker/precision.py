"""The precision check: how far a candidate's outputs are from a float64 run of the reference, against how far the
verified baseline's own run is (TF32 allowed, as a practitioner would run it). Runs in the trusted reference worker.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch

from kbv.protocol import CPU_CHUNK, PRECISION_CHUNK
from kbv.worker import backends


def relative_l2(x: torch.Tensor, exact: torch.Tensor, chunk: int | None = None) -> float | None:
    """||x - exact||_2 / ||exact||_2 over finite reference values, in float64; None for non-float outputs.
    Summed ``chunk`` elements at a time (by default ``PRECISION_CHUNK``, on the CPU ``CPU_CHUNK``), so the judge
    holds a few float64 chunks beside the two tensors instead of six float64 copies of a whole output (94.5 GiB
    reserved for a 6 GiB output on the H200, 2026-12-04)."""
    if not exact.is_floating_point() or not x.is_floating_point() or x.shape != exact.shape:
        return None
    if chunk is None:
        chunk = PRECISION_CHUNK if exact.is_cuda else CPU_CHUNK
    flat_x, flat_exact = x.reshape(-1), exact.reshape(-1)
    err2 = norm2 = 0.0
    any_finite = False
    for start in range(0, flat_exact.numel(), chunk):
        e = flat_exact[start:start + chunk].to(torch.float64)
        finite = torch.isfinite(e)
        if not bool(finite.any()):
            continue
        any_finite = True
        d = torch.where(finite, flat_x[start:start + chunk].to(torch.float64) - e, 0.0)
        e = torch.where(finite, e, 0.0)
        err2 += float(torch.dot(d, d))
        norm2 += float(torch.dot(e, e))
    if not any_finite:
        return None
    norm, err = math.sqrt(norm2), math.sqrt(err2) if err2 == err2 else float("nan")
    if norm == 0.0:
        return 0.0 if err == 0.0 else float("inf")
    return err / norm if err == err else float("inf")  # NaN in the candidate: infinitely wrong


def _tensors(out: Any) -> list[torch.Tensor]:
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    return [t for t in items if isinstance(t, torch.Tensor)]


def errors_against_float64(model: torch.nn.Module, args: list[Any], candidate: dict[str, Any],
                           device: str) -> dict[str, Any]:
    """Per output: the verified run's and the candidate's relative L2 error against float64 (copies of the model;
    the kept one, whose buffers the candidate's are compared with, is not run)."""
    exact_model = copy.deepcopy(model).to(torch.float64)
    args64 = [a.to(torch.float64) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    with torch.no_grad():
        exact = _tensors(exact_model(*args64))
    del exact_model, args64  # the float64 inputs go before the verified run's outputs arrive
    saved = backends.read_flags()
    try:
        backends.apply_baseline("verified")
        with torch.no_grad():
            verified = _tensors(copy.deepcopy(model)(*args))
    finally:
        backends.restore_flags(saved)
    cand = [item.get("tensor") for item in candidate.get("outputs", [])]
    outputs = []
    for k, ref in enumerate(exact):
        c = cand[k] if k < len(cand) and isinstance(cand[k], torch.Tensor) else None
        outputs.append({
            "verified_error": relative_l2(verified[k], ref) if k < len(verified) else None,
            "candidate_error": relative_l2(c.to(ref.device), ref) if c is not None else None,
        })
    return {"outputs": outputs}
