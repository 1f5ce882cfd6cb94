"""The built-in suite with the reference as its own candidate (every check, both baselines, the CPU's defaults):
verdict, flags, and each role's whole-timing-stage memory figure (``memory_bytes.timing_stage.compared``, MiB) with
the rule's limit. Run from the repository root (KBV_CACHE_DIR fresh)."""
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
    stage = (r.get("memory_bytes") or {}).get("timing_stage") or {}
    mib = {k: round(v / 2**20, 1) for k, v in (stage.get("compared") or {}).items()}
    print(r["problem"], r["verdict"], r["flags"], "compared MiB", mib,
          "allowed", round((stage.get("allowed") or 0) / 2**20, 1))
