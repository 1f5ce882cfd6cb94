#!/usr/bin/env python3
"""Where does a self-speedup away from 1.0 come from? Times the same reference code in two worker processes.

For each problem: (a) two *reference* workers (neither imports a candidate) in alternating rounds, (b) a reference
worker and a candidate worker running the reference as the candidate, as the pipeline does. If (a) shows the same
spread as (b), the gap is process-to-process variance, not a bias of the candidate role. Writes variance.jsonl.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kbv import stats  # noqa: E402
from kbv.problems.candidates import write_reference_candidate  # noqa: E402
from kbv.problems import builtin_suite_dir, load_problem  # noqa: E402
from kbv.sandbox.launch import Worker, WorkerSpec  # noqa: E402
from kbv.eval.pacing import Pacer  # noqa: E402
from kbv.protocol import DISTRIBUTION_NAMES, FIRST_TIMED_CALL, TIMING_RULES  # noqa: E402

PROBLEMS = sys.argv[1].split(",") if len(sys.argv) > 1 else [
    "level1/13_Sum_Reduction", "level2/1_Gemm_Bias_ReLU", "level3/4_GRU", "level1/11_Conv2d"]
ROUNDS = 4


def spec(problem, role, cand, tmp: Path, tag: str) -> WorkerSpec:
    work = tmp / tag
    work.mkdir(parents=True, exist_ok=True)
    return WorkerSpec(role=role, device="cuda", problem_path=str(problem.path), profile=None, precision="fp32",
                      mode=problem.mode, work_dir=work, log_path=tmp / f"{tag}.log",
                      candidate_path=str(cand) if role == "candidate" else None,
                      env={"CUDA_VISIBLE_DEVICES": "0"})


def pair(problem, roles, cand, tmp, seed, init_seed) -> dict:
    deadline = time.monotonic() + 300
    state = None
    with Worker(spec(problem, "reference", cand, tmp, "src"), deadline) as src:
        state = src.call({"cmd": "setup", "init_seed": init_seed}, deadline)["state"]
    workers = [Worker(spec(problem, r, cand, tmp, f"{r}{i}"), deadline) for i, r in enumerate(roles)]
    times = [{"standard": [], "verified": []} for _ in roles]
    try:
        for w in workers:
            w.call({"cmd": "setup", "init_seed": init_seed, "state": state}, deadline)
        for rnd in range(ROUNDS):
            order = [0, 1] if rnd % 2 == 0 else [1, 0]
            for i in order:
                pacer = Pacer(secrets.randbits(63), DISTRIBUTION_NAMES, ("standard", "verified"), rnd,
                              FIRST_TIMED_CALL + TIMING_RULES["cuda"].max_trials + 1)  # inputs one call at a time
                reply = workers[i].call({"cmd": "time", "baselines": ["standard", "verified"], "share": 1 / ROUNDS,
                                         "round": rnd}, deadline, pacer=pacer)
                for b in ("standard", "verified"):
                    times[i][b].extend(reply["timing"][b]["times_ms"])
    finally:
        for w in workers:
            w.close()
    return {b: {"a": stats.summarize(times[0][b])["median"], "b": stats.summarize(times[1][b])["median"],
                "ratio": stats.speedup(times[0][b], times[1][b])} for b in ("standard", "verified")}


def main() -> None:
    out = Path(os.environ.get("OUT", "."))
    tmp = Path(tempfile.mkdtemp())
    with (out / "variance.jsonl").open("a") as f:
        for key in PROBLEMS:
            problem = load_problem(builtin_suite_dir() / f"{key}.py")
            cand = write_reference_candidate(problem, tmp / "cands")
            seed, init_seed = secrets.randbits(63), secrets.randbits(63)
            for label, roles in (("ref-vs-ref", ("reference", "reference")),
                                 ("ref-vs-cand", ("reference", "candidate")),
                                 ("ref-vs-ref-again", ("reference", "reference"))):
                t0 = time.monotonic()
                result = pair(problem, roles, cand, tmp, seed, init_seed)
                row = {"problem": key, "pairing": label, **result, "seconds": round(time.monotonic() - t0, 1)}
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(key, label, {b: round(result[b]["ratio"]["value"], 3) for b in result},
                      {b: (round(result[b]["a"], 4), round(result[b]["b"], 4)) for b in result}, flush=True)


if __name__ == "__main__":
    main()
