"""The tolerance policy can fail: for every built-in problem and distribution, all-zeros, a constant (the best one,
the reference's own mean) and the input itself are rejected wherever the reference is not itself that output, while
the reference and a rounding-level perturbation of it pass."""

from __future__ import annotations

import pytest
import torch

from conftest import SUITE
from kbv import judge
from kbv.problems import discover
from kbv.protocol import DISTRIBUTIONS, TOLERANCES
from kbv.worker import inputs, loading

PROBLEMS = discover(SUITE)
TOL = TOLERANCES["fp32"]


def _reference_outputs(problem, distribution) -> tuple[list[torch.Tensor], list]:
    module = loading.load_problem_module(problem.path, "small")
    model = loading.build_model(module.Model, loading.init_inputs(module), 1234, "cpu", "fp32", problem.mode)
    args = inputs.make_inputs(module, 99, "cpu", "fp32", distribution, problem.unscaled_inputs)
    with torch.no_grad():
        out = model(*args)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [o.detach() for o in outs], args


def _passes(candidate: torch.Tensor, reference: torch.Tensor) -> bool:
    if candidate.shape != reference.shape or candidate.dtype != reference.dtype:
        return False
    return judge.compare_tensor(candidate, reference, TOL).passed


def _is(candidate: torch.Tensor, reference: torch.Tensor) -> bool:
    """The reference *is* that trivial output (exactly, up to the fp32 floor)."""
    return candidate.shape == reference.shape and bool(
        ((candidate.double() - reference.double()).abs() <= TOL.atol_floor).all())


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.key for p in PROBLEMS])
def test_trivial_outputs_are_rejected(problem) -> None:
    checked = 0
    for dist in DISTRIBUTIONS:
        if dist.name in problem.skip:
            continue
        outs, args = _reference_outputs(problem, dist)
        for ref in outs:
            assert _passes(ref.clone(), ref)
            if ref.is_floating_point():
                noisy = ref * (1 + 1e-6 * torch.randn_like(ref))
                assert _passes(noisy, ref), f"{dist.name}: a 1e-6 relative perturbation must pass"
            mean = ref.double().mean()
            constant = torch.full_like(ref, float(mean) if ref.is_floating_point() else round(float(mean)))
            trivial = {"zeros": torch.zeros_like(ref), "constant": constant}
            trivial.update({f"input {i}": a for i, a in enumerate(args)
                            if isinstance(a, torch.Tensor) and a.shape == ref.shape and a.dtype == ref.dtype})
            for name, output in trivial.items():
                if _is(output, ref):
                    continue  # e.g. ReLU under D4 is all zeros; a scalar loss is its own constant
                assert not _passes(output, ref), f"{dist.name}: {name} must be rejected"
                checked += 1
    assert checked >= 6


def test_standard_protocol_accepts_zeros_under_d3_where_verified_rejects() -> None:
    """Why a fixed atol fails: softmax outputs under D3 are ~1/dim, inside allclose(atol=1e-2) of zero."""
    problem = next(p for p in PROBLEMS if p.key == "level1/7_Softmax")
    (ref,), _ = _reference_outputs(problem, DISTRIBUTIONS[2])
    zeros = torch.zeros_like(ref)
    assert torch.allclose(zeros, ref, atol=1e-2, rtol=1e-2)
    assert not _passes(zeros, ref)


def test_zero_reference_accepts_only_zeros() -> None:
    ref = torch.zeros(64, 128)
    assert _passes(torch.zeros_like(ref), ref)
    assert _passes(-torch.zeros_like(ref), ref)
    assert not _passes(torch.full_like(ref, 1e-3), ref)


def test_tf32_rounding_passes_but_a_percent_error_fails() -> None:
    """The verified baseline runs matmuls in TF32, so a TF32 kernel must pass fp32; a 5% error must not."""
    torch.manual_seed(0)
    a, b = torch.randn(256, 4096), torch.randn(4096, 256)
    ref = (a.double() @ b.double()).float()
    tf32_like = _round_mantissa(a, 10) @ _round_mantissa(b, 10)
    assert _passes(tf32_like, ref)
    assert not _passes(ref * 1.05, ref)


def _round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    m, e = torch.frexp(x)
    scale = 2.0 ** (bits + 1)
    return torch.ldexp(torch.round(m * scale) / scale, e)


def test_nonfinite_policy() -> None:
    ref = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 2.0])
    assert _passes(ref.clone(), ref)
    for i, bad in ((1, 0.0), (2, 1e30), (3, float("inf")), (4, float("nan"))):
        c = ref.clone()
        c[i] = bad
        assert not _passes(c, ref), (i, bad)


def test_integer_outputs_must_be_equal() -> None:
    ref = torch.tensor([3, 1, 2])
    assert judge.compare_tensor(ref.clone(), ref, TOL).passed
    assert not judge.compare_tensor(torch.tensor([3, 1, 1]), ref, TOL).passed
