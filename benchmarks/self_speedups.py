#!/usr/bin/env python3
"""How far from 1 does the reference against itself read? Self-speedups and what moves them, from records.

    python benchmarks/self_speedups.py pinned=r/a.jsonl.gz free=r/b.jsonl --problems .kb/kernelbench --out s.json

Each ``LABEL=FILE`` is a run's records (``.jsonl`` or ``.jsonl.gz``: the ``vs_kernelbench`` or ``pair_cost``
output). A record is the reference against itself where its candidate's hash is that of the problem's own source
as a candidate (``kbv.problems.candidates.reference_candidate_text``, the problem read from ``--problems``);
custom kernels are left out. Per run and baseline: how many, the range, the share within ±3 % and ±5 %, the
geometric mean deviation from 1, and the intervals' width (high over low). From ``timing_ms.command_clocks``: a
process's slowest command's median over its fastest, verified baseline (two speeds within one process), and the
host's latency after the synchronize (``sync_tail_ms``). Where reference times were cached: each pair's drift (the
re-measure over the cache, less 1) beside its self-speedup, how many read more than ``REFERENCE_CACHE_SLOW_MAX``
below the cache, and how many of those set the cache aside (``timing_ms.reference_cache_too_slow``). Every figure
is what the records hold; nothing is timed here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kbv.problems.candidates import reference_candidate_text  # noqa: E402
from kbv.protocol import REFERENCE_CACHE_SLOW_MAX  # noqa: E402
from kbv.records import read_records  # noqa: E402

BASELINES = ("standard", "verified")


def self_hashes(problems: Path) -> dict[str, str]:
    """Each problem's name (``level1/13_...``) and the hash of its source as its own candidate."""
    return {str(path.relative_to(problems).with_suffix("")):
            hashlib.sha256(reference_candidate_text(path.read_text()).encode()).hexdigest()
            for path in sorted(problems.glob("level*/*.py"))}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One run's figures from its reference-against-itself records."""
    out: dict[str, Any] = {"pairs": len(rows)}
    for baseline in BASELINES:
        found = [(r["speedup"] or {}).get(baseline) or {} for r in rows]
        values = [s["value"] for s in found if isinstance(s.get("value"), (int, float)) and s["value"] > 0]
        if not values:
            continue
        widths = [s["ci_high"] / s["ci_low"] for s in found
                  if isinstance(s.get("ci_low"), (int, float)) and s["ci_low"] > 0 and s.get("ci_high")]
        out[baseline] = {
            "n": len(values), "min": round(min(values), 4), "max": round(max(values), 4),
            "within_3pct": sum(abs(math.log(v)) <= math.log(1.03) for v in values),
            "within_5pct": sum(abs(math.log(v)) <= math.log(1.05) for v in values),
            "geomean_deviation": round(math.exp(statistics.fmean(abs(math.log(v)) for v in values)) - 1.0, 4),
            "ci_width_median": round(statistics.median(widths), 4) if widths else None,
            "ci_width_max": round(max(widths), 4) if widths else None,
        }
    spreads, tails = [], []
    for record in rows:
        per_process: dict[tuple[Any, Any], list[float]] = {}
        for clock in (record.get("timing_ms") or {}).get("command_clocks") or []:
            median = (clock.get("median_ms") or {}).get("verified")
            if isinstance(median, (int, float)) and median > 0:
                per_process.setdefault((clock.get("pair"), clock.get("role")), []).append(median)
            tails.extend(t for t in (clock.get("sync_tail_ms") or {}).values() if isinstance(t, (int, float)))
        spreads.extend(max(m) / min(m) for m in per_process.values() if len(m) > 1)
    if spreads:
        out["process_spread"] = {"median": round(statistics.median(spreads), 4), "max": round(max(spreads), 4)}
    if tails:
        out["sync_tail_ms"] = {"median": round(statistics.median(tails), 4), "p90": round(_quantile(tails, 0.9), 4),
                               "max": round(max(tails), 4)}
    cached = []
    for record in rows:
        timing = record.get("timing_ms") or {}
        reference = timing.get("reference_verified") or {}
        too_slow = (timing.get("reference_cache_too_slow") or {}).get("verified")
        dropped = reference.get("cache_dropped") or {}  # records before REFERENCE_CACHE_SLOW_MAX: the re-measure alone
        drift = too_slow["drift"] if too_slow else dropped.get("drift", reference.get("drift"))
        value = ((record.get("speedup") or {}).get("verified") or {}).get("value")
        if isinstance(drift, (int, float)) and isinstance(value, (int, float)):
            cached.append({"problem": record["problem"], "drift": round(drift, 4), "speedup": round(value, 4),
                           "set_aside": bool(too_slow)})
    if cached:
        below = [c for c in cached if c["drift"] < -REFERENCE_CACHE_SLOW_MAX]
        out["cached"] = {"pairs": len(cached), "below_cache": len(below),
                         "set_aside": sum(c["set_aside"] for c in below),
                         "kept_below_cache": sorted((c for c in below if not c["set_aside"]),
                                                    key=lambda c: c["drift"])}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="LABEL=FILE: a run's records (.jsonl or .jsonl.gz)")
    ap.add_argument("--problems", default=str(ROOT / ".kb" / "kernelbench"),
                    help="the problems' folder (level1/..., level2/...), to tell the reference against itself")
    ap.add_argument("--out", default=None, help="write the summary as JSON here too")
    args = ap.parse_args(argv)
    own = self_hashes(Path(args.problems))
    if not own:
        ap.error(f"no problems under {args.problems}")
    summary: dict[str, Any] = {}
    for run in args.runs:
        label, sep, file = run.partition("=")
        if not sep:
            ap.error(f"expected LABEL=FILE, got {run!r}")
        rows = [r for r in read_records(file) if own.get(r.get("problem", "")) == r.get("candidate_sha256")]
        summary[label] = summarise(rows)
    text = json.dumps(summary, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return summary


if __name__ == "__main__":
    main()
