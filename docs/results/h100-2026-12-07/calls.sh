#!/usr/bin/env bash
# The device calls of h100-2026-12-07, as run from the repository root with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh), back to back on one warm H100 (the script then lived at docs/results/gpu-2026-12-07/):
#   call 1 (tree b0fd13b): bash docs/results/gpu-2026-12-07/calls.sh 1 560
#   call 2 (same tree): the command of case 2 below, given inline with limit 400
# KBV_TIMING_BATCH was a knob of that tree (702372f, fc7cb43), removed after these calls (reverted: 7a0a8e3, 51d3748).
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
B30=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-20,2:1-10 --bench-limit 30 --gpu-share 5)
case $1 in
  # 1. 30 reward pairs with nothing cached (the first memory estimate counting intermediate tensors, not yet run in
  # a batch: how many correctness stages ran again; h100-2026-12-06-h's e0bf4a0 read 705.3 per hour, 1 run again),
  # then cached with the default schedule, then cached with timing in batches of 5 (KBV_TIMING_BATCH)
  1) g 260 c1cold30 "${B30[@]}"
     g 150 c1base30 "${B30[@]}"
     KBV_TIMING_BATCH=5 g "$(( $(left) - 5 ))" c1batch30 "${B30[@]}" ;;
  # 2. the same cached batch again in the other order: timing in batches of 5, then the default schedule
  2) KBV_TIMING_BATCH=5 g 190 c2batch30 "${B30[@]}"
     g "$(( $(left) - 5 ))" c2base30 "${B30[@]}" ;;
esac
