#!/usr/bin/env bash
# The next session's device calls (NOT RUN yet), from the repository root as
# `bash docs/results/h100-2026-12-06-f/next_calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh), back to back on one warm machine (calls 2 and 3 need call 2's builds and cached
# references). Put the results in a folder named after the card.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
case $1 in
  # the recording's window opened before the flush: its cost on the sub-ms matmuls that read 22-26 % slower in
  # h100-2026-12-06-f and on a Triton pair, and its GPU test; then the other GPU tests outside the corpus, as far
  # as the call's time goes, the recording off (with it on: 16 passed, 1 xpassed, 1 failed, h100-2026-12-06-f)
  1) g 200 n1rec --stages recording --recording-pairs level1/2,level1/13,level1/18,level2/14,level2/12
     KBV_PYTEST_TIMEOUT=80 g 90 n1py --stages pytest --pytest-k "recording_holds"
     KBV_PYTEST_TIMEOUT="$(( $(left) - 20 ))" g "$(( $(left) - 10 ))" n1gs --stages pytest \
       --pytest-k "not test_adversarial_gpu and not recording_holds" ;;
  # the reward batch with nothing cached (its builds), then the steady state (goal 1,000 per hour; level1/30, which
  # nearly fills the GPU, now makes its room first and should not run again; more pairs should find correctness
  # workers started ahead: 13 of 50 in h100-2026-12-06-f; both roles' digests, worker_split_ms.digest, took 8.1 s of
  # batch b there, before large chunks were summed unstacked)
  2) g 300 n2r5a --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 \
       --gpu-share 5
     g "$(( $(left) - 5 ))" n2r5b --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 \
       --bench-limit 50 --gpu-share 5 ;;
  # the same batch with every timed forward recorded: its false-positive rate (4 of 50 in h100-2026-12-06-f) and
  # cost; then, with the recording on, the GPU corpus and the test that failed with it on
  3) KBV_RECORD_TIMED=1 g 300 n3rec --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 \
       --bench-limit 50 --gpu-share 5
     KBV_RECORD_TIMED=1 KBV_PYTEST_TIMEOUT="$(( $(left) - 20 ))" g "$(( $(left) - 10 ))" n3py --stages pytest \
       --pytest-k "test_adversarial_gpu" ;;
esac
