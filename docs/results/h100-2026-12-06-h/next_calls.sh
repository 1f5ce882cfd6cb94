#!/usr/bin/env bash
# The next session's device calls (NOT RUN yet), from the repository root as
# `bash docs/results/h100-2026-12-06-h/next_calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh), back to back on one warm machine. Call 1 needs e0bf4a0's tree in .kb, made here first:
#   mkdir -p .kb/tree-e0bf4a0 && git archive e0bf4a0 src scripts benchmarks pyproject.toml | tar -x -C .kb/tree-e0bf4a0
# Put the results in a folder named after the card.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
B30=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-20,2:1-10 --bench-limit 30 --gpu-share 5)
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # The first memory estimate counting intermediate tensors (SHARED_CORRECTNESS_MEMORY_FACTORS) against e0bf4a0's
  # six times the inputs and outputs: the same 30 pairs with nothing cached, each tree its own kbv and Triton caches
  # (in h100-2026-12-06-h e0bf4a0 read 705.3 per hour, its one correctness run again an underestimated pair's)
  1) KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head g 280 n1head30 "${B30[@]}"
     ( cd .kb/tree-e0bf4a0 && export PYTHONPATH=$PWD/src:/tmp/site KBV_CACHE_DIR=/tmp/cache-old TRITON_CACHE_DIR=/tmp/triton-old
       timeout "$(( $(left) - 5 ))" python3 scripts/gpu_check.py "${B30[@]}" --kb-dir ../kernelbench --out /tmp/n1old30 \
         --pack $OUT/n1old30.tgz >> $C 2>&1
       echo "== n1old30 rc=$? at $((SECONDS-S)) s" >> $C ) ;;
  # the reward preset's rate (goal 1,000 per hour on an H200): the 50-pair batch, its first 30 cached by call 1's
  # head batch (the kbv and Triton caches of call 1), then again, everything cached
  2) export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
     g 300 n2a "${BATCH[@]}"
     g "$(( $(left) - 5 ))" n2b "${BATCH[@]}" ;;
  # kbv beside KernelBench's harness over the 20 named pairs in one run (goal <= 1)
  3) g "$(( $(left) - 5 ))" n3vs --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
esac
