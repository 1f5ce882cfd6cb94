#!/usr/bin/env bash
# The next session's device calls (NOT RUN yet), from the repository root as
# `bash docs/results/h200-2026-12-07-c/next_calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh), back to back on one warm machine. Put the results in a folder named after the card.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # 1. the goal's 50-pair reward batch again (on an H200: is 1,092.9 per hour, h200-2026-12-07-c, sustained on
  # another machine of the kind?), nothing cached then cached; a cached time set aside now gets a second re-measure
  # first (REFERENCE_REMEASURE_COMMANDS, not yet exercised on a GPU): see timing_ms.reference_remeasures
  1) g 300 n1cold "${BATCH[@]}"
     g "$(( $(left) - 5 ))" n1base "${BATCH[@]}" ;;
  # 2. kbv beside KernelBench's harness over the 20 named pairs (goal <= 1; 1.162 on h200-2026-12-07-c, 0.899 on
  # h200-2026-12-03), with both roles' GPU timing workers pinned to the parent's last 4 CPUs (KBV_GPU_TIMING_CPUS,
  # an experiment never measured: its runs were lost): does level3/3's reference still run at two speeds
  # (0.68-0.74 or 0.99-1.23 ms) and need a fresh pair?
  2) KBV_GPU_TIMING_CPUS=4 g "$(( $(left) - 5 ))" n2vs-pinned --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
  # 3. the same without pinning, on the same machine, for the A/B
  3) g "$(( $(left) - 5 ))" n3vs --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
esac
