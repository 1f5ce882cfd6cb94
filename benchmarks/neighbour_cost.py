#!/usr/bin/env python3
"""Whether another process on the device slows a timed forward: the clean command's question, with nothing of kbv's.

    python benchmarks/neighbour_cost.py --problems .kb/kernelbench --pairs level1/12,level1/14 --device cuda --out n/

kbv's clean command (``kbv.eval.performance``, ``reference_slowed``) times the reference once more after the
candidate's processes are killed, and compares it with the reference's commands beside them, where the candidate's
timing worker sat idle and stopped (``kbv.sandbox.freeze``). On an H100 two honest pairs, each the reference timed
against itself, read 1.23-1.47 times slower beside the candidate's process than clean, confirmed by a fresh pair
(level1/12 and level1/14, docs/results/h100-2026-12-07). This benchmark separates the process's presence from
everything else the harness does: each problem's reference is timed here by ``kbv.worker.timer.time_calls`` (the
worker's own timer: cache flush, events, device-wide synchronize; each trial's floating-point inputs redrawn in place
first, on the device, as ``recording_cost.py``'s plain mode does; the verified baseline's flags) in ``--rounds`` rounds, each round under three conditions:
``alone`` (no other process of ours), ``idle`` (a neighbour process that started CUDA, built the same model and ran a
few forwards, now waiting on its stdin) and ``stopped`` (that neighbour sent SIGSTOP, as kbv freezes an idle worker).
Even rounds go idle, stopped, alone (the neighbour killed and waited for, as the candidate's processes are before the
clean command); odd rounds alone first, then idle and stopped. With ``--fresh N``, the same model is then timed alone
in N fresh processes one after another (``fresh``: each builds the model from the same seeds, runs one command to warm
up, then times one), which asks the other question: whether a whole process of the reference reads slower than
another, with no neighbour at all. Per problem: each condition's median of the rounds' medians and their ratios to
``alone`` (the clean rule's ratio would read ``stopped`` over ``alone``), and the fresh processes' medians, their
spread (slowest over fastest) and their ratios to ``alone``. Results: ``<out>/neighbour_cost.json``. Figures are what
this run measured.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

import recording_cost  # noqa: E402
from recording_cost import load, problem_file, to, write_summary  # noqa: E402

CONDITIONS = ("alone", "idle", "stopped")

# The neighbour: the same problem's model on the same device, a few forwards, then idle until stdin closes.
NEIGHBOUR = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("neighbour_problem", sys.argv[1])
problem = importlib.util.module_from_spec(spec); spec.loader.exec_module(problem)
device = sys.argv[2]
model = problem.Model(*problem.get_init_inputs()).to(device).eval()
inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
with torch.no_grad():
    for _ in range(5):
        model(*inputs)
if device.startswith("cuda"):
    torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.read()
"""


class Neighbour:
    """Another process with the problem's model on ``device``, started, idle, stopped and killed on request."""

    def __init__(self, path: Path, device: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(path), device], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"the neighbour process failed to start (exit {self.proc.wait()})")

    def stop(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def kill(self) -> None:
        self.proc.kill()  # a stopped process is killed too
        self.proc.wait()


def timed(model: torch.nn.Module, inputs: list[Any], device: str, trials: int) -> float:
    """One timing command of ``model``: its median per call in ms (``recording_cost.timed``'s plain mode)."""
    return float(recording_cost.timed(model, inputs, device, trials, "plain")["median_ms"])


def fresh_process(path: Path, device: str, trials: int) -> float:
    """The problem's model timed alone in a fresh process (this script's ``--child``): its median per call in ms."""
    proc = subprocess.run([sys.executable, __file__, "--child", str(path), "--pairs", "-", "--device", device, "--trials",
                           str(trials), "--out", os.devnull], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"a fresh process failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def build(path: Path, device: str) -> tuple[torch.nn.Module, list[Any]]:
    """The problem's model and inputs on ``device``, from fixed seeds (the same in every process)."""
    problem = load(path, "neighbour_cost_" + re.sub(r"\W", "_", path.stem))
    torch.manual_seed(0)
    model = problem.Model(*problem.get_init_inputs()).to(device).eval()
    torch.manual_seed(1)
    return model, [to(x, device) for x in problem.get_inputs()]


def one_round(model: torch.nn.Module, inputs: list[Any], path: Path, device: str, trials: int,
              alone_first: bool) -> dict[str, float]:
    """The three conditions' medians in one round (``alone_first``: before the neighbour starts, else after it is
    killed)."""
    got: dict[str, float] = {}
    if alone_first:
        got["alone"] = timed(model, inputs, device, trials)
    neighbour = Neighbour(path, device)
    try:
        got["idle"] = timed(model, inputs, device, trials)
        neighbour.stop()
        got["stopped"] = timed(model, inputs, device, trials)
    finally:
        neighbour.kill()
    if not alone_first:
        got["alone"] = timed(model, inputs, device, trials)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=Path, default=ROOT / ".kb" / "kernelbench")
    ap.add_argument("--pairs", required=True, help="comma-separated level<N>/<id>")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--trials", type=int, default=100, help="timed trials per command (at most)")
    ap.add_argument("--fresh", type=int, default=0, help="then time it alone in this many fresh processes")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # a fresh process: time this problem file once
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # the verified baseline's flags
    if args.child:
        model, inputs = build(args.child, args.device)
        timed(model, inputs, args.device, args.trials)  # warm-up: a first command of a process pays its set-up
        print(timed(model, inputs, args.device, args.trials), flush=True)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for key in [k.strip() for k in args.pairs.split(",") if k.strip()]:
        path = problem_file(args.problems, key)
        model, inputs = build(path, args.device)
        rounds = [one_round(model, inputs, path, args.device, args.trials, alone_first=i % 2 == 1)
                  for i in range(args.rounds)]
        medians = {c: statistics.median(r[c] for r in rounds) for c in CONDITIONS}
        row: dict[str, Any] = {"pair": key, "problem": path.name, "rounds_ms": rounds, "median_ms": medians,
                               "over_alone": {c: medians[c] / medians["alone"] for c in ("idle", "stopped")}}
        del model, inputs
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
        if args.fresh:
            fresh = [fresh_process(path, args.device, args.trials) for _ in range(args.fresh)]
            row["fresh_ms"] = fresh
            row["fresh_spread"] = max(fresh) / min(fresh)
            row["fresh_over_alone"] = [f / medians["alone"] for f in fresh]
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("pair", "median_ms", "over_alone", "fresh_spread") if k in row}),
              flush=True)
    summary = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
               "torch": torch.__version__, "rounds": args.rounds, "trials": args.trials, "pairs": len(rows),
               "stopped_over_alone_max": max((r["over_alone"]["stopped"] for r in rows), default=None),
               "fresh_spread_max": max((r["fresh_spread"] for r in rows if "fresh_spread" in r), default=None),
               "rows": rows}
    write_summary(args.out / "neighbour_cost.json", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
