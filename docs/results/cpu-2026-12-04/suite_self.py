"""The built-in suite with the reference as its own candidate, every check, as `kbv eval` runs it (lend_timed at its
default unless KBV_LEND_TIMED is set): per problem the verdict, the flags, both speedups and the timed calls the
judge lent per process pair. Run from the repository root."""
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, "tests")
from conftest import SUITE  # noqa: E402
from kbv.eval import EvalOptions  # noqa: E402
from kbv.eval.runner import run_pairs  # noqa: E402
from kbv.problems import discover  # noqa: E402
from kbv.problems.candidates import Candidate, Pair, write_reference_candidate  # noqa: E402
from kbv.records import read_records  # noqa: E402

tmp = Path(tempfile.mkdtemp())
pairs = [Pair(p, Candidate.from_path(write_reference_candidate(p, tmp / "c"))) for p in discover(SUITE)]
out = tmp / "self.jsonl"
run_pairs(pairs, EvalOptions(device="cpu", timeout=120.0), out, build_workers=2)
for r in read_records(out):
    speedup = {b: round((s or {}).get("value") or 0, 3) for b, s in (r.get("speedup") or {}).items()}
    lent = ((r.get("timing_ms") or {}).get("lent_inputs") or {}).get("calls")
    ref = ((r.get("timing_ms") or {}).get("reference_verified") or {}).get("median")
    print(json.dumps({"problem": r["problem"], "verdict": r["verdict"], "flags": r["flags"], "speedup": speedup,
                      "reference_verified_ms": ref, "lent_calls": lent}))
