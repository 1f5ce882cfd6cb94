import sys, json, time
sys.path.insert(0, "tests")  # run from the repository root
from conftest import problem_path
from kbv.eval import EvalOptions, evaluate
for cand in sys.argv[1:]:
    t=time.time()
    r = evaluate(problem_path("level1/5_ReLU"), cand, EvalOptions(device="cpu", timeout=120.0))
    s = (r.fallback or {}).get("sampled")
    print(cand, r.verdict, r.flags, round(time.time()-t,1))
    print(json.dumps({k: s.get(k) for k in ("own_samples","timed_own_samples","timed_expected_samples","timed_own_missing","samples","flags")} if s else s))
    print((r.timing_ms or {}).get("forward_calls"), (r.timing_ms.get("candidate_verified") or {}).get("median"))
