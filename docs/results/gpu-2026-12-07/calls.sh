#!/usr/bin/env bash
# This session's device calls, from the repository root as `bash docs/results/gpu-2026-12-07/calls.sh N [limit]`
# with .kb and .whl carried (shared preamble: scripts/device_calls.sh), back to back on one warm machine.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
B30=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-20,2:1-10 --bench-limit 30 --gpu-share 5)
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # 1. 30 reward pairs with nothing cached (the first memory estimate counting intermediate tensors, not yet run in
  # a batch: how many correctness stages ran again; h100-2026-12-06-h's e0bf4a0 read 705.3 per hour, 1 run again),
  # then cached with the default schedule, then cached with timing in batches of 5 (KBV_TIMING_BATCH)
  1) g 260 c1cold30 "${B30[@]}"
     g 150 c1base30 "${B30[@]}"
     KBV_TIMING_BATCH=5 g "$(( $(left) - 5 ))" c1batch30 "${B30[@]}" ;;
  # 2. the 50-pair batch (its last 20 not cached), then again cached, then cached in batches of 5, as time allows
  2) g 300 c2a "${BATCH[@]}"
     g 240 c2base "${BATCH[@]}"
     KBV_TIMING_BATCH=5 g "$(( $(left) - 5 ))" c2batch5 "${BATCH[@]}" ;;
esac
