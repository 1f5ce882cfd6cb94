#!/usr/bin/env bash
# This session's device calls, from the repository root as `bash docs/results/h100-2026-12-06-d/calls.sh N [limit]`
# with .kb and .whl carried (shared preamble: scripts/device_calls.sh). Calls 1 and 2 are the previous session's
# planned calls (docs/results/h100-2026-12-06-c/next_calls.sh 1 and 2) run on this session's starting tree (fa07563);
# calls 3 and 4 run on the tree with the precision recheck and the released cached memory.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
case $1 in
  1|2) echo "see docs/results/h100-2026-12-06-c/next_calls.sh $1" ;;
  # the reward batch again (the OOM of the 6 GiB elementwise pairs' judged call; level2/5 with the reference as its
  # own candidate, incorrect in call 1), then kbv beside KernelBench's harness in what is left
  3) g 330 c3r5 --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 \
       --gpu-share 5
     g "$(( $(left) - 5 ))" c3vs --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
  # the whole GPU suite
  4) KBV_PYTEST_TIMEOUT="$(( $(left) - 20 ))" g "$(( $(left) - 10 ))" c4py --stages pytest ;;
esac
