#!/usr/bin/env bash
# The next session's device calls (NOT RUN yet), from the repository root as
# `bash docs/results/h100-2026-12-06-d/next_calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh). Put the results in a folder named after the card that came.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
case $1 in
  # the reward batch on the fixed tree (a fresh machine's builds took 10 s each here: give it 420 s), then kbv beside
  # KernelBench's harness in what is left (the after/other rule now confirmed on a fresh pair: level1/18 rejected
  # here at 1.26 should not be)
  1) g 420 n1r5a --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 \
       --gpu-share 5
     g "$(( $(left) - 5 ))" n1vs --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
  # the steady state (goal 1,000 per hour on the H200)
  2) g "$(( $(left) - 5 ))" n2r5b --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 \
       --bench-limit 50 --gpu-share 5 ;;
  # the whole GPU suite (cut at 30 tests here by a 395 s call)
  3) KBV_PYTEST_TIMEOUT="$(( $(left) - 20 ))" g "$(( $(left) - 10 ))" n3py --stages pytest ;;
esac
