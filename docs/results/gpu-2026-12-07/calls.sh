#!/usr/bin/env bash
# This session's device calls, from the repository root as `bash docs/results/gpu-2026-12-07/calls.sh N [limit]`
# with .kb and .whl carried (shared preamble: scripts/device_calls.sh), back to back on one warm machine.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # 1. the reward batch with nothing cached (the first memory estimate counting intermediate tensors, not yet run in
  # a batch: how many correctness stages ran again), then again with everything cached (the default schedule)
  1) g 380 c1cold "${BATCH[@]}"
     g "$(( $(left) - 5 ))" c1base "${BATCH[@]}" ;;
  # 2. the cached batch with timing in batches of 5 (KBV_TIMING_BATCH), then the default schedule again
  2) KBV_TIMING_BATCH=5 g 280 c2batch5 "${BATCH[@]}"
     g "$(( $(left) - 5 ))" c2base "${BATCH[@]}" ;;
  # 3. if time is left: correctness workers started ahead for 5 pairs with timing in batches of 5
  3) KBV_TIMING_BATCH=5 KBV_LOOKAHEAD_DEPTH=5 g "$(( $(left) - 5 ))" c3batch5depth5 "${BATCH[@]}" ;;
esac
