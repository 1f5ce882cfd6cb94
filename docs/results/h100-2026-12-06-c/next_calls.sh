#!/usr/bin/env bash
# The next session's device calls (NOT RUN yet), from the repository root as
# `bash docs/results/h100-2026-12-06-c/next_calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh). Put the results in a folder named after the card that came.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
case $1 in
  # does another process's device memory, allocated or given back, slow a memory-bound kernel (the slow clean
  # commands)? then the tests cut in h100-2026-12-06-c's call 4, then the reward batch twice (a: every reference
  # timed with its clean command and the allocator counts; b: the steady state, goal 1,000 per hour on the H200;
  # the idle workers closed for a problem that fills the GPU and a slow clean command read again: not yet run)
  1) g 60 c1ct --stages contention
     KBV_PYTEST_TIMEOUT=200 g 210 c1py --stages pytest --pytest-k "device_allocations or cuda_cache_by_data_ptr"
     g "$(( $(left) - 5 ))" c1r5a --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 \
       --bench-limit 50 --gpu-share 5 ;;
  2) g "$(( $(left) - 5 ))" c2r5b --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 \
       --bench-limit 50 --gpu-share 5 ;;
  # kbv beside KernelBench's harness again (1.235 here, 0.855 on h100-2026-12-05-b), then the whole GPU suite
  3) g 330 c3vs --stages vskb --vskb-budget 300
     KBV_PYTEST_TIMEOUT="$(( $(left) - 20 ))" g "$(( $(left) - 10 ))" c3py --stages pytest ;;
esac
