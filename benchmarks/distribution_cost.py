#!/usr/bin/env python3
"""Whether a kernel's time depends on the timed inputs' distribution, and what that does to a command's median.

    python benchmarks/distribution_cost.py --problems .kb/kernelbench --pairs level1/14,level1/1 --device cuda --out d/

Timed inputs come from every distribution (issue 12, rule 3): each block of consecutive timed calls holds D1 five
times and D2-D6 once each (``TIMED_DISTRIBUTION_WEIGHTS``), so half a command's calls are D1. Where a kernel runs
at one speed on D1 and at another on the rest (a GPU's matmul draws more power on inputs of both signs and can run
slower: a time that depends on the data, not the code), a command's median falls between two clusters of equal
weight and can land on either: on an H100 the reference of level1/14 read 0.40 to 0.53 ms from one command to the
next in one process, and the clean rule flagged two honest pairs (docs/results/h100-2026-12-07). This benchmark asks
it with nothing of kbv's but its timer and its input mapping: each problem's reference is timed by
``kbv.worker.timer.time_calls`` (the worker's own timer: cache flush, events, device-wide synchronize; the verified
baseline's flags), first on each distribution alone (``per_distribution``: every trial's inputs that distribution's,
redrawn in place from its own seed, ``kbv.worker.inputs.make_inputs``), then in ``--commands`` commands of the mix
as kbv times them (``mixed``: trial *i*'s distribution ``kbv.protocol.timed_call(key, i, ...)``, a key per command).
Per problem: each distribution's median and its ratio to D1's, the mixed commands' medians and their spread
(slowest over fastest), and what each mixed command's median would be under ``stratified`` (the weighted geometric
mean of its calls' per-distribution medians). Results: ``<out>/distribution_cost.json``. Figures are what this run
measured.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from kbv.protocol import (DISTRIBUTIONS, FIRST_TIMED_CALL, TIMED_DISTRIBUTION_WEIGHTS, TIMING_RULES,  # noqa: E402
                          timed_call)
from kbv.worker import timer  # noqa: E402
from kbv.worker.inputs import make_inputs  # noqa: E402
from recording_cost import load, problem_file  # noqa: E402

NAMES = tuple(d.name for d in DISTRIBUTIONS)
BY_NAME = {d.name: d for d in DISTRIBUTIONS}


def stratified(times: list[float], names: list[str]) -> float:
    """The weighted geometric mean of the per-distribution medians of ``times`` (call *i* drawn from ``names[i]``),
    weighted by ``TIMED_DISTRIBUTION_WEIGHTS``."""
    groups: dict[str, list[float]] = {}
    for t, name in zip(times, names):
        groups.setdefault(name, []).append(t)
    total = sum(TIMED_DISTRIBUTION_WEIGHTS[n] for n in groups)
    return math.exp(sum(TIMED_DISTRIBUTION_WEIGHTS[n] * math.log(statistics.median(ts))
                        for n, ts in groups.items()) / total)


def command(model: torch.nn.Module, problem: Any, device: str, trials: int, name_of: Callable[[int], str],
            seed: int) -> tuple[list[float], list[str]]:
    """One timing command: call *i*'s inputs drawn from distribution ``name_of(i)`` (its own seed) just before it,
    outside the timed region, as a timing worker loads them. Its timed trials' times per call in ms and their
    distributions."""
    current: list[Any] = []
    names: list[str] = []

    def call() -> Any:
        with torch.no_grad():
            return model(*current)

    def prepare(index: int) -> None:
        current[:] = make_inputs(problem, seed + index, device, "fp32", BY_NAME[name_of(index)])
        if index >= FIRST_TIMED_CALL:
            names.append(name_of(index))

    rule = TIMING_RULES["cuda" if device.startswith("cuda") else "cpu"]
    result = timer.time_calls(call, device, rule, max_trials=trials, prepare=prepare)
    return [float(t) for t in result["times_ms"]], names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=Path, default=ROOT / ".kb" / "kernelbench")
    ap.add_argument("--pairs", required=True, help="comma-separated level<N>/<id>")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trials", type=int, default=60, help="timed trials per command (at most)")
    ap.add_argument("--commands", type=int, default=6, help="mixed commands per problem")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # the verified baseline's flags
    args.out.mkdir(parents=True, exist_ok=True)
    weighted = tuple(n for n in NAMES if TIMED_DISTRIBUTION_WEIGHTS.get(n))
    rows = []
    for key in [k.strip() for k in args.pairs.split(",") if k.strip()]:
        path = problem_file(args.problems, key)
        problem = load(path, "distribution_cost_" + re.sub(r"\W", "_", key))
        torch.manual_seed(0)
        model = problem.Model(*problem.get_init_inputs()).to(args.device).eval()
        per = {name: statistics.median(command(model, problem, args.device, args.trials,
                                               lambda _, n=name: n, 1000 * i)[0])  # type: ignore[misc]
               for i, name in enumerate(weighted)}
        mixed = []
        for c in range(args.commands):
            times, names = command(model, problem, args.device, args.trials,
                                   lambda i, k=7919 + c: timed_call(k, i, weighted)[1],  # type: ignore[misc]
                                   100_000 * (c + 1))
            mixed.append({"median_ms": statistics.median(times), "stratified_ms": stratified(times, names),
                          "calls": len(times), "d1_share": names.count("D1") / len(names)})
        row = {"pair": key, "problem": path.name, "per_distribution_ms": per,
               "over_d1": {n: per[n] / per["D1"] for n in weighted},
               "mixed": mixed,
               "mixed_spread": max(m["median_ms"] for m in mixed) / min(m["median_ms"] for m in mixed),
               "stratified_spread": (max(m["stratified_ms"] for m in mixed)
                                     / min(m["stratified_ms"] for m in mixed))}
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("pair", "over_d1", "mixed_spread", "stratified_spread")}), flush=True)
        del model
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    summary = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
               "torch": torch.__version__, "trials": args.trials, "commands": args.commands, "pairs": len(rows),
               "weights": dict(TIMED_DISTRIBUTION_WEIGHTS), "rows": rows}
    (args.out / "distribution_cost.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
