"""`kbv demo` end to end on the CPU: the bundled examples (a C++ load_inline kernel, Triton kernels under the
interpreter, a PyTorch rewrite and instructive wrong kernels) get the verdicts they were written to get."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import CANDIDATES, problem_path
from kbv.eval import EvalOptions, evaluate
from kbv.records import read_records

# example file -> (verdict, distributions that must fail)
EXPECTED = {
    "cpu/level_1_problem_5_sample_0_kernel.py": ("correct", []),  # C++ load_inline ReLU
    "common/level_1_problem_5_sample_1_kernel.py": ("incorrect", ["D4", "D5", "D6"]),  # ReLU that returns its input
    "common/level_1_problem_6_sample_0_kernel.py": ("correct", []),  # Triton GELU
    "common/level_1_problem_8_sample_1_kernel.py": ("incorrect", ["D3"]),  # LayerNorm without eps
    "common/level_1_problem_9_sample_0_kernel.py": ("correct", []),  # Triton RMSNorm
    "common/level_1_problem_13_sample_1_kernel.py": ("incorrect", ["D1", "D2", "D3", "D4", "D5", "D6"]),  # wrong shape
    "common/level_2_problem_3_sample_0_kernel.py": ("correct", []),  # PyTorch rewrite
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict], str, float]:
    out = tmp_path_factory.mktemp("demo") / "demo.jsonl"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "kbv", "demo", "--device", "cpu", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ))
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = {}
    for r in read_records(out):
        path = Path(r["candidate"])
        records[f"{path.parent.name}/{path.name}"] = r
    return records, proc.stdout, elapsed


def test_demo_verdicts(demo) -> None:
    records, _, _ = demo
    for name, (verdict, failing) in EXPECTED.items():
        r = records[name]
        assert r["verdict"] == verdict, (name, r["error"], r["correctness"])
        assert r["correctness"]["failed_distributions"] == failing, name


def test_demo_sigmoid_approximation_fails_outside_the_unit_interval(demo) -> None:
    records, _, _ = demo
    r = records["common/level_1_problem_16_sample_1_kernel.py"]
    assert r["verdict"] == "incorrect" and r["standard_verdict"] == "correct"
    assert "D1" not in r["correctness"]["failed_distributions"]
    assert {"D2", "D4"} & set(r["correctness"]["failed_distributions"])


def test_demo_report_shows_both_protocols(demo) -> None:
    records, stdout, elapsed = demo
    assert len(records) >= 8
    assert "Correctness and speed (verified | standard protocol)" in stdout and "hidden distributions" in stdout
    assert "fails D4" in stdout
    assert elapsed < 300  # the README's promise: under 5 minutes on a 2-core machine


def test_correct_examples_were_timed_under_both_baselines(demo) -> None:
    records, _, _ = demo
    for name, (verdict, _) in EXPECTED.items():
        if verdict == "correct":
            speedup = records[name]["speedup"]
            assert speedup["standard"]["value"] > 0 and speedup["verified"]["value"] > 0


def test_cpp_build_failure_is_a_compile_error(demo) -> None:
    """Runs after the demo so it shares the session's warm build tooling."""
    record = evaluate(problem_path("level1/5_ReLU"), CANDIDATES / "build_error.py",
                      EvalOptions(device="cpu", build_timeout=300))
    assert record.verdict == "compile_error"
    assert record.error["stage"] == "compile"
    assert "error" in (record.error["log_tail"] + record.error["message"]).lower()
