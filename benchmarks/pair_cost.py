#!/usr/bin/env python3
"""What one verified evaluation costs: wall time per pair, its breakdown, and evaluations per hour.

    python benchmarks/pair_cost.py --problems builtin --only level1/5_ReLU --reference --device cpu --out bench/
    python benchmarks/pair_cost.py --problems .kb/kernelbench --levels 1,2 --reference --preset reward --out bench/

Each selected problem is paired with its own reference as the candidate (``--reference``) or with the candidates in
``--candidates DIR`` (KernelBench's generation layout), evaluated with every check by ``kbv.eval.runner.run_pairs``
(builds first, not counted), and for each pair the record's ``wall_seconds`` (correctness plus performance: the
build excluded; and the per-stage breakdown) is printed. ``--baseline-import`` also times a bare ``python -c "import torch"`` (the
fixed-cost goal on the CPU is a ratio to it). Results: ``<out>/pair_cost.jsonl`` (records) and
``<out>/pair_cost.json`` (the summary). Figures are what this run measured; nothing is extrapolated.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kbv.eval import EvalOptions  # noqa: E402
from kbv.eval.runner import Progress, run_pairs  # noqa: E402
from kbv.problems import discover, resolve_suite  # noqa: E402
from kbv.problems.candidates import Candidate, Pair, pair_candidates, write_reference_candidate  # noqa: E402
from kbv.records import read_records  # noqa: E402
from kbv.report.metrics import gpu_use  # noqa: E402


LARGE_OUTPUT_BYTES = 256 * 2**20  # issue 13's large-output goal: outputs of at least this much
START_PARTS = ("process_start", "cuda_init", "setup", "process_exit")  # a correctness stage's per-pair costs


def large_output(record: dict) -> dict | None:
    """Issue 13's large-output figure for a record whose one forward's outputs reach ``LARGE_OUTPUT_BYTES``: its
    correctness stage's seconds, all trials and probes, less its forward passes and less the time it waited for
    another pair to leave the GPU (``--gpu-share``: not this pair's cost), per GiB of one forward's outputs
    (``s_per_gib``); ``s_per_gib_less_start`` also takes off the stage's per-pair costs that no output size changes
    (its processes' start and exit, CUDA's initialisation, the workers' set-up). The forward passes are each role's
    own clock around its correctness forwards (``correctness.forward_ms``): where the trials ran one at a time
    (``pipelined_trials`` false, as large outputs' do) the roles' forwards ran one after the other and both sums
    are taken off; where they were pipelined they may overlap, and only the larger is, so the figure leans high
    (``forwards_taken`` says which). None for smaller outputs or a record without the figures."""
    correctness = record.get("correctness") or {}
    out_bytes, forwards = correctness.get("output_bytes"), correctness.get("forward_ms") or {}
    wall = record.get("wall_seconds") or {}
    seconds = wall.get("correctness")
    if not isinstance(out_bytes, int) or out_bytes < LARGE_OUTPUT_BYTES or not isinstance(seconds, (int, float)):
        return None
    sums = [float(f.get("ms", 0.0)) for f in forwards.values() if isinstance(f, dict)]
    serial = correctness.get("pipelined_trials") is False
    forward_s = (sum(sums) if serial else max(sums, default=0.0)) / 1e3
    waited = float(wall.get("correctness/waiting_for_gpu") or 0.0)
    start = sum(float(wall.get(f"correctness/{part}") or 0.0) for part in START_PARTS)
    gib = out_bytes / 2**30
    own = max(0.0, seconds - waited - forward_s)
    split = {role: {part: round(ms / 1e3 / gib, 4) for part, ms in (f.get("split") or {}).items()}
             for role, f in forwards.items() if isinstance(f, dict) and f.get("split")}
    return {"output_gib": round(gib, 3), "correctness_s": round(seconds, 3), "waited_s": round(waited, 3),
            "forwards_s": round(forward_s, 3), "forwards_taken": "both" if serial else "larger",
            "start_s": round(start, 3), "s_per_gib": round(own / gib, 3),
            "s_per_gib_less_start": round(max(0.0, own - start) / gib, 3),
            "forward_split_s_per_gib": split}  # each role's forward commands besides the call (forward_ms.split)


def split_medians(large: list[dict]) -> dict[str, dict[str, float]] | None:
    """Per role and part, the median over large-output pairs of their correctness forwards' commands besides the
    call, in seconds per GiB (``forward_split_s_per_gib``): which part of the trials grows with the output."""
    parts: dict[tuple[str, str], list[float]] = {}
    for item in large:
        for role, split in (item.get("forward_split_s_per_gib") or {}).items():
            for part, value in split.items():
                parts.setdefault((role, part), []).append(value)
    medians: dict[str, dict[str, float]] = {}
    for (role, part), values in sorted(parts.items()):
        medians.setdefault(role, {})[part] = round(statistics.median(values), 4)
    return medians or None


def reference_cache(records: list[dict]) -> dict | None:
    """How the cached reference times fared (``--preset reward``, ``--reuse-reference-timing``): the records that
    read one (``reference_timing_cached``), the ones whose re-measure set it aside as too slow
    (``timing_ms.reference_cache_too_slow``, ``REFERENCE_CACHE_SLOW_MAX``: the reference then timed in full) or as too
    fast (``reference_cache_set_aside``, with a second pair), and those re-measured twice
    (``reference_remeasures``). None where no record met a cache."""
    timings = [r.get("timing_ms") or {} for r in records]
    counts = {"cached": sum("reference_timing_cached" in (r.get("flags") or []) for r in records),
              "set_aside_too_slow": sum(bool(t.get("reference_cache_too_slow")) for t in timings),
              "set_aside_too_fast": sum(bool(t.get("reference_cache_set_aside")) for t in timings),
              "remeasured_twice": sum(bool(t.get("reference_remeasures")) for t in timings)}
    return counts if any(counts.values()) else None


def second_readings(records: list[dict]) -> dict | None:
    """How often the rules that read the reference beside the candidate read it again: records whose pooled
    clean-command finding capped the reference at ``REFERENCE_CLEAN_MAX`` times the clean commands'
    (``reference_clean`` ``substituted``, ``REFERENCE_CLEAN_REJECT_ABOVE``), whose clean finding was excused (the
    candidate as slow in that pair, ``excused``), whose clean finding a fresh pair decided
    (``reference_clean.confirmation``), and whose untimed-work finding was
    confirmed beside a cached reference set aside and timed in full (``untimed_confirmation_pair.reference_in_full``).
    None where no record did any."""
    timings = [r.get("timing_ms") or {} for r in records]
    cleans = [t.get("reference_clean") or {} for t in timings]
    counts = {"clean_substituted": sum(any(isinstance(v, dict) and v.get("substituted") for p in c.get("pairs") or []
                                           for v in p.values()) for c in cleans),
              "clean_excused": sum(any(isinstance(v, dict) and v.get("excused") for p in c.get("pairs") or []
                                       for v in p.values()) for c in cleans),
              "clean_fresh_pair": sum(bool(c.get("confirmation")) for c in cleans),
              "untimed_reference_in_full": sum(bool((t.get("untimed_confirmation_pair") or {}).get("reference_in_full"))
                                               for t in timings)}
    return counts if any(counts.values()) else None


def digest_excess(records: list[dict]) -> dict | None:
    """How much longer the candidate's timing worker spent digesting its kept outputs than the reference's, per pair
    (``timing_ms.worker_split_ms`` ``digest``, ms, all of a pair's timing commands): both digest the same number of
    outputs of the same sizes, so a gap is a one-off cost of one role's workers (in h100-2026-12-07-h a median 38 ms
    over 50 pairs of one process pair, before ``kbv.worker.commit.warm``). None where no record has the split."""
    gaps = []
    for r in records:
        split = (r.get("timing_ms") or {}).get("worker_split_ms") or {}
        ref, cand = (split.get("reference") or {}).get("digest"), (split.get("candidate") or {}).get("digest")
        if isinstance(ref, (int, float)) and isinstance(cand, (int, float)):
            gaps.append(cand - ref)
    if not gaps:
        return None
    return {"pairs": len(gaps), "median_ms": round(statistics.median(gaps), 1), "min_ms": round(min(gaps), 1),
            "max_ms": round(max(gaps), 1)}


def sharing(records: list[dict]) -> dict:
    """How the batch used the GPU beside other pairs: the seconds summed over its records of each part that sharing
    changes (the waits, the correctness workers' CUDA starts and their start ahead, discarded runs), the seconds the
    timing stages held the GPU alone (``timing_ms.device_alone_s``: no other pair overlaps them), how many
    records took correctness workers started ahead (``kbv.eval.lookahead``), and how the gate's expected memory
    compared with what each correctness stage held (``memory_bytes.correctness_stage``: the held figure above the
    expected one is an underestimate, the gate's risk of a run again)."""
    parts = ("correctness/waiting_for_gpu", "performance/waiting_for_gpu", "correctness/cuda_init",
             "correctness/start_ahead", "correctness/rerun")
    totals = {part: round(sum(float((r.get("wall_seconds") or {}).get(part) or 0.0) for r in records), 2)
              for part in parts}
    held = [((r.get("memory_bytes") or {}).get("correctness_stage") or {}) for r in records]
    compared = [h for h in held if isinstance(h.get("together_max"), int) and h.get("expected")]
    alone = [float((r.get("timing_ms") or {}).get("device_alone_s") or 0.0) for r in records]
    return {"seconds": totals,
            "device_alone_s": round(sum(alone), 2) if any(alone) else None,  # timing stages' GPU alone: no overlap
            "started_ahead": sum(1 for r in records if (r.get("env") or {}).get("correctness_started_ahead")),
            "reruns": sum(1 for r in records if (r.get("env") or {}).get("correctness_rerun")),
            "memory_measured": len(compared),
            "memory_underestimated": sum(1 for h in compared if h["together_max"] > h["expected"]),
            "memory_held_over_expected_max": round(max((h["together_max"] / h["expected"] for h in compared),
                                                       default=0.0), 3) or None}


def select(problems: str, only: str | None, levels: str | None, ids: str | None = None) -> list:
    """The problems of a suite, narrowed by level, by key (``level1/5_ReLU``) and by id ranges per level
    (``1:1-30,2:1-20``: level 1's problems 1 to 30 and level 2's 1 to 20)."""
    found = discover(resolve_suite(problems))
    if ids:
        ranges = [(int(lvl), *(int(x) for x in span.split("-"))) for lvl, span in
                  (part.split(":") for part in ids.split(","))]
        found = [p for p in found if any(p.level == lvl and lo <= p.problem_id <= hi for lvl, lo, hi in ranges)]
    if levels:
        wanted = {int(x) for x in levels.split(",")}
        found = [p for p in found if p.level in wanted]
    if only:
        keys = [k.strip() for k in only.split(",") if k.strip()]
        found = [p for p in found if p.key in keys or p.path.stem in keys]
    return found


class Lines(Progress):
    """One line per built candidate and per record, as they happen (a cut-off run still shows what it did)."""

    builds_done = 0.0  # time.monotonic() when the last build finished (evaluation starts after it)

    def built(self, pair, result) -> None:
        self.builds_done = time.monotonic()
        print(f"  built {pair.problem.key}: {'ok' if result.ok else result.verdict} ({result.seconds:.1f} s)",
              flush=True)

    def evaluated(self, record) -> None:
        wall = record.wall_seconds.get("total", 0.0)
        print(f"  {record.problem}: {record.verdict} {sorted(record.flags)} {wall:.1f} s", flush=True)


def import_torch_seconds(repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", default="builtin", help="a suite name or folder")
    ap.add_argument("--only", help="comma-separated problem keys (level1/5_ReLU) or file stems")
    ap.add_argument("--levels", help="comma-separated levels")
    ap.add_argument("--ids", help="id ranges per level, e.g. 1:1-30,2:1-20")
    ap.add_argument("--limit", type=int, default=0, help="at most this many problems (0: all selected)")
    ap.add_argument("--reference", action="store_true", help="each problem's own Model as the candidate (with "
                    "--candidates: for the problems that have no candidate there)")
    ap.add_argument("--candidates", type=Path, help="a folder of candidates (generation layout)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--preset", default=None, help="a kbv.protocol.PRESETS name (reward)")
    ap.add_argument("--timing-pairs", type=int, default=None)
    ap.add_argument("--gpu-share", type=int, default=1, help="pairs in flight per GPU (kbv eval --gpu-share)")
    ap.add_argument("--profile", default="auto")
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--baseline-import", action="store_true", help="also time a bare `python -c 'import torch'`")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    problems = select(args.problems, args.only, args.levels, args.ids)
    if args.limit:
        problems = problems[:args.limit]
    if not problems:
        print("no problems selected", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    pairs: list[Pair] = []
    if args.candidates:
        pairs, _ = pair_candidates(problems, [args.candidates])
    if args.reference or not args.candidates:  # with --candidates too: the reference for the problems without one
        folder = Path(tempfile.mkdtemp(prefix="kbv-bench-ref-"))
        covered = {pair.problem.key for pair in pairs}
        pairs += [Pair(p, Candidate.from_path(write_reference_candidate(p, folder), sample=900))
                  for p in problems if p.key not in covered]
    options = EvalOptions(device=args.device, timeout=args.timeout, profile=args.profile,
                          timing_pairs=args.timing_pairs, preset=args.preset, gpu_share=args.gpu_share)
    records_path = args.out / "pair_cost.jsonl"
    t0 = time.monotonic()
    # this benchmark's own output file, written anew each run
    lines = Lines()
    run_pairs(pairs, options, records_path, build_workers=4, progress=lines, existing="overwrite")
    t_end = time.monotonic()
    batch = t_end - t0
    evaluating = t_end - max(t0, lines.builds_done)  # the batch after its builds: what an already-built batch costs
    records = list(read_records(records_path))
    rows = []
    for r in records:
        wall = r.get("wall_seconds") or {}
        # the evaluation without the build: its stages (a multi-shape record sums its shapes' stages)
        evaluation = float(wall.get("correctness", 0.0)) + float(wall.get("performance", 0.0))
        rows.append({"problem": r["problem"], "candidate": r["candidate"], "verdict": r["verdict"], "flags": r["flags"],
                     "handoff": (r.get("env") or {}).get("output_handoff"),
                     "seconds": round(evaluation, 3), "compile": wall.get("compile"),
                     "breakdown": {k: v for k, v in wall.items() if "/" in k},
                     "speedup": {b: (s or {}).get("value") for b, s in (r.get("speedup") or {}).items()},
                     "large_output": large_output(r)})
        print(f"{r['problem']:45s} {r['verdict']:10s} {evaluation:8.2f} s  "
              + " ".join(f"{b}={v:.3f}" for b, v in rows[-1]["speedup"].items() if v))
    seconds = [row["seconds"] for row in rows if row["seconds"] > 0]
    summary = {"device": options.device, "preset": args.preset, "gpu_share": args.gpu_share, "pairs": len(rows), "batch_seconds": round(batch, 2),
               "per_pair_median_s": round(statistics.median(seconds), 3) if seconds else None,
               "per_pair_geomean_s": round(math.exp(statistics.fmean(math.log(s) for s in seconds)), 3)
               if seconds else None,
               "evaluations_per_hour": round(3600 * len(seconds) / sum(seconds), 1) if seconds else None,
               # the same from the batch's own clock after the builds (zygote start, roofline counts, every gap
               # between pairs included): the figure the throughput goal is read from
               "batch_after_builds_s": round(evaluating, 2),
               "evaluations_per_hour_batch": round(3600 * len(rows) / evaluating, 1) if rows and evaluating > 0 else None,
               "correct": sum(1 for row in rows if row["verdict"] == "correct"), "rows": rows}
    if args.baseline_import:
        summary["import_torch_s"] = round(import_torch_seconds(), 3)
        if seconds:
            summary["ratio_to_import_torch"] = round(statistics.median(seconds) / summary["import_torch_s"], 2)
    parts: dict[str, list[float]] = {}
    for row in rows:
        for k, v in row["breakdown"].items():
            parts.setdefault(k, []).append(float(v))
    summary["breakdown_median_s"] = {k: round(statistics.median(v), 3) for k, v in sorted(parts.items())}
    for key in ("s_per_gib", "s_per_gib_less_start"):
        per_gib = [row["large_output"][key] for row in rows if row["large_output"]]
        summary[f"large_output_{key}"] = ({"pairs": len(per_gib), "max": max(per_gib),
                                           "median": round(statistics.median(per_gib), 3)} if per_gib else None)
    large = [row["large_output"] for row in rows if row["large_output"]]
    if len({item["output_gib"] for item in large}) > 1:  # what one more GiB costs: the pairs' own seconds on their size
        fit = statistics.linear_regression([item["output_gib"] for item in large],
                                           [item["s_per_gib"] * item["output_gib"] for item in large])
        summary["large_output_fit"] = {"pairs": len(large), "s_per_extra_gib": round(fit.slope, 3),
                                       "s_at_zero": round(fit.intercept, 3)}
    summary["large_output_forward_split_s_per_gib"] = split_medians(large)
    summary["sharing"] = sharing(records)
    summary["reference_cache"] = reference_cache(records)
    summary["second_readings"] = second_readings(records)
    summary["digest_excess"] = digest_excess(records)
    summary["gpu_timeline"] = gpu_use(records)  # what the shared GPU was doing (kbv report shows it too)
    (args.out / "pair_cost.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
