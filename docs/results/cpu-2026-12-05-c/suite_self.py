"""The built-in suite with the reference as its own candidate (every check, both baselines, the CPU's defaults):
verdict, flags, both speedups, and what each role's timing worker used of the CPU while idle (``timing_ms.idle_cpu``,
the rule behind ``idle_work``). Run from the repository root."""
import sys, tempfile
from pathlib import Path
sys.path.insert(0, "tests")
from conftest import SUITE
from kbv.problems import discover
from kbv.problems.candidates import Candidate, Pair, write_reference_candidate
from kbv.eval import EvalOptions
from kbv.eval.runner import run_pairs
from kbv.records import read_records
tmp = Path(tempfile.mkdtemp())
problems = discover(SUITE)
pairs = [Pair(p, Candidate.from_path(write_reference_candidate(p, tmp / "c"))) for p in problems]
out = tmp / "self.jsonl"
run_pairs(pairs, EvalOptions(device="cpu", timeout=120.0), out, build_workers=2)
for r in read_records(out):
    sp = r.get("speedup") or {}
    idle = (r.get("timing_ms") or {}).get("idle_cpu") or {}
    print(r["problem"], r["verdict"], r["flags"],
          [round(sp[b]["value"], 3) if isinstance(sp.get(b), dict) and sp[b].get("value") else None
           for b in ("standard", "verified")],
          "idle cpu ms", idle.get("cpu_ms"), "idle ms", idle.get("idle_ms"), "allowed", idle.get("allowed_ms"))
