"""benchmarks/distribution_cost.py on the CPU: the measurement of whether a kernel's time depends on its timed
inputs' distribution (the clean rule's false flags of docs/results/h100-2026-12-07) runs end to end, and its
stratified median weighs each distribution's own median; its figures come from the GPU."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import distribution_cost  # noqa: E402


def test_the_stratified_median_weighs_each_distributions_median_not_the_calls() -> None:
    # half the calls D1 at 1 ms, half D2-D6 at 2 ms: the plain median sits between the clusters, the stratified one
    # is exp((5 ln 1 + 5 ln 2) / 10) whatever the split of calls
    names = ["D1"] * 5 + ["D2", "D3", "D4", "D5", "D6"]
    times = [1.0] * 5 + [2.0] * 5
    assert math.isclose(distribution_cost.stratified(times, names), math.sqrt(2.0))
    assert math.isclose(distribution_cost.stratified([1.0] * 9 + [2.0] * 5, ["D1"] * 9 + names[5:]), math.sqrt(2.0))
    assert math.isclose(distribution_cost.stratified([3.0], ["D4"]), 3.0)


def test_the_distribution_cost_benchmark_times_every_distribution_and_the_mix(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "distribution_cost.py"), "--problems",
                           str(ROOT / "src" / "kbv" / "suites" / "builtin"), "--pairs", "level1/5", "--device", "cpu",
                           "--trials", "4", "--commands", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = json.loads((out / "distribution_cost.json").read_text())["rows"]
    assert sorted(row["per_distribution_ms"]) == ["D1", "D2", "D3", "D4", "D5", "D6"]
    assert row["over_d1"]["D1"] == 1.0 and all(ms > 0 for ms in row["per_distribution_ms"].values())
    assert len(row["mixed"]) == 2 and all(m["calls"] >= 1 and 0 <= m["d1_share"] <= 1 for m in row["mixed"])
    assert row["mixed_spread"] == (max(m["median_ms"] for m in row["mixed"])
                                   / min(m["median_ms"] for m in row["mixed"]))
