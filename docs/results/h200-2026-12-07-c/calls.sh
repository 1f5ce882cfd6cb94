#!/usr/bin/env bash
# This session's device calls as run, from the repository root as
# `bash docs/results/h200-2026-12-07-c/calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh), back to back on one warm machine (an H200 came): call 2 first (`calls.sh 2 565`), then
# call 1 (`calls.sh 1 500`), then call 3 (`calls.sh 3 150`), with the 181 device seconds left. Calls 1 and 2 are
# h100-2026-12-07-b/next_calls.sh's, run on this session's tree (a slow first re-measure of a cached reference read
# again: REFERENCE_REMEASURE_COMMANDS). (Written as docs/results/h100-2026-12-07-c/calls.sh before the card was known;
# call 3 was typed as its own command: `. scripts/device_calls.sh 3 150; export KBV_CACHE_DIR=... TRITON_CACHE_DIR=...;
# g 145 c3builds --stages builds --builds-n 16 --builds-pch on`.)
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # 1. the clean rule's finding read over four pooled clean commands (8ca3025): kbv beside KernelBench's harness
  # over the 20 named pairs, where level1/10 was a false reference_slowed in h100-2026-12-07-b (goal <= 1)
  1) g "$(( $(left) - 5 ))" c1vs --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
  # 2. the goal's 50-pair reward batch: nothing cached, then cached (no false flag expected; the cached batch's
  # set-asides read with a second re-measure)
  2) g 300 c2cold "${BATCH[@]}"
     g "$(( $(left) - 5 ))" c2base "${BATCH[@]}" ;;
  # 3. CUDA load_inline builds on the H200's 16 cores, 16 at a time, with the precompiled headers
  3) g 145 c3builds --stages builds --builds-n 16 --builds-pch on ;;
esac
