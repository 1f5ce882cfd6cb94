#!/usr/bin/env bash
# This session's device calls (sixth of 2026-12-06), from the repository root as
# `bash docs/results/h100-2026-12-06-e/calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh), back to back on one warm machine.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
case $1 in
  # the GPU tests h100-2026-12-06-d's call 4 did not reach (it ran those of test_adversarial_defences,
  # test_adversarial_gpu, test_devmem and the first of test_gpu; its one failure's manifest is fixed since), with
  # this session's two tests of the timed calls' recording
  1) KBV_PYTEST_TIMEOUT="$(( $(left) - 20 ))" g "$(( $(left) - 10 ))" e1py --stages pytest \
       --pytest-k "not test_adversarial_gpu and not test_devmem and not test_adversarial_defences" ;;
  # the reward batch with nothing cached (its builds), then kbv beside KernelBench's harness in what is left
  2) g 420 e2r5a --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 \
       --gpu-share 5
     [ "$(left)" -gt 100 ] && g "$(( $(left) - 5 ))" e2vs --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
  # the steady state (goal 1,000 per hour), then the vskb pairs call 2 did not reach (its rows read from /tmp/e2vs)
  3) g 300 e3r5b --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 \
       --gpu-share 5
     rest=$(python3 -c "
import json, sys; sys.path.insert(0, 'scripts'); from gpu_check import VSKB_PAIRS
try: done = {r['problem'] for r in json.load(open('/tmp/e2vs/vskb/vs_kernelbench.json'))['rows']}
except OSError: done = set()
print(','.join(p for p in VSKB_PAIRS if p not in done))")
     echo "vskb pairs left: $rest" >> $C
     [ -n "$rest" ] && [ "$(left)" -gt 100 ] && g "$(( $(left) - 5 ))" e3vs --stages vskb --vskb-pairs "$rest" --vskb-budget "$(( $(left) - 40 ))" ;;
esac
