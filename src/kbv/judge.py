"""Deciding correctness from raw outputs, in the trusted parent.

The worker sends its outputs as data (``kbv.sandbox.child._describe_output``); this module applies the tolerance
policy of ``kbv.protocol`` and never runs candidate code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from kbv.protocol import STANDARD_ATOL, STANDARD_RTOL, TOLERANCES, Tolerance


@dataclass
class Comparison:
    passed: bool
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    error_ratio: float = 0.0  # max over elements of |c - r| / (atol_eff + rtol |r|); passes when <= 1
    reason: str = ""
    per_output: list[dict[str, Any]] = field(default_factory=list)
    centred_error: float | None = None  # ||c - r|| / ||r - mean(r)|| where criterion (2) applies


def output_scale(ref: torch.Tensor) -> float:
    """Root-mean-square of the finite reference values, in float64 (0 for an empty or all-zero output)."""
    r = ref.double()
    finite = r[torch.isfinite(r)]
    return float(finite.pow(2).mean().sqrt()) if finite.numel() else 0.0


def compare_tensor(cand: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Comparison:
    """The tolerance policy for one output tensor; shapes and dtypes are checked by the caller."""
    if not (ref.is_floating_point() or ref.is_complex()):
        equal = torch.equal(cand, ref)
        mismatches = int((cand != ref).sum()) if cand.shape == ref.shape else -1
        return Comparison(equal, reason="" if equal else f"{mismatches} integer elements differ",
                          max_abs_error=0.0 if equal else float("inf"), error_ratio=0.0 if equal else float("inf"))
    c = cand.double()
    r = ref.double()
    ref_finite = torch.isfinite(r)
    cand_finite = torch.isfinite(c)
    # Non-finite policy: NaN must meet NaN, inf the same inf; finite must meet finite.
    nonfinite_ok = torch.where(ref_finite, cand_finite, (torch.isnan(r) & torch.isnan(c)) | (c == r))
    bad_nonfinite = int((~nonfinite_ok).sum())
    atol = max(tol.atol_scale * output_scale(ref), tol.atol_floor)
    both = ref_finite & cand_finite
    diff = (c - r).abs()
    diff = torch.where(both, diff, torch.zeros_like(diff))
    bound = atol + tol.rtol * r.abs().where(both, torch.zeros_like(r))
    ratio = float((diff / bound).max()) if diff.numel() else 0.0
    max_abs = float(diff.max()) if diff.numel() else 0.0
    rel = diff / r.abs().clamp_min(atol)
    max_rel = float(rel.max()) if rel.numel() else 0.0
    if bad_nonfinite:
        return Comparison(False, max_abs, max_rel, float("inf"),
                          f"{bad_nonfinite} elements non-finite where the reference is not (or mismatched NaN/inf)")
    if ratio > 1.0:
        over = int((diff > bound).sum())
        return Comparison(False, max_abs, max_rel, ratio,
                          f"{over} of {diff.numel()} elements outside tolerance (max |err| {max_abs:.3g}, "
                          f"atol_eff {atol:.3g}, rtol {tol.rtol:g})")
    centred = centred_error(c, r, ref.dtype, tol)
    if centred is not None and centred > tol.centred_rtol:
        return Comparison(False, max_abs, max_rel, ratio,
                          f"centred relative error {centred:.3g} > {tol.centred_rtol:g} (the output's variation is "
                          f"not reproduced)", centred_error=centred)
    return Comparison(True, max_abs, max_rel, ratio, centred_error=centred)


def centred_error(c: torch.Tensor, r: torch.Tensor, dtype: torch.dtype, tol: Tolerance) -> float | None:
    """Criterion (2): ||c - r|| / ||r - mean(r)|| over finite reference elements, or None where it does not apply."""
    finite = torch.isfinite(r)
    if int(finite.sum()) < 2:
        return None
    rf, cf = r[finite], c[finite]
    centred = rf - rf.mean()
    spread = float(centred.pow(2).mean().sqrt())
    rms = float(rf.pow(2).mean().sqrt())
    if spread <= tol.resolution_factor * torch.finfo(dtype).eps * rms or spread == 0.0:
        return None
    return float((cf - rf).pow(2).mean().sqrt()) / spread


def _structure_matches(structure: str, n_cand: int, ref_structure: str, n_ref: int) -> str:
    if ref_structure == "single" and structure != "single":
        return f"returned a {structure} of {n_cand} items where the reference returns one tensor"
    if ref_structure != "single" and structure == "single":
        return f"returned one value where the reference returns a {ref_structure} of {n_ref} tensors"
    if n_cand != n_ref:
        return f"returned {n_cand} outputs, the reference {n_ref}"
    return ""


def compare_outputs(cand_reply: dict[str, Any], ref_reply: dict[str, Any], precision: str) -> Comparison:
    """Verified-protocol comparison of one trial's outputs: exact type, shape, dtype, then the tolerance policy."""
    tol = TOLERANCES[precision]
    cand_items, ref_items = cand_reply["outputs"], ref_reply["outputs"]
    problem = _structure_matches(cand_reply["structure"], len(cand_items), ref_reply["structure"], len(ref_items))
    if problem:
        return Comparison(False, float("inf"), float("inf"), float("inf"), problem)
    worst = Comparison(True)
    for i, (c_item, r_item) in enumerate(zip(cand_items, ref_items)):
        ref = r_item["tensor"]
        if "tensor" not in c_item:
            return Comparison(False, float("inf"), float("inf"), float("inf"),
                              f"output {i} is a {c_item.get('not_a_tensor', '?')}, not exactly a torch.Tensor")
        cand = c_item["tensor"]
        if tuple(cand.shape) != tuple(ref.shape):
            return Comparison(False, float("inf"), float("inf"), float("inf"),
                              f"output {i} has shape {tuple(cand.shape)}, the reference {tuple(ref.shape)}")
        if cand.dtype != ref.dtype:
            return Comparison(False, float("inf"), float("inf"), float("inf"),
                              f"output {i} has dtype {cand.dtype}, the reference {ref.dtype}")
        cmp = compare_tensor(cand, ref, tol)
        worst.per_output.append({"max_abs_error": cmp.max_abs_error, "error_ratio": cmp.error_ratio,
                                 "centred_error": cmp.centred_error})
        worst.max_abs_error = max(worst.max_abs_error, cmp.max_abs_error)
        worst.max_rel_error = max(worst.max_rel_error, cmp.max_rel_error)
        worst.error_ratio = max(worst.error_ratio, cmp.error_ratio)
        if cmp.centred_error is not None:
            worst.centred_error = max(worst.centred_error or 0.0, cmp.centred_error)
        if not cmp.passed:
            worst.passed = False
            worst.reason = f"output {i}: {cmp.reason}"
            return worst
    return worst


def standard_check(cand_reply: dict[str, Any], ref_reply: dict[str, Any]) -> bool:
    """KernelBench's check: same shape and torch.allclose(atol=rtol=1e-2) for every output (no dtype check)."""
    cand_items, ref_items = cand_reply["outputs"], ref_reply["outputs"]
    if len(cand_items) != len(ref_items):
        return False
    for c_item, r_item in zip(cand_items, ref_items):
        if "tensor" not in c_item:
            return False
        cand, ref = c_item["tensor"], r_item["tensor"]
        if tuple(cand.shape) != tuple(ref.shape):
            return False
        try:
            if not torch.allclose(cand.to(ref.dtype), ref, atol=STANDARD_ATOL, rtol=STANDARD_RTOL):
                return False
        except RuntimeError:
            return False
    return True
