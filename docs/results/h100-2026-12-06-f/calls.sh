#!/usr/bin/env bash
# The four device calls of h100-2026-12-06-f, as run, from the repository root with .kb and .whl carried, back to
# back on one warm machine (an H100 80GB HBM3), on tree 04a69ea:
#   bash docs/results/h100-2026-12-06-e/next_calls.sh 1 575   # call 1: reward batch a, then the 6 vskb pairs left
#   bash docs/results/h100-2026-12-06-e/next_calls.sh 2 560   # call 2: reward batch b, then the same batch recorded
#   bash docs/results/h100-2026-12-06-e/next_calls.sh 3 575   # call 3: the GPU corpus with KBV_RECORD_TIMED=1
#   bash docs/results/h100-2026-12-06-f/calls.sh 4 560        # call 4: the other GPU tests with KBV_RECORD_TIMED=1
case $1 in
  1|2|3) exec bash docs/results/h100-2026-12-06-e/next_calls.sh "$1" "$2" ;;
esac
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
case $1 in
  4) KBV_RECORD_TIMED=1 KBV_PYTEST_TIMEOUT=530 g 550 n4py --stages pytest --pytest-k "not test_adversarial_gpu" ;;
esac
