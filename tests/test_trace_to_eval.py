"""End to end on the CPU: `kbv trace` of a small model -> `kbv suite build` -> `kbv eval` of a problem written from
the trace (the reference as its own candidate) -> `kbv suite score` with the suite's weights."""

from __future__ import annotations

import pytest

import json
from pathlib import Path

from click.testing import CliRunner

from kbv.problems.candidates import write_reference_candidate
from kbv.cli import main
from kbv.problems import discover
from kbv.records import read_records


@pytest.fixture(autouse=True)
def _wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read whole table rows: a wide terminal (kbv's commands follow COLUMNS, else 80)."""
    monkeypatch.setenv("COLUMNS", "200")


def test_trace_suite_eval_and_score_end_to_end(tmp_path: Path) -> None:
    runner = CliRunner()
    trace = tmp_path / "trace.json"
    done = runner.invoke(main, ["trace", "llama3_8b", "--size", "tiny", "--device", "cpu", "--out", str(trace)])
    assert done.exit_code == 0, done.output
    suite = tmp_path / "suite"
    done = runner.invoke(main, ["suite", "build", str(trace), "--out", str(suite), "--held-out", "1"])
    assert done.exit_code == 0, done.output
    weights = json.loads((suite / "evaluator" / "weights.json").read_text())
    assert weights["time_source"] == "cpu" and weights["estimate"] is True  # labelled as CPU estimates
    problems = {p.key: p for p in discover(suite)}
    modules = [p for key, p in problems.items() if key.startswith("level2/")]
    assert modules, sorted(problems)
    norm = min(modules, key=lambda p: (len(p.shapes), p.problem_id))  # the cheapest module problem
    candidate = write_reference_candidate(norm, tmp_path / "candidates")
    out = tmp_path / "run.jsonl"
    done = runner.invoke(main, ["eval", "--problem", str(norm.path), "--candidate", str(candidate), "--out", str(out),
                                "--device", "cpu", "--protocol", "verified", "--trials", "1"])
    assert done.exit_code == 0, done.output
    (record,) = read_records(out)
    assert record["verdict"] == "correct", record["error"]
    # `eval --problem` of a file in a suite: every shape in KBV_SHAPES and the suite's held-out ones ran
    assert norm.held_out_shapes
    assert len(record["shape_results"] or [None]) == max(1, len(norm.shapes)) + len(norm.held_out_shapes)
    assert [s["held_out"] for s in record["shape_results"]][-len(norm.held_out_shapes):] == [True] * len(
        norm.held_out_shapes)
    done = runner.invoke(main, ["suite", "score", str(out), "--suite", str(suite), "--json"])
    assert done.exit_code == 0, done.output
    score = json.loads(done.output)
    assert set(score) >= {"overall", "operators"}
