"""Multi-shape problems: every KBV_SHAPES entry and every held-out shape (evaluator/heldout.json) is evaluated; a
candidate is correct only if correct on all of them (the policy for shape-specialised kernels). The built-in suite
holds one held-out shape per level-1 problem (src/kbv/suites/builtin/evaluator/heldout.json)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import torch

from kbv.problems.candidates import Candidate
from kbv.eval import EvalOptions, evaluate
from kbv.problems import Problem, builtin_suite_dir, discover, load_problem, load_problem_in_suite
from kbv.records import Record
from kbv.eval.shapes import merge
from kbv.tracesuite.weights import load_heldout
from kbv.worker.loading import apply_sizes, import_file

ROOT = Path(__file__).parent
SUITE = ROOT / "problems" / "multishape"
OPTIONS = dict(device="cpu", protocol="verified", timeout=60.0, trials=1)
BUILTIN_HELD_OUT = load_heldout(builtin_suite_dir())


def test_discover_attaches_held_out_shapes_and_the_file_has_none() -> None:
    (problem,) = discover(SUITE)
    assert problem.shapes == ({"rows": 8, "cols": 16}, {"rows": 5, "cols": 48})
    assert problem.held_out_shapes == ({"rows": 3, "cols": 200},)
    assert [(i, h) for i, _, h in problem.shape_overrides()] == [(0, False), (1, False), (2, True)]
    assert "200" not in problem.path.read_text()  # held-out shapes never reach the generator's file
    alone = load_problem(problem.path)  # loaded without its suite: no evaluator side
    assert alone.held_out_shapes == ()
    # given alone where it sits in its suite (kbv eval --problem): the suite's held-out shapes all the same
    assert load_problem_in_suite(problem.path).held_out_shapes == ({"rows": 3, "cols": 200},)


@pytest.fixture(scope="module")
def records() -> dict[str, Record]:
    (problem,) = discover(SUITE)
    return {name: evaluate(problem, Candidate.from_path(ROOT / "candidates" / f"{name}.py"), EvalOptions(**OPTIONS))
            for name in ("softmax_any_shape", "softmax_cols_up_to_64")}


def test_an_honest_kernel_is_correct_on_every_shape(records) -> None:
    r = records["softmax_any_shape"]
    assert r.verdict == "correct", r.error
    assert [s["verdict"] for s in r.shape_results] == ["correct"] * 3
    assert [s["shapes"]["cols"] for s in r.shape_results] == [16, 48, 200]  # each ran at its own size
    values = r.speedup["verified"]["per_shape"]
    assert len(values) == 3 and r.speedup["verified"]["value"] == pytest.approx(
        (values[0] * values[1] * values[2]) ** (1 / 3))
    # the interval: every shape at its own bound at once
    merged = r.speedup["verified"]
    assert merged["ci_low"] <= merged["value"] <= merged["ci_high"] and merged["ci_from"].startswith("shapes")


def test_a_shape_specialised_kernel_fails_on_the_held_out_shape(records) -> None:
    r = records["softmax_cols_up_to_64"]
    assert r.verdict == "incorrect"
    by_index = {s["index"]: s for s in r.shape_results}
    assert by_index[0]["verdict"] == by_index[1]["verdict"] == "correct"
    assert by_index[2]["held_out"] and by_index[2]["verdict"] == "incorrect"
    assert r.speedup["verified"] is None  # not every shape was timed


def test_merge_takes_worst_verdict_union_of_flags_and_median_attainment() -> None:
    def rec(verdict: str, flags: list[str], attainment: float, speedup: float) -> Record:
        return Record(problem="level1/1_X", level=1, problem_id=1, problem_sha256="", candidate="c",
                      candidate_sha256="", sample=0, verdict=verdict, standard_verdict=verdict, flags=flags,
                      speedup={"verified": {"value": speedup}}, roofline={"attainment": {"candidate": attainment}},
                      memory_bytes={"candidate_peak": int(attainment * 100), "reference_peak": 10})
    merged = merge([(0, {"n": 1}, False, rec("correct", ["a"], 0.2, 2.0)),
                    (1, {"n": 2}, False, rec("correct", ["b"], 0.9, 8.0)),
                    (2, {"n": 3}, True, rec("correct", [], 0.5, 4.0))])
    assert merged.verdict == "correct" and merged.flags == ["a", "b"]
    assert merged.roofline["attainment"]["candidate"] == 0.5
    assert merged.speedup["verified"]["value"] == pytest.approx(4.0)
    assert merged.memory_bytes["candidate_peak"] == 90
    worse = merge([(0, None, False, rec("correct", [], 0.2, 2.0)), (1, None, True, rec("rejected", [], 0.2, 2.0))])
    assert worse.verdict == "rejected"
    assert merged.speedup["verified"]["ci_low"] is None  # shapes without intervals: none over them either
    # with each shape's interval: the geometric means of the bounds
    a, b = rec("correct", [], 0.2, 1.0), rec("correct", [], 0.2, 4.0)
    a.speedup["verified"] |= {"ci_low": 0.9, "ci_high": 1.1, "confidence": 0.95}
    b.speedup["verified"] |= {"ci_low": 3.6, "ci_high": 4.4, "confidence": 0.95}
    both = merge([(0, None, False, a), (1, None, True, b)]).speedup["verified"]
    assert both["value"] == pytest.approx(2.0) and both["confidence"] == 0.95
    assert (both["ci_low"], both["ci_high"]) == (pytest.approx((0.9 * 3.6) ** 0.5), pytest.approx((1.1 * 4.4) ** 0.5))


# ---------------------------------------------------------------------------------------------------------------
# The built-in suite's held-out shapes


@pytest.fixture(scope="module")
def builtin() -> dict[str, Problem]:
    return {p.key: p for p in discover(builtin_suite_dir())}


def _module_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}


def _run_reference(problem: Problem, shape: dict | None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The problem module at the small profile (then ``shape``), its Model run once on the CPU."""
    name = f"kbv_heldout_check_{problem.level}_{problem.problem_id}"
    try:
        module = apply_sizes(import_file(problem.path, name), "small", shape)
    finally:
        sys.modules.pop(name, None)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    inputs = module.get_inputs()
    with torch.no_grad():
        out = model(*inputs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [x for x in inputs if isinstance(x, torch.Tensor)], outs


def test_builtin_held_out_shapes_cover_the_level1_problems(builtin) -> None:
    assert set(BUILTIN_HELD_OUT) <= set(builtin), set(BUILTIN_HELD_OUT) - set(builtin)  # no stale keys
    assert set(BUILTIN_HELD_OUT) == {k for k, p in builtin.items() if p.level == 1}
    for key, shapes in BUILTIN_HELD_OUT.items():
        assert builtin[key].held_out_shapes == tuple(shapes)
        assert load_problem(builtin[key].path).held_out_shapes == ()  # the file alone (`kbv eval --problem`)


@pytest.mark.parametrize("key", sorted(BUILTIN_HELD_OUT))
def test_builtin_held_out_shape_runs_the_reference_at_small_odd_sizes(builtin, key: str) -> None:
    """Every held-out entry names only the problem's own size constants, with odd values (no power-of-two tiling
    divides them), and the reference runs on it at the CPU's small profile, on inputs and outputs no larger than
    the small profile's (so the extra shape costs about what the profile does)."""
    problem = builtin[key]
    small = problem.profiles["small"]
    constants = _module_constants(problem.path)
    for shape in problem.held_out_shapes:
        assert shape and set(shape) <= constants, f"{key}: unknown constants {set(shape) - constants}"
        assert all(type(v) is int and v % 2 == 1 for v in shape.values()), shape
        assert any(small.get(k) != v for k, v in shape.items()), "the held-out shape is the small profile's"
        base_in, base_out = _run_reference(problem, None)
        inputs, outputs = _run_reference(problem, shape)
        assert [tuple(x.shape) for x in outputs] != [tuple(x.shape) for x in base_out]
        assert all(torch.isfinite(o.float()).all() for o in outputs if o.is_floating_point())
        assert sum(x.numel() for x in inputs) <= sum(x.numel() for x in base_in)
        assert sum(x.numel() for x in outputs) <= sum(x.numel() for x in base_out)


@pytest.fixture(scope="module")
def relu_records(builtin) -> dict[str, Record]:
    problem = builtin["level1/5_ReLU"]  # from its suite, as `kbv eval --problems` and `kbv demo` see it
    return {name: evaluate(problem, Candidate.from_path(ROOT / "candidates" / f"{name}.py"), EvalOptions(**OPTIONS))
            for name in ("shape_specialised", "correct_torch")}


def test_a_kernel_specialised_to_the_builtin_cpu_shape_fails_the_held_out_shape(relu_records) -> None:
    """tests/candidates/shape_specialised.py is right only at (64, 1024), level1/5_ReLU's small profile."""
    (held,) = BUILTIN_HELD_OUT["level1/5_ReLU"]
    r = relu_records["shape_specialised"]
    assert r.verdict == "incorrect"
    visible, held_out = r.shape_results
    assert not visible["held_out"] and visible["verdict"] == "correct" and visible["overrides"] is None
    assert visible["shapes"]["batch_size"] == 64 and visible["shapes"]["dim"] == 1024
    assert held_out["held_out"] and held_out["verdict"] == "incorrect" and held_out["overrides"] == held
    assert {k: held_out["shapes"][k] for k in held} == held  # it ran at the held-out sizes


def test_an_honest_kernel_is_correct_on_the_builtin_held_out_shape(relu_records) -> None:
    r = relu_records["correct_torch"]
    assert r.verdict == "correct", r.error
    assert [(s["held_out"], s["verdict"]) for s in r.shape_results] == [(False, "correct"), (True, "correct")]
