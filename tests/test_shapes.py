"""Multi-shape problems: every KBV_SHAPES entry and every held-out shape (evaluator/heldout.json) is evaluated; a
candidate is correct only if correct on all of them (the policy for shape-specialised kernels)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbv.candidates import Candidate
from kbv.pipeline import EvalOptions, evaluate
from kbv.problems import discover, load_problem
from kbv.records import Record
from kbv.shapes import merge

ROOT = Path(__file__).parent
SUITE = ROOT / "problems" / "multishape"
OPTIONS = dict(device="cpu", protocol="verified", timeout=60.0, trials=1)


def test_discover_attaches_held_out_shapes_and_the_file_has_none() -> None:
    (problem,) = discover(SUITE)
    assert problem.shapes == ({"rows": 8, "cols": 16}, {"rows": 5, "cols": 48})
    assert problem.held_out_shapes == ({"rows": 3, "cols": 200},)
    assert [(i, h) for i, _, h in problem.shape_overrides()] == [(0, False), (1, False), (2, True)]
    assert "200" not in problem.path.read_text()  # held-out shapes never reach the generator's file
    alone = load_problem(problem.path)  # loaded without its suite: no evaluator side
    assert alone.held_out_shapes == ()


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
