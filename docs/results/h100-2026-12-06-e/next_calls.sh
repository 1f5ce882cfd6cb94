#!/usr/bin/env bash
# The next session's device calls (NOT RUN yet), from the repository root as
# `bash docs/results/h100-2026-12-06-e/next_calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh), back to back on one warm machine. Put the results in a folder named after the card.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
case $1 in
  # the reward batch with nothing cached (its builds), then the 6 vskb pairs h100-2026-12-06-e did not reach
  1) g 420 n1r5a --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 \
       --gpu-share 5
     [ "$(left)" -gt 100 ] && g "$(( $(left) - 5 ))" n1vs --stages vskb --vskb-budget "$(( $(left) - 40 ))" \
       --vskb-pairs level2/29_Matmul_Mish_Mish,level2/40_Matmul_Scaling_ResidualAdd,level3/3_DeepNarrowMLP,level3/13_DenseNet121TransitionLayer,level3/17_SqueezeNetFireModule,level1/13_Matmul_for_symmetric_matrices ;;
  # the steady state (goal 1,000 per hour; level1/30's run again alone now waits for retired workers, and a correctness
  # stage that nearly fills the GPU runs alone: level1/25 and level1/30 should not run again), then the same
  # batch with every timed forward recorded: the recording's cost per pair and its false-positive rate
  2) g 280 n2r5b --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 \
       --gpu-share 5
     KBV_RECORD_TIMED=1 g "$(( $(left) - 5 ))" n2r5rec --stages bench --bench-runs reward --levels 1,2 \
       --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5 ;;
  # the GPU corpus with the recording on: its two gap entries should now XPASS (strict: reported as failures) and
  # every honest entry stay clean; if so, RECORD_TIMED_DEFAULT["cuda"] can be turned on
  3) KBV_RECORD_TIMED=1 KBV_PYTEST_TIMEOUT="$(( $(left) - 20 ))" g "$(( $(left) - 10 ))" n3py --stages pytest \
       --pytest-k "test_adversarial_gpu" ;;
esac
