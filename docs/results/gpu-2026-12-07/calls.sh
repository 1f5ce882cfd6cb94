#!/usr/bin/env bash
# This session's device calls, from the repository root as `bash docs/results/gpu-2026-12-07/calls.sh N [limit]`
# with .kb and .whl carried (shared preamble: scripts/device_calls.sh), back to back on one warm machine. Call 1 needs
# e0bf4a0's tree in .kb, made here first:
#   mkdir -p .kb/tree-e0bf4a0 && git archive e0bf4a0 src scripts benchmarks pyproject.toml | tar -x -C .kb/tree-e0bf4a0
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
B30=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-20,2:1-10 --bench-limit 30 --gpu-share 5)
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # 1. the first memory estimate counting intermediate tensors (SHARED_CORRECTNESS_MEMORY_FACTORS) against e0bf4a0's
  # six times the inputs and outputs: the same 30 pairs with nothing cached, each tree its own kbv and Triton caches
  1) KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head g 280 c1head30 "${B30[@]}"
     ( cd .kb/tree-e0bf4a0 && export PYTHONPATH=$PWD/src:/tmp/site KBV_CACHE_DIR=/tmp/cache-old TRITON_CACHE_DIR=/tmp/triton-old
       timeout "$(( $(left) - 5 ))" python3 scripts/gpu_check.py "${B30[@]}" --kb-dir ../kernelbench --out /tmp/c1old30 \
         --pack $OUT/c1old30.tgz >> $C 2>&1
       echo "== c1old30 rc=$? at $((SECONDS-S)) s" >> $C ) ;;
  # 2. the reward preset's rate (goal 1,000 per hour on an H200): the 50-pair batch, its first 30 cached by call 1's
  # head batch, then again with everything cached (LOOKAHEAD_DEPTH 2, the default)
  2) export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
     g 300 c2a "${BATCH[@]}"
     g "$(( $(left) - 5 ))" c2depth2 "${BATCH[@]}" ;;
  # 3. the same cached batch with correctness workers started ahead for as many pairs as may share the GPU (5)
  3) export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
     KBV_LOOKAHEAD_DEPTH=5 g "$(( $(left) - 5 ))" c3depth5 "${BATCH[@]}" ;;
esac
