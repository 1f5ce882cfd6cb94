"""benchmarks/neighbour_cost.py on the CPU: the measurement behind the clean rule's unexplained false flags
(docs/results/h100-2026-12-07) runs end to end, every condition in every round; its figures come from the GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_neighbour_cost_benchmark_times_every_condition_in_every_round_and_in_fresh_processes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "neighbour_cost.py"), "--problems",
                           str(ROOT / "src" / "kbv" / "suites" / "builtin"), "--pairs", "level1/5", "--device", "cpu",
                           "--rounds", "2", "--trials", "5", "--fresh", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "neighbour_cost.json").read_text())
    (row,) = summary["rows"]
    assert [sorted(r) for r in row["rounds_ms"]] == [["alone", "idle", "stopped"]] * 2
    assert all(ms > 0 for r in row["rounds_ms"] for ms in r.values())
    assert row["over_alone"]["stopped"] == row["median_ms"]["stopped"] / row["median_ms"]["alone"]
    assert summary["stopped_over_alone_max"] == row["over_alone"]["stopped"]
    assert len(row["fresh_ms"]) == 2 and all(ms > 0 for ms in row["fresh_ms"])
    assert row["fresh_spread"] == max(row["fresh_ms"]) / min(row["fresh_ms"]) == summary["fresh_spread_max"]
