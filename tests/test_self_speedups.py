"""benchmarks/self_speedups.py: the reference-against-itself figures it reads from records, custom kernels left out."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kbv.problems.candidates import reference_candidate_text, write_reference_candidate
from kbv.problems import load_problem
from kbv.protocol import REFERENCE_CACHE_SLOW_MAX, SCHEMA

ROOT = Path(__file__).resolve().parents[1]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("self_speedups", ROOT / "benchmarks" / "self_speedups.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(problem: str, sha: str, verified: float, low: float, high: float, clocks: list[tuple[int, str, float, float]],
            drift: float | None = None, set_aside: bool = False) -> dict[str, Any]:
    timing: dict[str, Any] = {"command_clocks": [
        {"pair": pair, "role": role, "median_ms": {"verified": ms}, "sync_tail_ms": {"verified": tail}}
        for pair, role, ms, tail in clocks]}
    if drift is not None and set_aside:
        timing["reference_cache_too_slow"] = {"verified": {"median": 1.0, "remeasure_median": 1.0 + drift,
                                                           "drift": drift}}
        timing["reference_verified"] = {"cached": False}
    elif drift is not None:
        timing["reference_verified"] = {"cached": True, "drift": drift}
    return {"schema": SCHEMA, "problem": problem, "candidate_sha256": sha, "timing_ms": timing,
            "speedup": {"verified": {"value": verified, "ci_low": low, "ci_high": high}, "standard": None}}


def test_self_speedups_are_read_from_the_reference_against_itself_only(tmp_path: Path) -> None:
    problems = tmp_path / "problems"
    (problems / "level1").mkdir(parents=True)
    sources = {"level1/1_A": "class Model:\n    pass\n", "level1/2_B": "class Model:\n    x = 2\n"}
    for name, text in sources.items():
        (problems / f"{name}.py").write_text(text)
    own = {n: hashlib.sha256(reference_candidate_text(t).encode()).hexdigest() for n, t in sources.items()}
    run = [
        _record("level1/1_A", own["level1/1_A"], 1.2, 1.0, 1.5, [(0, "reference", 1.0, 0.02), (0, "reference", 1.3, 0.04),
                                                                  (0, "candidate", 1.0, 0.03)], drift=-0.15),
        _record("level1/2_B", own["level1/2_B"], 0.98, 0.97, 0.99, [(0, "candidate", 2.0, 0.05)], drift=-0.08,
                set_aside=True),
        _record("level1/2_B", "a custom kernel's hash", 3.0, 2.9, 3.1, [(0, "candidate", 9.0, 9.0)], drift=-0.3),
    ]
    path = tmp_path / "run.jsonl.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in run) + json.dumps({"pairs": 3}) + "\n")
    out = tmp_path / "s.json"
    summary = _bench().main([f"one={path}", "--problems", str(problems), "--out", str(out)])
    assert json.loads(out.read_text()) == summary
    one = summary["one"]
    assert one["pairs"] == 2  # the custom kernel is left out
    verified = one["verified"]
    assert (verified["min"], verified["max"], verified["within_3pct"], verified["within_5pct"]) == (0.98, 1.2, 1, 1)
    assert verified["ci_width_max"] == 1.5 and "standard" not in one
    assert one["process_spread"] == {"median": 1.3, "max": 1.3}  # one process with two commands
    assert one["sync_tail_ms"]["max"] == 0.05  # the custom kernel's 9.0 is not counted
    cached = one["cached"]
    assert -0.08 < -REFERENCE_CACHE_SLOW_MAX
    assert (cached["pairs"], cached["below_cache"], cached["set_aside"]) == (2, 2, 1)
    assert cached["kept_below_cache"] == [{"problem": "level1/1_A", "drift": -0.15, "speedup": 1.2, "set_aside": False}]


def test_the_reference_as_its_own_candidate_has_the_hash_the_benchmark_expects(tmp_path: Path) -> None:
    problem = load_problem(ROOT / "src" / "kbv" / "suites" / "builtin" / "level1" / "5_ReLU.py")
    written = write_reference_candidate(problem, tmp_path)
    assert written.read_text() == reference_candidate_text(problem.path.read_text())


def test_a_run_not_labelled_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "1_A.py").write_text("class Model: pass\n")
    with pytest.raises(SystemExit):
        _bench().main(["records.jsonl", "--problems", str(tmp_path)])
    assert "expected LABEL=FILE" in capsys.readouterr().err


def test_the_gpu_scripts_stages_say_the_self_speedups_of_their_records(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """scripts/gpu_check.py's vskb and reward stages say this benchmark's figures for their records as they end (and
    write them beside the records); a stage with no records says nothing."""
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec and spec.loader
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    problems = tmp_path / "problems"
    (problems / "level1").mkdir(parents=True)
    (problems / "level1" / "1_A.py").write_text("class Model:\n    pass\n")
    sha = hashlib.sha256(reference_candidate_text("class Model:\n    pass\n").encode()).hexdigest()
    records = tmp_path / "vs_kernelbench.jsonl"
    records.write_text(json.dumps(_record("level1/1_A", sha, 1.01, 1.0, 1.02, [(0, "reference", 1.0, 0.02)])) + "\n")
    args = type("Args", (), {"kb_dir": problems})()
    gpu_check.say_self_speedups(tmp_path, "vskb", records, args)
    said = capsys.readouterr().out
    assert said.startswith("[vskb self-speedups]") and json.loads(said.split("]", 1)[1])["pairs"] == 1
    assert json.loads((tmp_path / "vskb-self_speedups.json").read_text())["vskb"]["verified"]["max"] == 1.01
    gpu_check.say_self_speedups(tmp_path, "bench-reward", tmp_path / "missing.jsonl", args)
    assert capsys.readouterr().out == ""
