#!/usr/bin/env python3
"""kbv and KernelBench's own harness side by side, on the same pairs, in one run on one GPU.

    python benchmarks/vs_kernelbench.py --kernelbench .kb/peers/kernelbench --problems .kb/kernelbench \
        --pairs level1/19_ReLU,level2/14_Gemm_Divide_Sum_Scaling,... --out results/

For each named KernelBench problem, in the order given (the reference as its own candidate, or ``--candidates DIR``
in KernelBench's generation layout), KernelBench's harness runs as its ``scripts/eval_from_generations.py`` does per sample: in a
fresh spawned process, ``eval_kernel_against_ref(ref, kernel, num_correct_trials=5, num_perf_trials=100,
measure_performance=True, timing_method="cuda_event")`` plus ``timing.measure_ref_program_time(...)`` for the
reference; the wall time of that process is KernelBench's cost per pair. A candidate that builds an extension
(``load_inline``/``load``) is run twice and the second, warm-build run counts; a pure PyTorch or Triton candidate
is run once (one untimed KernelBench run of the first pair warms the imports and the page cache: list a small pair
first).
kbv evaluates the same pair right after, with every check (six distributions x trials, the probes, both baselines),
and its cost per pair is the record's evaluation time (correctness plus performance stages, the build excluded).
Pair by pair, so a run cut off by its time limit still holds complete rows. KernelBench's code is loaded
at run time from ``--kernelbench`` (never vendored); its modules that import ``dotenv``/``openai``/``litellm`` get
small stand-ins, and ``pydantic`` comes from wheels the GPU script carries.

Writes ``<out>/vs_kernelbench.jsonl`` (kbv's records), ``<out>/vs_kernelbench.json`` (per pair: both costs and
both verdicts; geometric means).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kbv.eval import EvalOptions  # noqa: E402
from kbv.eval.runner import count_problems, run_pairs  # noqa: E402
from kbv.problems import discover, resolve_suite  # noqa: E402
from kbv.problems.candidates import Candidate, Pair, pair_candidates, write_reference_candidate  # noqa: E402
from kbv.records import read_records  # noqa: E402

# What one KernelBench sample costs, run the way its eval script runs it (one process per sample).
KB_CHILD = r"""
import json, os, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import torch
from kernelbench import eval as kb_eval, timing as kb_timing
ref_src, kernel_src = open(sys.argv[3]).read(), open(sys.argv[4]).read()
t0 = time.monotonic()
result = kb_eval.eval_kernel_against_ref(ref_src, kernel_src, num_correct_trials=5, num_perf_trials=100,
                                         measure_performance=True, timing_method="cuda_event", verbose=False,
                                         build_dir=sys.argv[5], device=0, backend=sys.argv[6])
t1 = time.monotonic()
ref = kb_timing.measure_ref_program_time("ref", ref_src, num_trials=100, timing_method="cuda_event",
                                         device=torch.device("cuda:0"))
t2 = time.monotonic()
print("KB_JSON " + json.dumps({"compiled": bool(result.compiled), "correctness": bool(result.correctness),
                               "runtime_ms": result.runtime, "ref_ms": (ref or {}).get("mean"),
                               "eval_s": t1 - t0, "ref_s": t2 - t1}))
"""

STANDINS = {  # KernelBench's utils imports these at module level; timing needs none of them
    "dotenv.py": "def load_dotenv(*a, **k):\n    return False\n",
    "openai.py": "class OpenAI:\n    def __init__(self, *a, **k):\n        pass\n",
    "litellm.py": "def completion(*a, **k):\n    raise RuntimeError('not available')\n",
}


def kernelbench_backend(source: str) -> str:
    """The ``backend`` KernelBench's harness needs for a candidate: "triton" where it uses Triton (its kernels
    must come from a file on disk, which the default "cuda" backend's ``exec`` does not give: every Triton
    candidate was "not compiled" there), else "cuda"."""
    return "triton" if "import triton" in source or "from triton" in source else "cuda"


def kernelbench_cost(kb_src: Path, shims: Path, ref: Path, kernel: Path, build: Path) -> dict:
    backend = kernelbench_backend(kernel.read_text())
    cmd = [sys.executable, "-c", KB_CHILD, str(shims), str(kb_src), str(ref), str(kernel), str(build), backend]
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t0
    line = next((x for x in done.stdout.splitlines() if x.startswith("KB_JSON ")), None)
    data = json.loads(line[8:]) if line else {"error": (done.stderr or done.stdout)[-800:]}
    if line and not data.get("correctness"):  # why KernelBench's harness said no, in its own words
        data["log_tail"] = (done.stdout.replace(line, "") + done.stderr)[-800:]
    return data | {"wall_s": round(wall, 3), "returncode": done.returncode, "backend": backend}


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernelbench", type=Path, required=True, help="a copy of KernelBench's code (peers/kernelbench)")
    ap.add_argument("--problems", required=True, help="KernelBench's problems (a suite folder)")
    ap.add_argument("--pairs", required=True, help="comma-separated problem keys, e.g. level1/19_ReLU")
    ap.add_argument("--candidates", type=Path, help="candidates in KernelBench's generation layout (default: the "
                                                     "reference as its own candidate)")
    ap.add_argument("--preset", default=None)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=None,
                    help="start no further pair once the run has taken this long (the summary says so)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    keys = [k.strip() for k in args.pairs.split(",") if k.strip()]
    problems = [p for p in discover(resolve_suite(args.problems)) if p.key in keys]
    pairs: list[Pair] = []
    if args.candidates:  # the candidates there, and the reference for the problems that have none
        pairs, _ = pair_candidates(problems, [args.candidates])
    folder = Path(tempfile.mkdtemp(prefix="kbv-vskb-"))
    covered = {pair.problem.key for pair in pairs}
    pairs += [Pair(p, Candidate.from_path(write_reference_candidate(p, folder), sample=900))
              for p in problems if p.key not in covered]
    pairs.sort(key=lambda pair: keys.index(pair.problem.key))  # as listed: the first pair also warms the imports
    shims = Path(tempfile.mkdtemp(prefix="kbv-vskb-shims-"))
    for name, text in STANDINS.items():
        (shims / name).write_text(text)
    kb_src = args.kernelbench / "src"
    rows: dict[str, dict] = {}
    # pair by pair, KernelBench then kbv, so a cut-off run still holds complete rows (both sides of each pair)
    records_path = args.out / "vs_kernelbench.jsonl"
    records_path.unlink(missing_ok=True)  # this benchmark's own output, written anew
    options = EvalOptions(device="cuda", preset=args.preset)
    t_count = time.monotonic()  # every pair's roofline counts in one process up front, as a batch run does (one
    count_problems(pairs, options, "cuda")  # counting process per pair would start ~3 s of Python and torch each)
    precount_s = time.monotonic() - t_count
    t0 = time.monotonic()
    stopped = None
    for i, pair in enumerate(pairs):
        if args.budget_s is not None and time.monotonic() - t0 > args.budget_s:
            stopped = f"budget of {args.budget_s:.0f} s spent after {i} of {len(pairs)} pairs"
            print(stopped, flush=True)
            break
        build = Path(tempfile.mkdtemp(prefix="kbv-vskb-build-"))
        source = pair.candidate.path.read_text()
        if i == 0 or "load_inline" in source or "cpp_extension" in source:  # warm-up / the build, not counted
            kernelbench_cost(kb_src, shims, pair.problem.path, pair.candidate.path, build)
        kb = kernelbench_cost(kb_src, shims, pair.problem.path, pair.candidate.path, build)
        rows[pair.problem.key] = {"problem": pair.problem.key, "candidate": pair.candidate.path.name, "kernelbench": kb}
        print(f"KernelBench {pair.problem.key}: {kb.get('wall_s')} s correct={kb.get('correctness')}", flush=True)
        t_kbv = time.monotonic()
        run_pairs([pair], options, records_path, build_workers=8, existing="append")
        kbv_run_s = time.monotonic() - t_kbv  # the whole call: build, stages, the run's own start and end
        for r in read_records(records_path):
            if r["problem"] != pair.problem.key:
                continue
            wall = r.get("wall_seconds") or {}
            rows[r["problem"]]["kbv"] = {
                "verdict": r["verdict"], "standard_verdict": r["standard_verdict"], "flags": r["flags"],
                "wall_s": (wall.get("correctness") or 0.0) + (wall.get("performance") or 0.0),
                "run_pairs_s": round(kbv_run_s, 2),
                "breakdown": {k: v for k, v in wall.items() if "/" in k},
                "speedup": {b: (s or {}).get("value") for b, s in (r.get("speedup") or {}).items()}}
            print(f"kbv {r['problem']}: {rows[r['problem']]['kbv']['wall_s']:.2f} s {r['verdict']}", flush=True)
        (args.out / "vs_kernelbench.json").write_text(json.dumps({"partial": True, "rows": list(rows.values())},
                                                                 indent=1))
    batch = time.monotonic() - t0
    kb_costs = [row["kernelbench"]["wall_s"] for row in rows.values() if "kernelbench" in row and "kbv" in row]
    kbv_costs = [row["kbv"]["wall_s"] for row in rows.values() if "kernelbench" in row and "kbv" in row]
    summary = {"pairs": len(kbv_costs), "preset": args.preset, "run_s": round(batch, 1), "stopped": stopped,
               "precount_s": round(precount_s, 1),
               "geomean_s": {"kernelbench": geomean(kb_costs), "kbv": geomean(kbv_costs)},
               "rows": list(rows.values())}
    if summary["geomean_s"]["kernelbench"] and summary["geomean_s"]["kbv"]:
        summary["kbv_over_kernelbench"] = summary["geomean_s"]["kbv"] / summary["geomean_s"]["kernelbench"]
    (args.out / "vs_kernelbench.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("KBV_SANDBOX", "auto")
    sys.exit(main())
