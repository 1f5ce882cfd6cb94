import sys, json, time
sys.path.insert(0, "tests")  # run from the repository root
from conftest import problem_path
from kbv.eval import EvalOptions, evaluate
prob = sys.argv[1]
for cand in sys.argv[2:]:
    t=time.time()
    r = evaluate(problem_path(prob), cand, EvalOptions(device="cpu", timeout=60.0))
    m = r.memory_bytes or {}
    print(cand.split("/")[-1], r.verdict, r.flags, round(time.time()-t,1), {k: m.get(k) for k in ("candidate_peak","reference_peak")})
    print("  ", json.dumps(m.get("timing_stage")))
