#!/usr/bin/env python3
"""One evaluation of the built-in level1/5_ReLU, the reference as its own candidate, one timing pair, with the clean
command on (on the CPU it is off by default and its ratio recorded only); prints the record's
timing_ms.reference_clean ratios. Environment variables pass through (KBV_SAMPLE_WORKERS, KBV_LEND_TIMED, ...).

    python docs/results/cpu-2026-12-06-b/clean_ratio.py
"""
import json
import tempfile
import time
from pathlib import Path

import kbv
from kbv.eval import EvalOptions, evaluate
from kbv.problems import load_problem
from kbv.problems.candidates import write_reference_candidate

problem = Path(kbv.__file__).parent / "suites" / "builtin" / "level1" / "5_ReLU.py"
candidate = write_reference_candidate(load_problem(problem), tempfile.mkdtemp())
t0 = time.time()
record = evaluate(problem, candidate, EvalOptions(device="cpu", clean_reference=True, timing_pairs=1))
clean = record.timing_ms.get("reference_clean") or {"pairs": []}
print(json.dumps({"seconds": round(time.time() - t0, 2), "verdict": record.verdict, "flags": record.flags,
                  "ratios": {b: p[b]["ratio"] for p in clean["pairs"] for b in p if b != "pair"},
                  "beside_ms": {b: p[b]["beside_ms"] for p in clean["pairs"] for b in p if b != "pair"},
                  "clean_ms": {b: p[b]["clean_ms"] for p in clean["pairs"] for b in p if b != "pair"}}))
