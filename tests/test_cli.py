"""The ``kbv`` command, in-process through click's CliRunner (one real CPU evaluation, shared by the eval tests)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kbv import protocol
from kbv.cli import main
from kbv.problems import builtin_suite_dir, discover

ROOT = Path(__file__).resolve().parents[1]
RELU = ROOT / "src" / "kbv" / "suites" / "builtin" / "level1" / "5_ReLU.py"
CORRECT = ROOT / "tests" / "candidates" / "correct_torch.py"


@pytest.fixture(scope="module")
def cache_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {"KBV_CACHE_DIR": str(tmp_path_factory.mktemp("kbv-cli-cache"))}


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


def invoke(runner: CliRunner, args: list[str], env: dict[str, str]):
    return runner.invoke(main, [str(a) for a in args], env=env, catch_exceptions=False)


@pytest.fixture(scope="module")
def evaluated(runner, cache_env, tmp_path_factory):
    """One real evaluation of the plain-PyTorch ReLU candidate on the CPU."""
    out = tmp_path_factory.mktemp("cli-eval") / "tmp" / "results.jsonl"
    result = invoke(runner, ["eval", "--problem", RELU, "--candidate", CORRECT, "--out", out, "--device", "cpu"],
                    cache_env)
    return out, result


# ---------------------------------------------------------------------------------------------------------------
# kbv problems / kbv protocol


def test_problems_lists_the_builtin_suite_with_its_count(runner, cache_env):
    result = invoke(runner, ["problems"], cache_env)
    assert result.exit_code == 0, result.output
    n = len(discover(builtin_suite_dir()))
    assert n >= 30
    assert re.search(rf"^builtin: {n} problems\b", result.output, re.MULTILINE), result.output


def test_problems_builtin_lists_every_problem(runner, cache_env):
    result = invoke(runner, ["problems", "builtin"], cache_env)
    assert result.exit_code == 0, result.output
    out = result.output
    for key in ("level1/5_ReLU", "level1/19_KLDivLoss", "level2/1_Gemm_Bias_ReLU", "level3/1_MLP"):
        assert key in out, key
    for p in discover(builtin_suite_dir()):
        assert p.key in out, p.key
    # KLDivLoss's row shows its declared skip
    kl_row = next(line for line in out.splitlines() if "level1/19_KLDivLoss" in line)
    assert "D4" in kl_row
    relu_row = next(line for line in out.splitlines() if "level1/5_ReLU " in line or "level1/5_ReLU│" in line)
    assert "small" in relu_row


def test_problems_of_a_folder(runner, cache_env, tmp_path):
    (tmp_path / "level1").mkdir()
    source = RELU.read_text()
    (tmp_path / "level1" / "3_Mine.py").write_text(source)
    result = invoke(runner, ["problems", tmp_path], cache_env)
    assert result.exit_code == 0, result.output
    assert "level1/3_Mine" in result.output
    assert "level1/5_ReLU" not in result.output


def test_protocol_prints_distributions_tolerances_baselines(runner, cache_env):
    result = invoke(runner, ["protocol"], cache_env)
    assert result.exit_code == 0, result.output
    out = result.output
    for d in ("D1", "D2", "D3", "D4", "D5", "D6"):
        assert re.search(rf"\b{d}\b", out), d
    for precision in ("fp32", "bf16"):
        assert re.search(rf"\b{precision}\b", out), precision
    for baseline in protocol.BASELINES:
        assert re.search(rf"^\W*{baseline}\b", out, re.MULTILINE), baseline  # a table row starting with the name
    assert "ieee" in out and "tf32" in out  # the matmul precisions of the two baselines
    assert f"{protocol.TOLERANCES['bf16'].rtol:g}" in out
    assert " > ".join(protocol.VERDICT_PRECEDENCE) in " ".join(out.split())  # may wrap at the terminal's width
    for flag in protocol.FLAGS:
        assert flag in out


def test_version(runner, cache_env):
    result = invoke(runner, ["--version"], cache_env)
    assert result.exit_code == 0
    assert re.search(r"\d+\.\d+", result.output)


# ---------------------------------------------------------------------------------------------------------------
# kbv eval / kbv report


def test_eval_writes_one_correct_record_and_prints_the_report(evaluated):
    out, result = evaluated
    assert result.exit_code == 0, result.output
    lines = out.read_text().splitlines()
    assert len(lines) == 1
    r = json.loads(lines[0])
    assert r["schema"] == "kbv.result/1"
    assert r["problem"] == "level1/5_ReLU"
    assert r["level"] == 1
    assert r["sample"] == 0
    assert r["candidate_sha256"] == hashlib.sha256(CORRECT.read_bytes()).hexdigest()
    assert r["verdict"] == "correct", r.get("error") or r.get("correctness")
    assert r["standard_verdict"] == "correct"
    assert r["error"] is None
    assert r["env"]["device_kind"] == "cpu"
    assert r["env"]["profile"] == "small"  # auto profile on the CPU
    assert {n: d["status"] for n, d in r["correctness"]["distributions"].items()} == {
        "D1": "passed", "D2": "passed", "D3": "passed", "D4": "passed", "D5": "passed", "D6": "passed"}
    for baseline in ("standard", "verified"):  # --protocol both by default
        s = r["speedup"][baseline]
        assert s["value"] > 0 and s["ci_low"] <= s["value"] <= s["ci_high"]
    # one pair: one compact block (the verdict, both speedups with intervals, flags), no suite-level tables
    assert "1 evaluated, 0 already recorded" in result.stderr
    assert re.search(r"^level1/5_ReLU\s+<-\s+correct_torch\.py", result.stdout, re.MULTILINE)
    assert "verdict: correct" in result.stdout
    assert "speedup verified: " in result.stdout and "speedup standard: " in result.stdout
    assert "overall" not in result.stdout


def test_eval_resume_writes_nothing_new(evaluated, runner, cache_env):
    out, first = evaluated
    assert first.exit_code == 0
    before = out.read_bytes()
    result = invoke(runner, ["eval", "--problem", RELU, "--candidate", CORRECT, "--out", out, "--device", "cpu",
                             "--resume"], cache_env)
    assert result.exit_code == 0, result.output
    assert "0 evaluated, 1 already recorded" in result.output
    assert out.read_bytes() == before
    assert "level1/5_ReLU" in result.output  # the report of what is recorded is still printed


def test_report_json_has_an_overall_group(evaluated, runner, cache_env):
    out, _ = evaluated
    result = invoke(runner, ["report", out, "--format", "json"], cache_env)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["runs"] == [out.stem] and data["universe"] == ["level1/5_ReLU"]
    groups = data["levels"][out.stem]
    by_name = {g["name"]: g for g in groups}
    assert set(by_name) == {"level 1", "overall"}
    overall = by_name["overall"]
    assert overall["n"] == 1
    assert overall["compiled"] == 1.0
    assert overall["correct_verified"] == 1.0
    assert overall["correct_standard"] == 1.0
    assert overall["fast_p_verified"]["0.0"] == 1.0  # correct with a positive speedup
    assert overall["geomean_verified"] > 0


def test_report_table_of_several_files(evaluated, runner, cache_env, tmp_path):
    out, _ = evaluated
    other = tmp_path / "other.jsonl"
    record = json.loads(out.read_text().splitlines()[0])
    record.pop("auth")  # a hand-made record is unauthenticated (its edited content would fail verification)
    record.update(problem="level2/1_Gemm_Bias_ReLU", level=2, verdict="incorrect", standard_verdict="incorrect",
                  speedup={}, candidate_sha256="0" * 64)
    other.write_text(json.dumps(record) + "\n")
    result = invoke(runner, ["report", out, other, "--format", "json"], cache_env)
    data = json.loads(result.output)
    assert data["runs"] == [out.stem, "other"]  # two runs side by side, over the union of their problems
    for run, correct in ((out.stem, 0.5), ("other", 0.0)):
        groups = {g["name"]: g for g in data["levels"][run]}
        assert set(groups) == {"level 1", "level 2", "overall"}
        assert groups["overall"]["n"] == 2  # a problem missing from a run counts as failed there
        assert groups["overall"]["correct_verified"] == correct
    table = invoke(runner, ["report", out, other, "--per-candidate"], cache_env)
    assert table.exit_code == 0
    assert "level2/1_Gemm_Bias_ReLU" in table.output and "incorrect" in table.output


@pytest.mark.parametrize("flags", [
    [],
    ["--problem", RELU],
    ["--candidate", CORRECT],
    ["--problems", ROOT / "src" / "kbv" / "suites" / "builtin"],
    ["--problem", RELU, "--candidates", ROOT / "tests" / "candidates"],
], ids=["none", "problem-only", "candidate-only", "problems-only", "mixed"])
def test_eval_without_problem_and_candidate_is_a_usage_error(runner, cache_env, tmp_path, flags):
    out = tmp_path / "r.jsonl"
    result = runner.invoke(main, ["eval", *map(str, flags), "--out", str(out), "--device", "cpu"], env=cache_env)
    assert result.exit_code == 2, result.output
    assert "--problem" in result.output
    assert not out.exists()


def test_eval_requires_out(runner, cache_env):
    result = runner.invoke(main, ["eval", "--problem", str(RELU), "--candidate", str(CORRECT)], env=cache_env)
    assert result.exit_code == 2
    assert "--out" in result.output


def test_report_of_a_missing_file_is_an_error(runner, cache_env, tmp_path):
    result = runner.invoke(main, ["report", str(tmp_path / "missing.jsonl")], env=cache_env)
    assert result.exit_code == 2
