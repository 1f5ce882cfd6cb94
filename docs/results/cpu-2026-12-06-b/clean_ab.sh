#!/bin/bash
# Interleaved A/B of the CPU fixed-cost pair (the built-in level1/5_ReLU, small profile, the reference as its own
# candidate, all checks, both baselines) with the clean command off (A, the CPU's default) and on (B):
#   bash docs/results/cpu-2026-12-06-b/clean_ab.sh 5 > docs/results/cpu-2026-12-06-b/clean_ab.log
N=${1:-5}
for i in $(seq 1 "$N"); do
  for side in A B; do
    o=$(mktemp -d)
    flag=$([ "$side" = B ] && echo 1 || echo 0)
    KBV_CLEAN_REFERENCE=$flag KBV_CACHE_DIR=$(mktemp -d) python benchmarks/pair_cost.py --problems builtin \
       --only level1/5_ReLU --reference --device cpu --out "$o" > "$o/log" 2>&1
    python - "$o" "$side" <<'PY'
import json, sys
o, tag = sys.argv[1:]
s = json.load(open(o + "/pair_cost.json"))
r = [json.loads(line) for line in open(o + "/pair_cost.jsonl")][0]
b = s["breakdown_median_s"]
clean = r["timing_ms"].get("reference_clean")
ratios = [p[k]["ratio"] for p in clean["pairs"] for k in ("standard", "verified")] if clean else None
print(tag, "pair_s", s["per_pair_median_s"], "timing_s", b["performance/timing"],
      "process_exit_s", b.get("performance/process_exit"), "clean_ratios", ratios, r["verdict"], r["flags"], flush=True)
PY
  done
done
