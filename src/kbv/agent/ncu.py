"""Nsight Compute metrics for the agent's feedback (``kbv agent run --ncu``, GPU only, opt in).

One extra untimed forward of a correct kernel runs under ``ncu`` in a separate process; the achieved memory and
compute throughput (percent of peak) and the duration of every kernel launched inside an NVTX range around that
call are parsed from ``ncu --csv --page raw``. The results are feedback only: they decide nothing. That process
runs the candidate outside kbv's sandbox (``ncu`` may need loopback, which the sandbox's network namespace
removes), so it is off unless asked for. Without CUDA or without ``ncu`` on PATH it is skipped, and the audit says
why.

``python -m kbv.worker.ncu_target PROBLEM KERNEL [--profile NAME] [--precision fp32|bf16]`` is the profiled process.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from kbv.proc import kbv_env

RANGE = "kbv_profiled"
METRICS = {"memory_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
           "compute_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "duration_ns": "gpu__time_duration.sum"}


def unavailable(device: str) -> str | None:
    """Why Nsight Compute cannot run here (None when it can)."""
    if device != "cuda":
        return "no GPU: Nsight Compute profiles CUDA kernels only"
    if shutil.which("ncu") is None:
        return "ncu is not on PATH"
    return None


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def parse_csv(output: str) -> list[dict[str, Any]]:
    """Kernels from ``ncu --csv --page raw`` output (other lines, such as ``==PROF==`` messages, are skipped)."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    kernels = []
    for row in rows:
        if not (row.get("ID") or "").strip().isdigit():
            continue  # the units row
        entry: dict[str, Any] = {"name": row.get("Kernel Name", "")}
        for key, metric in METRICS.items():
            entry[key] = _number(row.get(metric, ""))
        kernels.append(entry)
    return kernels


class NcuProfiler:
    """``(problem, kernel file) -> {"status", "kernels" | "reason"}`` for the agent loop."""

    def __init__(self, profile: str | None, precision: str = "fp32", timeout: float = 300.0):
        self.profile, self.precision, self.timeout = profile, precision, timeout

    def __call__(self, problem: Any, kernel: Path) -> dict[str, Any]:
        reason = unavailable("cuda")
        if reason:
            return {"status": "skipped", "reason": reason}
        cmd = ["ncu", "--clock-control", "none", "--csv", "--page", "raw", "--nvtx", "--nvtx-include", f"{RANGE}/",
               "--target-processes", "all", "--metrics", ",".join(METRICS.values()),
               sys.executable, "-m", "kbv.worker.ncu_target", str(problem.path), str(kernel),
               "--precision", self.precision]
        if self.profile:
            cmd += ["--profile", self.profile]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout, env=kbv_env())
        except subprocess.TimeoutExpired:
            return {"status": "error", "reason": f"ncu did not finish in {self.timeout:.0f} s"}
        kernels = parse_csv(proc.stdout)
        if proc.returncode != 0 or not kernels:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            return {"status": "error", "reason": f"ncu exit {proc.returncode}: " + " | ".join(tail)[:500]}
        return {"status": "ok", "kernels": kernels}
