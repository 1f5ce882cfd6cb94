#!/usr/bin/env bash
# This session's device calls, from the repository root as `bash docs/results/h100-2026-12-06-c/calls.sh N [limit]`
# with .kb and .whl carried (shared preamble: scripts/device_calls.sh). Calls 1-3 were the previous session's
# planned calls, run unchanged on this session's starting tree (b858893):
#   bash docs/results/h100-2026-12-06-b/next_calls.sh 1 575   # the whole GPU suite
#   bash docs/results/h100-2026-12-06-b/next_calls.sh 2 575   # the reward batch twice, --gpu-share 5
#   bash docs/results/h100-2026-12-06-b/next_calls.sh 3 560   # builds, the fixed pair, kbv beside KernelBench
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
case $1 in
  # call 4: two GPU tests (the allocator counts, the corpus entry whose manifest changed), then the reward batch again after the memory fixes (one output alive at a time in the timer's estimate
  # calls; a pair run again alone closes the idle workers started ahead)
  4) KBV_PYTEST_TIMEOUT=80 g 90 c4py --stages pytest --pytest-k "device_allocations or cuda_cache_by_data_ptr"
     g "$(( $(left) - 5 ))" c4r5 --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 \
       --bench-limit 50 --gpu-share 5 ;;
esac
