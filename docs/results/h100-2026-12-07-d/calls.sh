#!/usr/bin/env bash
# This session's device calls as run, from the repository root as
# `bash docs/results/h100-2026-12-07-d/calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh), back to back on one warm machine (an H100 came): `calls.sh 1 575`, `calls.sh 2 575`,
# `calls.sh 3 560`, then call 4 (`call4-ab.sh`, run as .kb/ab.sh). Written as docs/results/gpu-2026-12-07-d/calls.sh
# before the card was known. The tree (6df3561): a worker's later timing commands are sent its previous command's
# median and make no estimate calls (ESTIMATE_CALLS).
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # 1. kbv beside KernelBench's harness over the 20 named pairs (goal <= 1; 1.162 on h200-2026-12-07-c with the
  # estimate calls in every command, where they were most of a slow kernel's untimed forwards)
  1) g "$(( $(left) - 5 ))" d1vs --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
  # 2. the goal's 50-pair reward batch, nothing cached then cached (1,092.9 per hour cached on h200-2026-12-07-c:
  # sustained on another machine?); a cached time set aside gets a second re-measure first
  # (REFERENCE_REMEASURE_COMMANDS, not yet exercised on a GPU): see timing_ms.reference_remeasures
  2) g 300 d2cold "${BATCH[@]}"
     g "$(( $(left) - 5 ))" d2base "${BATCH[@]}" ;;
  # 3. call 1 again with both roles' GPU timing workers pinned to the parent's last 4 CPUs (KBV_GPU_TIMING_CPUS,
  # never measured): does level3/3's reference still run at two speeds (0.68-0.74 or 0.99-1.23 ms)?
  3) KBV_GPU_TIMING_CPUS=4 g "$(( $(left) - 5 ))" d3vs-pinned --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
esac
