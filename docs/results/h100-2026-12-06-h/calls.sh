#!/usr/bin/env bash
# h100-2026-12-06-h's three device calls, as run, from the repository root with .kb and .whl carried (shared
# preamble: scripts/device_calls.sh), back to back on one warm machine (an H100 80GB HBM3), on tree e0bf4a0:
#   bash docs/results/h100-2026-12-06-h/calls.sh 1 480; bash ... 2 575; bash ... 3 250
# Call 2 needs the old tree in .kb, made here before the calls:
#   mkdir -p .kb/tree-04a69ea && git archive 04a69ea src scripts benchmarks pyproject.toml | tar -x -C .kb/tree-04a69ea
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
L20=(--stages bench --bench-runs reward --levels 1 --bench-ids 1:1-20 --bench-limit 20 --gpu-share 5)
B30=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-20,2:1-10 --bench-limit 30 --gpu-share 5)
case $1 in
  # Does the recorded window's spin kernel (RECORD_LEAD_CYCLES) remove the recording's cost per call? The benchmark
  # (plain, recorded, recorded with no spin; inputs redrawn on the device, the verified baseline), then 20 level-1
  # pairs unrecorded and the same 20 recorded, on one machine
  1) g 115 h1rec --stages recording --recording-pairs level1/2,level1/13,level1/18,level1/19,level2/12
     g 200 h1plain20 "${L20[@]}"
     KBV_RECORD_TIMED=1 g "$(( $(left) - 5 ))" h1rec20 "${L20[@]}" ;;
  # h100-2026-12-06-g's batch was slower than -f's, its timing stages waiting 16.0 s for their workers against 4.5 s
  # (21 pairs): its nearly-filling correctness stages had closed every other pair's idle worker. This tree closes
  # them only until the driver says there is room (e0bf4a0). The same 30 pairs with nothing cached (each tree its
  # own kbv and Triton caches): this tree, then 04a69ea (h100-2026-12-06-f's tree, before any room was made)
  2) KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head g 275 h2head30 "${B30[@]}"
     ( cd .kb/tree-04a69ea && export PYTHONPATH=$PWD/src:/tmp/site KBV_CACHE_DIR=/tmp/cache-old TRITON_CACHE_DIR=/tmp/triton-old
       timeout "$(( $(left) - 5 ))" python3 scripts/gpu_check.py "${B30[@]}" --kb-dir ../kernelbench --out /tmp/h2old30 \
         --pack $OUT/h2old30.tgz >> $C 2>&1
       echo "== h2old30 rc=$? at $((SECONDS-S)) s" >> $C ) ;;
  # what time was left: the GPU tests h100-2026-12-06-g's call 1 did not reach (its limit), recording off
  3) KBV_PYTEST_TIMEOUT=225 g 235 h3py --stages pytest --pytest-k "test_sandbox_escape or test_judge_fused or test_handoff" ;;
esac
