"""Deciding correctness from raw outputs: the tolerance policy of ``kbv.protocol``, run by the trusted reference
worker (``kbv.worker.session.Session.cmd_judge``) against outputs that never left it.

The candidate worker sends its outputs as data (``kbv.worker.session._describe_output``), relayed by the parent; this
module never runs candidate code, and no candidate worker imports it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from kbv import judge_fused
from kbv.protocol import CPU_CHUNK, PRECISION_NOISE_FACTOR, STANDARD_ATOL, TOLERANCES, Tolerance


@dataclass
class Comparison:
    passed: bool
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    error_ratio: float = 0.0  # max over elements of |c - r| / (atol_eff + rtol |r|); passes when <= 1
    reason: str = ""
    per_output: list[dict[str, Any]] = field(default_factory=list)
    centred_error: float | None = None  # ||c - r|| / ||r - mean(r)|| where criterion (2) applies
    precision_recheck: dict[str, Any] | None = None  # where a failure was judged again (``recheck_with_noise``)


CHUNK = 1 << 24  # elements per chunk: bounds the judge's temporary memory on large outputs


def _chunks(t: torch.Tensor) -> list[torch.Tensor]:
    """``t`` flattened into chunks of ``CHUNK`` elements (on the CPU at most ``CPU_CHUNK``: no page faults)."""
    flat = t.reshape(-1)
    step = CHUNK if t.is_cuda else min(CHUNK, CPU_CHUNK)
    return [flat[i : i + step] for i in range(0, flat.numel(), step)] or [flat]


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """Differences are taken in float32 for float32 and narrower outputs (its rounding, ~6e-8 relative, is far
    below every tolerance) and in float64 for float64; sums always accumulate in float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def output_scale(ref: torch.Tensor) -> float:
    """Root-mean-square of the finite reference values (0 for an empty or all-zero output)."""
    if judge_fused.applies(ref):  # one pass on a large GPU output
        total_, count_ = judge_fused.scale_sums(ref)
        return (total_ / count_) ** 0.5 if count_ else 0.0
    total, count = _scale_sums(ref)
    total_, count_ = float(total), int(count)
    return (total_ / count_) ** 0.5 if count_ else 0.0


def _scale_sums(ref: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The sum of squares (float64) and the count of the finite reference values, kept where the data is."""
    work = _work_dtype(ref.dtype)
    total = torch.zeros((), dtype=torch.float64, device=ref.device)
    count = torch.zeros((), dtype=torch.int64, device=ref.device)
    for r in _chunks(ref):  # summed where the data is: one wait for the device at the end, not one per chunk
        r = r.to(work)
        if not r.is_cuda and bool(torch.isfinite(r).all()):  # known without waiting on a CPU: no masking pass
            total += r.square().sum(dtype=torch.float64)
            count += r.numel()
            continue
        finite = torch.isfinite(r)
        total += torch.where(finite, r, 0.0).square().sum(dtype=torch.float64)
        count += finite.sum()
    return total, count


def compare_tensor(cand: torch.Tensor, ref: torch.Tensor, tol: Tolerance, atol_min: float = 0.0) -> Comparison:
    """The tolerance policy for one output tensor (see ``kbv.protocol``; ``atol_min`` raises the absolute term to
    at least that, ``recheck_with_noise``); shapes and dtypes are checked by the caller. Works through chunks so a
    1 GB output needs bounded temporaries; every chunk's figures are kept where the data is and read once at the
    end (on the H200 a judge that read each chunk's figures took 0.13 s per 4 GiB output). A large GPU output's
    figures come from one fused pass instead (``kbv.judge_fused``)."""
    if not ref.is_floating_point():
        equal = torch.equal(cand, ref)
        mismatches = int((cand != ref).sum()) if cand.shape == ref.shape else -1
        return Comparison(equal, reason="" if equal else f"{mismatches} elements differ",
                          max_abs_error=0.0 if equal else float("inf"), error_ratio=0.0 if equal else float("inf"))
    work = _work_dtype(ref.dtype)
    if judge_fused.applies(ref, cand):
        atol = max(tol.atol_scale * output_scale(ref), tol.atol_floor, atol_min)
        return _decide(*judge_fused.figures(cand, ref, atol, tol.rtol), ref, tol, atol)
    atol_t: torch.Tensor | float
    if ref.is_cuda:  # the tolerance stays on the device: the whole comparison is read once, at the end (each read
        # waits for a time slice on a GPU shared with other pairs)
        total, count = _scale_sums(ref)
        scale = torch.sqrt(total / count.clamp_min(1).to(torch.float64))
        atol_t = torch.clamp_min(scale * tol.atol_scale, max(tol.atol_floor, atol_min))
    else:
        atol_t = max(tol.atol_scale * output_scale(ref), tol.atol_floor, atol_min)
    atol_w = atol_t.to(work) if isinstance(atol_t, torch.Tensor) else atol_t
    # bad_nonfinite, over, n (elements of finite reference): counts; ratio, max_abs, max_rel: maxima; sums for (2)
    counts = torch.zeros(3, dtype=torch.int64, device=ref.device)
    maxima = torch.zeros(3, dtype=torch.float64, device=ref.device)
    sums = torch.zeros(3, dtype=torch.float64, device=ref.device)  # sum_r, sum_r2 over finite reference elements; sum_d2
    for c, r in zip(_chunks(cand), _chunks(ref)):
        c, r = c.to(work), r.to(work)
        ref_finite = torch.isfinite(r)
        if not r.is_cuda and bool(ref_finite.all()) and bool(torch.isfinite(c).all()):
            c_used, r_used, rf, bad = c, r, r, torch.zeros((), dtype=torch.int64)  # all finite: no masking passes
            n_finite = torch.tensor(r.numel())
        else:  # (on a GPU always this way: no wait for the device to know which)
            # Non-finite policy: NaN must meet NaN, inf the same inf; finite must meet finite.
            cand_finite = torch.isfinite(c)
            bad = (~torch.where(ref_finite, cand_finite, (torch.isnan(r) & torch.isnan(c)) | (c == r))).sum()
            both = ref_finite & cand_finite
            c_used, r_used, rf = torch.where(both, c, 0.0), torch.where(both, r, 0.0), torch.where(ref_finite, r, 0.0)
            n_finite = ref_finite.sum()
        diff = (c_used - r_used).abs_()
        rabs = r_used.abs()
        bound = rabs.mul(tol.rtol).add_(atol_w)
        counts += torch.stack((bad, (diff > bound).sum(), n_finite))
        if diff.numel():
            chunk_max = torch.stack(((diff / bound).max(), diff.max(), (diff / rabs.clamp_min_(atol_w)).max()))
            maxima = torch.maximum(maxima, chunk_max.to(torch.float64))
        sums += torch.stack((rf.sum(dtype=torch.float64), rf.square().sum(dtype=torch.float64),
                             diff.square().sum(dtype=torch.float64)))
    if not isinstance(atol_t, torch.Tensor):
        return _decide(counts.tolist(), maxima.tolist(), sums.tolist(), ref, tol, atol_t)
    # one read: the counts (exact in float64 below 2**53 elements), maxima, sums and the tolerance together
    read = torch.cat((counts.to(torch.float64), maxima, sums, atol_t.reshape(1).to(torch.float64))).tolist()
    return _decide([int(v) for v in read[:3]], read[3:6], read[6:9], ref, tol, read[9])


def _decide(counts: list[int], maxima: list[float], sums: list[float], ref: torch.Tensor, tol: Tolerance,
            atol: float) -> Comparison:
    """The policy's decision from one output's figures (``compare_tensor``)."""
    (bad_nonfinite, over, n), (ratio, max_abs, max_rel), (sum_r, sum_r2, sum_d2) = counts, maxima, sums
    if bad_nonfinite:
        return Comparison(False, max_abs, max_rel, float("inf"),
                          f"{bad_nonfinite} elements non-finite where the reference is not (or mismatched NaN/inf)")
    centred = _centred_error(n, sum_r, sum_r2, sum_d2, ref.dtype, tol)
    if ratio > 1.0:
        return Comparison(False, max_abs, max_rel, ratio,
                          f"{over} of {ref.numel()} elements outside tolerance (max |err| {max_abs:.3g}, "
                          f"atol_eff {atol:.3g}, rtol {tol.rtol:g})", centred_error=centred)
    if centred is not None and centred > tol.centred_rtol:
        return Comparison(False, max_abs, max_rel, ratio,
                          f"centred relative error {centred:.3g} > {tol.centred_rtol:g} (the output's variation is "
                          f"not reproduced)", centred_error=centred)
    return Comparison(True, max_abs, max_rel, ratio, centred_error=centred)


def _centred_error(n: int, sum_r: float, sum_r2: float, sum_d2: float, dtype: torch.dtype,
                   tol: Tolerance) -> float | None:
    """Criterion (2): ||c - r|| / ||r - mean(r)|| over finite reference elements, or None where it does not apply."""
    if n < 2:
        return None
    mean = sum_r / n
    rms = (sum_r2 / n) ** 0.5
    spread = max(sum_r2 / n - mean * mean, 0.0) ** 0.5
    if spread == 0.0 or spread <= tol.resolution_factor * torch.finfo(dtype).eps * rms:
        return None
    return (sum_d2 / n) ** 0.5 / spread


def _structure_matches(structure: str, n_cand: int, ref_structure: str, n_ref: int) -> str:
    if ref_structure == "single" and structure != "single":
        return f"returned a {structure} of {n_cand} items where the reference returns one tensor"
    if ref_structure != "single" and structure == "single":
        return f"returned one value where the reference returns a {ref_structure} of {n_ref} tensors"
    if n_cand != n_ref:
        return f"returned {n_cand} outputs, the reference {n_ref}"
    return ""


def compare_outputs(cand_reply: dict[str, Any], ref_reply: dict[str, Any], precision: str,
                    noise: list[tuple[float, float] | None] | None = None) -> Comparison:
    """Verified-protocol comparison of one trial's outputs: exact type, shape, dtype, then the tolerance policy
    (widened per output by the reference's own precision noise where ``noise`` gives it: ``recheck_with_noise``)."""
    tol = TOLERANCES[precision]
    cand_items, ref_items = cand_reply["outputs"], ref_reply["outputs"]
    problem = _structure_matches(cand_reply["structure"], len(cand_items), ref_reply["structure"], len(ref_items))
    if problem:
        return Comparison(False, float("inf"), float("inf"), float("inf"), problem)
    worst = Comparison(True)
    for i, (c_item, r_item) in enumerate(zip(cand_items, ref_items)):
        ref = r_item["tensor"]
        if "tensor" not in c_item:
            kind = c_item.get("not_a_tensor") or c_item.get("subclass", "?")
            return Comparison(False, float("inf"), float("inf"), float("inf"),
                              f"output {i} is a {kind}, not exactly a torch.Tensor")
        cand = c_item["tensor"]
        if tuple(cand.shape) != tuple(ref.shape):
            return Comparison(False, float("inf"), float("inf"), float("inf"),
                              f"output {i} has shape {tuple(cand.shape)}, the reference {tuple(ref.shape)}")
        if cand.dtype != ref.dtype:
            return Comparison(False, float("inf"), float("inf"), float("inf"),
                              f"output {i} has dtype {cand.dtype}, the reference {ref.dtype}")
        own = noise[i] if noise is not None and i < len(noise) else None
        if own is None:
            cmp = compare_tensor(cand, ref, tol)
        else:  # the allowance: PRECISION_NOISE_FACTOR times the reference's own deviation, in both criteria
            cmp = compare_tensor(cand, ref, replace(tol, centred_rtol=max(tol.centred_rtol,
                                                                          PRECISION_NOISE_FACTOR * own[1])),
                                 atol_min=PRECISION_NOISE_FACTOR * own[0])
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


def recheck_with_noise(cand_reply: dict[str, Any], ref_reply: dict[str, Any], strict_reply: dict[str, Any],
                       precision: str) -> Comparison | None:
    """A trial that failed the tolerance, judged again against the reference's own run of the same inputs in
    strict IEEE float32 (``strict_reply``: TF32 and reduced-precision paths off), with the allowance widened by how
    far the reference's judged run (``ref_reply``, under the flags it ran with) lies from that strict run: on each
    output, the absolute term to at least ``PRECISION_NOISE_FACTOR`` times their largest difference and the
    centred limit to at least that factor times their centred error. An honest kernel with the reference's own
    rounding (TF32, another cuDNN algorithm) errs about as much again; a kernel of lower precision than the
    reference's run errs more. None where the reference's two runs agree exactly (no noise to allow for) or
    differ in structure."""
    if len(ref_reply["outputs"]) != len(strict_reply["outputs"]):
        return None
    tol = TOLERANCES[precision]
    noise: list[tuple[float, float] | None] = []
    for r_item, s_item in zip(ref_reply["outputs"], strict_reply["outputs"]):
        ref, strict = r_item.get("tensor"), s_item.get("tensor")
        if (not isinstance(ref, torch.Tensor) or not isinstance(strict, torch.Tensor) or not ref.is_floating_point()
                or ref.shape != strict.shape or ref.dtype != strict.dtype):
            noise.append(None)
            continue
        own = compare_tensor(ref, strict, tol)
        if not math.isfinite(own.max_abs_error):
            noise.append(None)
            continue
        noise.append((own.max_abs_error, own.centred_error or 0.0))
    if not any(n is not None and n[0] > 0.0 for n in noise):
        return None
    again = compare_outputs(cand_reply, strict_reply, precision, noise)
    again.precision_recheck = {"noise": [list(n) if n is not None else None for n in noise],
                               "factor": PRECISION_NOISE_FACTOR, "passed": again.passed}
    return again


def standard_check(cand_reply: dict[str, Any], ref_reply: dict[str, Any], tolerance: float = STANDARD_ATOL) -> bool:
    """KernelBench's check: same shape and torch.allclose(atol=rtol=tolerance) for every output (no dtype check);
    the tolerance by version and precision is ``kbv.protocol.STANDARD_TOLERANCES``."""
    cand_items, ref_items = cand_reply["outputs"], ref_reply["outputs"]
    if len(cand_items) != len(ref_items):
        return False
    for c_item, r_item in zip(cand_items, ref_items):
        cand = c_item.get("tensor", c_item.get("tensor_data"))  # KernelBench accepts tensor subclasses
        if cand is None:
            return False
        ref = r_item["tensor"]
        if tuple(cand.shape) != tuple(ref.shape):
            return False
        try:  # chunk by chunk (allclose is elementwise): bounded temporaries on a 6 GB output, one read at the end
            if cand.dtype == ref.dtype == torch.float32 and judge_fused.applies(ref, cand):
                if judge_fused.far_count(cand, ref, tolerance):
                    return False
                continue
            close = torch.ones((), dtype=torch.bool, device=ref.device)
            for c, r in zip(_chunks(cand), _chunks(ref)):
                close &= torch.isclose(c.to(ref.dtype), r, atol=tolerance, rtol=tolerance).all()
            if not bool(close):
                return False
        except RuntimeError:
            return False
    return True


def warm(device: str, fused: bool = False) -> None:
    """Judge a small output with a NaN in it, once, before any real one: CUDA loads a kernel's module at its first
    launch (milliseconds each), and a fresh judge's first comparison loaded a dozen (on the H200 a timing judge's
    comparison of a 512 KiB output took about 70 ms). With ``fused``, the fused kernels too (Triton's import and
    the kernels' load: on the H200 a timing judge's first comparison of a 4 GiB output took about 0.4 s more than
    the next). Run by the reference worker as it starts, before its hello."""
    ref = torch.linspace(-1.0, 1.0, 4096, device=device)
    ref[0] = float("nan")
    item = {"outputs": [{"tensor": ref}]}
    compare_tensor(ref.clone(), ref, TOLERANCES["fp32"])
    standard_check(item, item)
    if fused:
        judge_fused.warm(ref)


def same_outputs(a: dict[str, Any], b: dict[str, Any]) -> tuple[bool, float | None]:
    """Whether two candidate replies hold the same output bits (NaN equal to NaN), and the largest difference."""
    items_a, items_b = a.get("outputs", []), b.get("outputs", [])
    if len(items_a) != len(items_b):
        return False, None
    same, worst = True, 0.0
    for x, y in zip(items_a, items_b):
        tx, ty = x.get("tensor"), y.get("tensor")
        if not isinstance(tx, torch.Tensor) or not isinstance(ty, torch.Tensor):
            continue
        if tx.shape != ty.shape or tx.dtype != ty.dtype:
            return False, None
        if torch.equal(tx, ty):
            continue
        if tx.is_floating_point():
            differs = False
            for cx, cy in zip(_chunks(tx), _chunks(ty)):  # bounded temporaries on large outputs
                both_nan = torch.isnan(cx) & torch.isnan(cy)
                if bool((both_nan | (cx == cy)).all()):
                    continue
                differs = True
                diff = (cx.double() - cy.double()).abs().masked_fill(both_nan, 0.0)
                worst = max(worst, float(diff.nan_to_num(nan=float("inf")).max()))
            if not differs:
                continue
        same = False
    return same, (None if same else worst)
