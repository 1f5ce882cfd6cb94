#!/usr/bin/env python3
"""A model of a batch on one shared GPU, replayed from its records, to compare scheduling rules before spending
device time on them.

    python benchmarks/share_model.py docs/results/h200-2026-12-04-b/call1-reward-share3-second.jsonl.gz

Each record gives its pair's correctness stage's own seconds (the stage less its waits for the GPU) and its
performance stage's own seconds, split into what may run beside other pairs' correctness (the first timing pair's
set-up and memory measure: ``setup`` and half of ``probes``, an assumption: the records do not split the memory
measure from the burst) and what needs the GPU alone (the rest). The model replays the pairs in order under
``kbv.eval.gate``'s rules: at most ``in_flight`` pairs at once; a correctness stage enters beside others while no
timing place is held or awaited, while fewer than ``max_correctness`` run and while the expected memory of those
inside fits (each pair's ``memory_bytes.correctness_stage.together_max`` times ``GATE_MEASURED_MARGIN``, within
``GATE_MEMORY_FRACTION`` of the GPU's memory); one timing place at a time; its alone part waits for every
correctness stage to leave and holds back new ones. Correctness stages side by side slow each other: with ``k``
running, each advances at ``1 / (1 + alpha (k - 1))`` of its own pace, ``alpha`` fitted so that the records' own
rule (``--in-flight`` as measured, the whole performance stage alone) reproduces the batch's measured time after
builds. Prints the fitted ``alpha`` and the modelled batch seconds and evaluations per hour under each rule. A
model, not a measurement: a rule it favours still has to be measured on the GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kbv.protocol import GATE_MEASURED_MARGIN, GATE_MEMORY_FRACTION  # noqa: E402
from kbv.records import read_records  # noqa: E402

H200_BYTES = 150_109_880_320  # the H200's total memory as its records say (where they do not say theirs)


@dataclass
class Pair:
    correctness: float  # own seconds
    beside: float  # performance seconds that may run beside correctness (set-up, memory measure)
    alone: float  # performance seconds that need the GPU alone
    need: int  # expected device memory of its correctness stage


def pairs_of(records: list[dict], split: bool) -> list[Pair]:
    """The records' pairs; ``split``: the performance stage's set-up and half its probes may run beside others."""
    out = []
    for r in records:
        w = r["wall_seconds"]
        corr = w.get("correctness", 0.0) - w.get("correctness/waiting_for_gpu", 0.0)
        perf = w.get("performance", 0.0) - w.get("performance/waiting_for_gpu", 0.0)
        beside = (w.get("performance/setup", 0.0) + 0.5 * w.get("performance/probes", 0.0)) if split else 0.0
        held = ((r.get("memory_bytes") or {}).get("correctness_stage") or {}).get("together_max") or 0
        out.append(Pair(corr, beside, max(0.0, perf - beside), int(held * GATE_MEASURED_MARGIN)))
    return out


def simulate(pairs: list[Pair], in_flight: int, max_correctness: int, alpha: float,
             capacity: float = GATE_MEMORY_FRACTION * H200_BYTES, step: float = 0.005) -> float:
    """Seconds until every pair is done under the gate's rules (a time-stepped replay)."""
    t = 0.0
    waiting = list(range(len(pairs)))  # not yet started
    state: dict[int, list] = {}  # pair -> [phase, remaining seconds]; phase: "want_c", "c", "want_p", "beside",
    # "want_alone", "alone"
    place: int | None = None  # the pair holding the one timing place
    while waiting or state:
        while waiting and len(state) < in_flight:
            i = waiting.pop(0)
            state[i] = ["want_c", pairs[i].correctness]
        alone_busy = any(s[0] == "alone" for s in state.values())
        # a timing place held or awaited holds back new correctness stages (kbv.eval.gate)
        timing_soon = any(s[0] in ("want_p", "beside", "want_alone", "alone") for s in state.values())
        running_c = [i for i, s in state.items() if s[0] == "c"]
        used = sum(pairs[i].need for i in running_c) + (pairs[place].need if place is not None else 0)
        # admissions, in order of arrival (a held-back stage is not overtaken)
        for i in sorted(state):
            s = state[i]
            if s[0] != "want_c":
                continue
            fits = not running_c and place is None or used + pairs[i].need <= capacity
            if timing_soon or not fits or len(running_c) >= max_correctness:
                break
            s[0] = "c"
            running_c.append(i)
            used += pairs[i].need
        for i in sorted(state):
            s = state[i]
            if s[0] == "want_p" and place is None:
                place, s[0], s[1] = i, "beside", pairs[i].beside
            if s[0] == "want_alone" and not running_c and not alone_busy:
                s[0], s[1] = "alone", pairs[i].alone
                alone_busy = True
        k = len(running_c)
        rate = 1.0 / (1.0 + alpha * (k - 1)) if k else 1.0
        t += step
        for i in list(state):
            s = state[i]
            if s[0] in ("c", "beside", "alone"):
                s[1] -= step * (rate if s[0] == "c" else 1.0)
                if s[1] <= 0:
                    if s[0] == "c":
                        s[0] = "want_p"
                    elif s[0] == "beside":
                        s[0] = "want_alone"
                    else:
                        del state[i]
                        place = None
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", type=Path, help="a reward batch's pair_cost.jsonl, or .jsonl.gz (with its pair_cost.json beside or "
                    "--measured)")
    ap.add_argument("--measured", type=float, default=None, help="the batch's seconds after builds (default: from "
                    "pair_cost.json's batch_after_builds_s beside the records, or <records stem>.json)")
    ap.add_argument("--share", type=int, default=3, help="the --gpu-share the records were made with")
    args = ap.parse_args()
    records = list(read_records(args.records))  # gzipped where the name ends in .gz
    measured = args.measured
    stem = args.records.name.removesuffix(".gz").removesuffix(".jsonl")
    if measured is None:
        for summary in (args.records.with_name(stem + ".json"), args.records.parent / "pair_cost.json"):
            if summary.is_file():
                measured = json.loads(summary.read_text())["batch_after_builds_s"]
                break
    if measured is None:
        raise SystemExit("no measured batch time: give --measured")
    total = next((d.get("total_memory") for r in records if isinstance(d := (r.get("env") or {}).get("device"), dict)
                  and isinstance(d.get("total_memory"), int)), H200_BYTES)  # the GPU the records ran on
    capacity = GATE_MEMORY_FRACTION * total
    as_run = pairs_of(records, split=False)
    lo, hi = 0.0, 1.0  # the batch time grows with alpha: bisect for the measured one
    for _ in range(14):
        mid = (lo + hi) / 2
        if simulate(as_run, args.share, args.share, mid, capacity, step=0.01) < measured:
            lo = mid
        else:
            hi = mid
    alpha = (lo + hi) / 2
    split = pairs_of(records, split=True)
    rules = [("as run: whole performance stage alone", as_run, args.share, args.share),
             ("set-up and memory beside (this tree)", split, args.share, args.share),
             (f"... and one more pair in flight ({args.share + 1}, correctness at most {args.share})", split,
              args.share + 1, args.share),
             (f"... --gpu-share {args.share + 1}", split, args.share + 1, args.share + 1),
             ("set-up and memory beside, longest pairs first (kbv.eval.memory_needs.longest_first)",
              sorted(split, key=lambda p: -(p.correctness + p.beside + p.alone)), args.share, args.share)]
    rows = []
    for name, pairs, flight, most in rules:
        seconds = simulate(pairs, flight, most, alpha, capacity, step=0.01)
        rows.append({"rule": name, "in_flight": flight, "max_correctness": most, "batch_s": round(seconds, 1),
                     "per_hour": round(3600 * len(pairs) / seconds, 1)})
    print(json.dumps({"records": str(args.records), "pairs": len(records), "measured_s": measured,
                      "alpha": round(alpha, 3), "rules": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
