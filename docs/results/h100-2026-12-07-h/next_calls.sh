#!/usr/bin/env bash
# The next session's device calls (NOT RUN yet), from the repository root as
# `bash docs/results/h100-2026-12-07-h/next_calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh), back to back on one warm machine. Put the results in a folder named after the card.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # 1. the fixed pair three ways first (about 90 s; in h100-2026-12-07-h the candidate's digests took 176-193 ms
  # more than the reference's, and the default run read an honest 0.864 after REFERENCE_CLEAN_REJECT_ABOVE took the
  # clean times on the machine's drift: now capped at REFERENCE_CLEAN_MAX times them, _cap_at_clean_times, see
  # reference_clean scaled_by), then the 50-pair reward batch nothing cached (-h: 314.7 s, 627.2 an hour
  # after builds, 50 of 50 correct) and cached with what is left (cut in -g and -h). Read: does commit.warm take the
  # digest gap away (pair_cost.json digest_excess; -h 38.4 ms median cold, 58.7 cached, before it)?
  1) g 110 n1fixed --stages bench --bench-runs fixed,fixed-noseccomp,fixed-open
     g 340 n1cold "${BATCH[@]}"
     g "$(( $(left) - 5 ))" n1base "${BATCH[@]}" ;;
  # 2. every GPU test with the builds first, one corpus pair at a time (-h: 43 passed, 3 xfailed in 417.6 s; the
  # corpus 199 s with 4 in flight against 168 s serial in -g), the new warm-up test among them
  2) g "$(( $(left) - 5 ))" n2pytest --stages env,build,pytest ;;
  # 3. kbv beside KernelBench over the 20 pairs alone (-h: cut by the call's limit after 18 behind the fixed pair;
  # 0.900 over those 18, -g 0.965 over 20; the goal is <= 1 on the H200)
  3) g "$(( $(left) - 5 ))" n3vs --stages vskb --vskb-budget "$(( $(left) - 60 ))" ;;
esac
