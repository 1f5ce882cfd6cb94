#!/bin/bash
# Interleaved A/B of the CPU fixed-cost pair (the built-in level1/5_ReLU, small profile, the reference as its own
# candidate, all checks, both baselines): A = the tree of a git worktree at the previous commit, B = this tree.
#   git worktree add /tmp/kbv-old f7f1df9
#   bash docs/results/cpu-2026-12-05-c/ab.sh /tmp/kbv-old . 6 > docs/results/cpu-2026-12-05-c/ab.log
A=$1; B=$2; N=${3:-5}
for i in $(seq 1 "$N"); do
  for side in A B; do
    if [ "$side" = A ]; then src=$(cd "$A" && pwd); else src=$(cd "$B" && pwd); fi
    o=$(mktemp -d)
    (cd "$src" && PYTHONPATH="$src/src" KBV_CACHE_DIR=$(mktemp -d) python benchmarks/pair_cost.py --problems builtin \
       --only level1/5_ReLU --reference --device cpu --baseline-import --out "$o" > "$o/log" 2>&1)
    python - "$o" "$side" <<'PY'
import json, sys
o, tag = sys.argv[1:]
s = json.load(open(o + "/pair_cost.json"))
r = [json.loads(line) for line in open(o + "/pair_cost.jsonl")][0]
b = s["breakdown_median_s"]
self_speedups = [round(x, 3) for k in ("standard", "verified") for x in r["speedup"][k]["per_shape"]]
print(tag, "pair_s", s["per_pair_median_s"], "import_torch_s", s["import_torch_s"], "ratio", s["ratio_to_import_torch"],
      "timing_s", b["performance/timing"], "self_speedups", self_speedups, r["verdict"], r["flags"], flush=True)
PY
  done
done
