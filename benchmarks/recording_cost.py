#!/usr/bin/env python3
"""What recording every timed call's device kernels costs the timing, and whether it moves the speedup.

    python benchmarks/recording_cost.py --problems .kb/kernelbench --pairs level1/19,level2/76 --device cuda --out r/

Issue 12's answer to the GPU's profiled call (docs/security.md): on a GPU kernel names can only be read inside the
process that launches them (CUPTI), so the one profiled call is a call the candidate can recognise; kbv records the
kernels of every timed forward, in both roles, so that what a candidate does while recorded is what is timed. Its
cost must stay known: CUPTI's kernel records add work to
every launch, which could slow a many-kernel reference more than a fused candidate (or the other way round) and so
move the speedup. This benchmark measures it, with nothing of kbv's sandbox or parent: for each pair (a KernelBench
problem's reference and, where ``--candidates`` has one, its custom kernel, else the reference again), each role is
timed by ``kbv.worker.timer.time_calls`` (the worker's own timer: cache flush, events, device-wide synchronize) in
``--rounds`` alternating rounds, plain and recorded as kbv's timing commands are (``kbv.worker.kernel_record``:
a device-only session held for the command, each forward a window of it, a GPU trial's spin kernel and cache flush
left out; on the CPU, for a smoke test, CPU operators), and recorded with no spin first (``recorded_no_lead``:
``RECORD_LEAD_CYCLES`` at 0). As in a timing worker, each timed trial's inputs are redrawn on the device first
(``prepare``: queued draws that keep the GPU busy while an unrecorded forward is launched; without them h100-2026-12-06-g's
run of this benchmark read recording at 1.002 while a reward batch read it up to 1.40), under the verified
baseline's flags unless ``--baseline standard``. Per pair: each role's median per mode, the recorded-over-plain
ratios, the speedup per mode, their ratios (``distortion``: 1 means recording leaves the speedup alone), and the
kernels recorded per call. Results: ``<out>/recording_cost.json``. Figures are what this run measured.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from kbv.protocol import TIMING_RULES  # noqa: E402
from kbv.worker import timer  # noqa: E402
from kbv.worker.kernel_record import Recording  # noqa: E402


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def problem_file(problems: Path, key: str) -> Path:
    """``level1/19`` (or ``level1/19_ReLU``): that problem's file in a KernelBench-layout folder."""
    level, rest = key.split("/", 1)
    number = re.match(r"\d+", rest)
    if number is None:
        raise SystemExit(f"bad pair {key!r}: want level<N>/<id>")
    found = sorted((problems / level).glob(f"{number.group()}_*.py"))
    if not found:
        raise SystemExit(f"no problem {key} under {problems / level}")
    return found[0]


def to(value: Any, device: str) -> Any:
    return value.to(device) if isinstance(value, torch.Tensor) else value


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    """A benchmark's results: the whole summary to ``path`` as JSON, and all of it but its ``rows`` to stdout."""
    path.write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))


MODES = ("plain", "recorded", "recorded_no_lead")


def timed(model: torch.nn.Module, inputs: list[Any], device: str, trials: int, mode: str) -> dict[str, Any]:
    """One timing command of ``model`` on ``inputs`` in ``mode`` (``MODES``): the median per call, and where it records
    the device kernels (CPU operators on the CPU) recorded per call, by kbv's own mechanism
    (``kbv.worker.kernel_record``: the session held for the command, each forward in one of its windows, a GPU
    trial's spin and flush left out). Each trial's floating-point inputs are redrawn in place first, on the device."""
    def call() -> Any:
        with torch.no_grad():
            return model(*inputs)

    def prepare(index: int) -> None:
        for x in inputs:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                x.normal_()

    rule = TIMING_RULES["cuda" if device.startswith("cuda") else "cpu"]
    if mode == "plain":
        result = timer.time_calls(call, device, rule, max_trials=trials, prepare=prepare)
        return {"median_ms": statistics.median(result["times_ms"])}
    recording = Recording(device)
    recording.start()
    lead = timer.RECORD_LEAD_CYCLES
    timer.RECORD_LEAD_CYCLES = lead if mode == "recorded" else 0  # type: ignore[misc]
    try:
        result = timer.time_calls(call, device, rule, max_trials=trials, prepare=prepare, record=recording)
    finally:
        timer.RECORD_LEAD_CYCLES = lead  # type: ignore[misc]
    recorded = recording.stop()
    if recorded["status"] != "ok":
        raise SystemExit(f"the recording failed: {recorded}")
    calls = 3 + int(result["warmup"]) + len(result["times_ms"])  # the estimates, the warm-up, the trials
    records = sum(int(n) for n, _ in recorded["kernels"].values())
    return {"median_ms": statistics.median(result["times_ms"]), "records_per_call": records / calls}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=Path, default=ROOT / ".kb" / "kernelbench")
    ap.add_argument("--pairs", required=True, help="comma-separated level<N>/<id>")
    ap.add_argument("--candidates", type=Path, default=ROOT / "benchmarks" / "kernels" / "kernelbench",
                    help="KernelBench's generation layout: level_<L>_problem_<id>_sample_0_kernel.py")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds of plain and recorded per role")
    ap.add_argument("--trials", type=int, default=100, help="timed trials per command (at most)")
    ap.add_argument("--baseline", choices=("verified", "standard"), default="verified",
                    help="the baseline's flags: verified (TF32 on, as kbv's verified baseline) or standard (off)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.baseline == "verified"
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for key in [k.strip() for k in args.pairs.split(",") if k.strip()]:
        path = problem_file(args.problems, key)
        level, number = key.split("/")[0][len("level"):], re.match(r"\d+", key.split("/", 1)[1]).group()  # type: ignore[union-attr]
        problem = load(path, f"recording_cost_problem_{level}_{number}")
        kernel = args.candidates / f"level_{level}_problem_{number}_sample_0_kernel.py"
        torch.manual_seed(0)
        reference = problem.Model(*problem.get_init_inputs()).to(args.device).eval()
        if kernel.is_file():
            torch.manual_seed(0)
            candidate = load(kernel, f"recording_cost_kernel_{level}_{number}").ModelNew(
                *problem.get_init_inputs()).to(args.device).eval()
        else:
            candidate = reference
        torch.manual_seed(1)
        inputs = [to(x, args.device) for x in problem.get_inputs()]
        modes: dict[str, dict[str, list[float]]] = {r: {m: [] for m in MODES} for r in ("reference", "candidate")}
        per_call: dict[str, list[float]] = {"reference": [], "candidate": []}
        for round_index in range(args.rounds):
            order = MODES if round_index % 2 == 0 else MODES[::-1]
            for role, model in (("reference", reference), ("candidate", candidate)):
                for mode in order:
                    got = timed(model, inputs, args.device, args.trials, mode)
                    modes[role][mode].append(got["median_ms"])
                    if mode == "recorded":
                        per_call[role].append(got["records_per_call"])
        medians = {role: {mode: statistics.median(v) for mode, v in m.items()} for role, m in modes.items()}
        speedup = {mode: medians["reference"][mode] / medians["candidate"][mode] for mode in MODES}
        row = {"pair": key, "problem": path.name, "candidate": kernel.name if kernel.is_file() else "reference",
               "median_ms": medians, "rounds_ms": modes,
               "recorded_over_plain": {r: m["recorded"] / m["plain"] for r, m in medians.items()},
               "no_lead_over_plain": {r: m["recorded_no_lead"] / m["plain"] for r, m in medians.items()},
               "speedup": speedup, "distortion": speedup["recorded"] / speedup["plain"],
               "distortion_no_lead": speedup["recorded_no_lead"] / speedup["plain"],
               "records_per_call": {r: statistics.median(v) if v else None for r, v in per_call.items()}}
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("pair", "candidate", "recorded_over_plain", "no_lead_over_plain",
                                              "speedup", "distortion", "records_per_call")}), flush=True)
        del reference, candidate, inputs
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    summary = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
               "torch": torch.__version__, "baseline": args.baseline, "rounds": args.rounds, "trials": args.trials,
               "pairs": len(rows), "distortion_max_abs": max((abs(r["distortion"] - 1) for r in rows), default=None),
               "distortion_no_lead_max_abs": max((abs(r["distortion_no_lead"] - 1) for r in rows), default=None),
               **{f"{ratio}_median": {role: statistics.median(r[ratio][role] for r in rows)
                                      for role in ("reference", "candidate")} if rows else None
                  for ratio in ("recorded_over_plain", "no_lead_over_plain")},
               "rows": rows}
    write_summary(args.out / "recording_cost.json", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
