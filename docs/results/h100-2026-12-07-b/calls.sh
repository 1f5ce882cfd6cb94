#!/usr/bin/env bash
# h100-2026-12-07-b's two device calls, as run (h100-2026-12-07's next_calls.sh with call 3 rewritten before it ran),
# from the repository root with .kb and .whl carried (shared preamble: scripts/device_calls.sh), back to back on one
# warm machine (an H100 80GB HBM3), on tree ec5087a (call 2 was not run: no device time was left):
#   bash docs/results/h100-2026-12-07-b/calls.sh 3 540; bash docs/results/h100-2026-12-07-b/calls.sh 1 555
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # 1. the goal's 50-pair reward batch (goal 1,000 per hour on an H200): nothing cached, then cached
  1) g 340 n1cold "${BATCH[@]}"
     g "$(( $(left) - 5 ))" n1base "${BATCH[@]}" ;;
  # 2. correctness workers started ahead for 5 pairs (KBV_LOOKAHEAD_DEPTH; 2 by default), then the default again
  2) KBV_LOOKAHEAD_DEPTH=5 g 260 n2depth5 "${BATCH[@]}"
     g "$(( $(left) - 5 ))" n2base "${BATCH[@]}" ;;
  # 3. does a kernel's time depend on its timed inputs' distribution (half of each command's calls are D1), so that a
  # command's median lands on either of two clusters? Then does another process on the GPU slow the sub-ms matmuls the
  # clean rule flagged falsely (h100-2026-12-07), and does a whole process read slower than another (--fresh)? Then
  # kbv beside KernelBench's harness over the 20 named pairs (goal <= 1) with what is left
  3) timeout 120 python3 benchmarks/distribution_cost.py --pairs level1/12,level1/13,level1/14,level1/15,level1/16,level1/1,level1/2,level1/19,level2/1 \
       --device cuda --out $OUT/distribution >> $C 2>&1; echo "== distribution rc=$? at $((SECONDS-S)) s" >> $C
     timeout 120 python3 benchmarks/neighbour_cost.py --pairs level1/14,level1/12 --rounds 3 --fresh 3 \
       --device cuda --out $OUT/neighbour >> $C 2>&1; echo "== neighbour rc=$? at $((SECONDS-S)) s" >> $C
     g "$(( $(left) - 5 ))" n3vs --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
esac
