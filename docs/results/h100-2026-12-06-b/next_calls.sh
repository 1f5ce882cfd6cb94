#!/usr/bin/env bash
# The next session's device calls (NOT RUN yet), from the repository root as
# `bash docs/results/h100-2026-12-06-b/next_calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh). Put the results in a folder named after the card that came.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
case $1 in
  # every GPU test and the whole GPU corpus (not run in full since h100-2026-12-06, before the stop, the clean
  # command, its pooled median and fresh pair, and the refused cut)
  1) KBV_PYTEST_TIMEOUT="$(( $(left) - 20 ))" g "$(( $(left) - 10 ))" c1py --stages pytest ;;
  # the reward batch twice: the first times every reference with its clean command (does the fresh pair clear
  # honest flags?), the second is the steady state (goal 1,000 per hour on the H200)
  2) g 275 c2r5a --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5
     g "$(( $(left) - 5 ))" c2r5b --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 \
       --bench-limit 50 --gpu-share 5 ;;
  # builds as kbv run makes them (the cores at a time), the fixed pair, then kbv beside KernelBench's harness
  3) g 140 c3b --stages builds --builds-pch on --builds-n 24
     g 60 c3fx --stages bench --bench-runs fixed
     g "$(( $(left) - 5 ))" c3vs --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
esac
