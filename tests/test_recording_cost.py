"""benchmarks/recording_cost.py on the CPU: the measurement the GPU's profiled call waits for (docs/security.md) runs
end to end and counts what the recording saw; its figures come from the GPU run, not from here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_recording_cost_benchmark_times_every_mode_and_counts_the_records(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "recording_cost.py"), "--problems",
                           str(ROOT / "src" / "kbv" / "suites" / "builtin"), "--pairs", "level1/5", "--device", "cpu",
                           "--rounds", "2", "--trials", "5", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "recording_cost.json").read_text())
    (row,) = summary["rows"]
    assert row["candidate"] == "reference"  # no custom kernel for the built-in problem: the reference against itself
    for role in ("reference", "candidate"):
        assert [len(row["rounds_ms"][role][mode]) for mode in ("plain", "recorded", "recorded_no_lead")] == [2] * 3
        assert row["records_per_call"][role] >= 1  # the recording saw the call's operators
    assert row["distortion"] == row["speedup"]["recorded"] / row["speedup"]["plain"] > 0
    assert row["distortion_no_lead"] == row["speedup"]["recorded_no_lead"] / row["speedup"]["plain"] > 0
    assert summary["baseline"] == "verified" and set(summary["no_lead_over_plain_median"]) == {"reference", "candidate"}
