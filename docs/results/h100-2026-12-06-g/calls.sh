#!/usr/bin/env bash
# The three device calls of h100-2026-12-06-g, as run, from the repository root with .kb and .whl carried, back to
# back on one warm machine (an H100 80GB HBM3), on tree 2001f58:
#   bash docs/results/h100-2026-12-06-f/next_calls.sh 1 400   # call 1: recording cost, its GPU test, other GPU tests
#   bash docs/results/h100-2026-12-06-f/next_calls.sh 2 530   # call 2: reward batch a (nothing cached), then b
#   bash docs/results/h100-2026-12-06-g/calls.sh 3 515        # call 3: 20 level-1 pairs recorded, the GPU corpus recorded
# (call 3 replaced next_calls.sh 3: batch a had not finished in 300 s, so a 50-pair recorded batch would not either)
case $1 in
  1|2) exec bash docs/results/h100-2026-12-06-f/next_calls.sh "$1" "$2" ;;
esac
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
case $1 in
  3) KBV_RECORD_TIMED=1 g 230 n3rec --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-20 --bench-limit 20 \
       --gpu-share 5
     KBV_RECORD_TIMED=1 KBV_PYTEST_TIMEOUT="$(( $(left) - 15 ))" g "$(( $(left) - 5 ))" n3py --stages pytest \
       --pytest-k "test_adversarial_gpu" ;;
esac
