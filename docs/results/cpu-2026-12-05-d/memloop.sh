#!/usr/bin/env bash
# The honest C++ ReLU (the CPU corpus's example_cpp_relu) evaluated N times, each run's whole-timing-stage memory
# figures printed (MiB): bash docs/results/cpu-2026-12-05-d/memloop.sh N > summary.txt (from the repository root,
# kbv installed; KBV_CACHE_DIR shared so the extension builds once).
export KBV_CACHE_DIR=${KBV_CACHE_DIR:-/tmp/kbv-memloop-cache}
out=$(mktemp -d)
for i in $(seq 1 "${1:-10}"); do
  kbv eval --problem src/kbv/suites/builtin/level1/5_ReLU.py \
    --candidate src/kbv/examples/cpu/level_1_problem_5_sample_0_kernel.py --device cpu --out "$out/r$i.jsonl" \
    --overwrite > "$out/log$i" 2>&1
  python3 -c "
import json, sys
r = json.loads(open(sys.argv[2]).readline()); t = r['memory_bytes'].get('timing_stage') or {}
mib = lambda d: {k: round(v / 2**20, 1) for k, v in (d or {}).items()}
print(sys.argv[1], r['verdict'], r['flags'], 'compared', mib(t.get('compared')), 'allowed', round((t.get('allowed') or 0) / 2**20, 1))
" "$i" "$out/r$i.jsonl"
done
