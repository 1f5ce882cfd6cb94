#!/usr/bin/env bash
# The next session's device calls (NOT RUN yet), from the repository root as
# `bash docs/results/h100-2026-12-07-i/next_calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh), back to back on one warm machine. Put the results in a folder named after the card.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # 1. the fixed pair three ways (h100-2026-12-07-i: the default run a false reference_slowed, both roles at one of
  # two speeds together; now excused, reference_clean excused, pair_cost second_readings clean_excused), then the
  # reward batch nothing cached (-i: 289.8 s, 667.5 an hour after builds, large outputs 0.827 s per GiB, 0.530 less
  # the start) and cached with what is left (cut in -g and -h)
  1) g 110 n1fixed --stages bench --bench-runs fixed,fixed-noseccomp,fixed-open
     g 330 n1cold "${BATCH[@]}"
     g "$(( $(left) - 5 ))" n1base "${BATCH[@]}" ;;
  # 2. every GPU test with the builds first (-i: 43 passed, 1 failed (the warm-up's memory test, fixed since),
  # 3 xfailed in 313.9 s after 100 s of builds)
  2) g "$(( $(left) - 5 ))" n2pytest --stages env,build,pytest ;;
  # 3. kbv beside KernelBench over the 20 pairs alone (-h: 0.900 over 18, cut; the goal is <= 1 on the H200)
  3) g "$(( $(left) - 5 ))" n3vs --stages vskb --vskb-budget "$(( $(left) - 60 ))" ;;
esac
