#!/usr/bin/env bash
# The next session's device calls (NOT RUN yet), from the repository root as
# `bash docs/results/h100-2026-12-07-b/next_calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh), back to back on one warm machine. Put the results in a folder named after the card.
# Where an H200 comes, run call 2 first: its 50-pair batch is the reward goal's (1,000 per hour on an H200).
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # 1. the clean rule's finding read over four pooled clean commands (8ca3025): kbv beside KernelBench's harness
  # over the 20 named pairs, where level1/10 was a false reference_slowed in h100-2026-12-07-b (goal <= 1)
  1) g "$(( $(left) - 5 ))" n1vs --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
  # 2. the goal's 50-pair reward batch: nothing cached, then cached (no false flag expected)
  2) g 300 n2cold "${BATCH[@]}"
     g "$(( $(left) - 5 ))" n2base "${BATCH[@]}" ;;
  # 3. correctness workers started ahead for 5 pairs (KBV_LOOKAHEAD_DEPTH; 2 by default), then the default again
  3) KBV_LOOKAHEAD_DEPTH=5 g 260 n3depth5 "${BATCH[@]}"
     g "$(( $(left) - 5 ))" n3base "${BATCH[@]}" ;;
esac
