import sys, json, tempfile
from pathlib import Path
sys.path.insert(0, "tests")  # run from the repository root
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
    st = (r.get("memory_bytes") or {}).get("timing_stage") or {}
    c = st.get("compared") or {}
    print(r["problem"], r["verdict"], r["flags"], st.get("flagged"), round(((c.get("candidate") or 0) - (c.get("reference") or 0))/2**20, 2), "MiB diff", round((c.get("reference") or 0)/2**20,1), "ref MiB", (r.get("timing_ms") or {}).get("untimed_confirmation_pair"))
