#!/usr/bin/env bash
# This session's device calls, from the repository root as `bash docs/results/<this folder>/calls.sh N [limit]`
# with .kb and .whl carried (shared preamble: scripts/device_calls.sh), back to back on one warm machine.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # 1. the fixed pair three ways (commit.warm's first GPU run: pair_cost.json digest_excess, 176-193 ms in
  # h100-2026-12-07-h; the clean rule's cap: reference_clean scaled_by), the 50-pair reward batch nothing cached
  # (FUSED_MIN_BYTES now 256 MiB; correctness.forward_ms[role].split's first GPU run: pair_cost.json
  # large_output_forward_split_s_per_gib), then the new GPU tests of the judge's fused path and the warm-ups
  1) g 110 i1fixed --stages bench --bench-runs fixed,fixed-noseccomp,fixed-open
     g 340 i1cold "${BATCH[@]}"
     g "$(( $(left) - 5 ))" i1pyk --stages pytest --pytest-k "judge_fused or warm or handoff" ;;
  # 2. every GPU test with the builds first (h100-2026-12-07-h: 43 passed, 3 xfailed in 417.6 s)
  2) g "$(( $(left) - 5 ))" i2pytest --stages env,build,pytest ;;
esac
