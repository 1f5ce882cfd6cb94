#!/usr/bin/env bash
# The next session's device calls (NOT RUN yet), from the repository root as
# `bash docs/results/h100-2026-12-06-g/next_calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh), back to back on one warm machine (call 2 needs call 1's builds, cached reference timings
# and learnt memory needs). Call 1 needs the tree h100-2026-12-06-f ran in .kb, made here before the calls:
#   mkdir -p .kb/tree-04a69ea && git archive 04a69ea src scripts benchmarks pyproject.toml | tar -x -C .kb/tree-04a69ea
# Put the results in a folder named after the card.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # Is h100-2026-12-06-g's slow batch the tree or the machine? (Its batch a reached 40 of 50 pairs in 300 s, its b 31
  # in 226 s, where h100-2026-12-06-f's ran 50 in 248 and 210 s; its nearly-filling pairs waited 34-53 s for the GPU
  # in correctness, against 2-22 s.) This tree's batch with nothing cached, then the same batch, everything cached,
  # on 04a69ea (h100-2026-12-06-f's tree: before the room made for a nearly-filling stage and the workers started
  # again after a timing that closed them); call 2 runs this tree's batch cached
  1) g 330 n1head-a "${BATCH[@]}"
     ( cd .kb/tree-04a69ea && export PYTHONPATH=$PWD/src:/tmp/site && timeout "$(( $(left) - 5 ))" python3 scripts/gpu_check.py "${BATCH[@]}" \
         --kb-dir ../kernelbench --out /tmp/n1old-b --pack $OUT/n1old-b.tgz >> $C 2>&1
       echo "== n1old-b rc=$? at $((SECONDS-S)) s" >> $C ) ;;
  # this tree's batch, everything cached (against call 1's 04a69ea batch); then what recording costs with the
  # window's spin kernel (RECORD_LEAD_CYCLES), in the benchmark (plain, recorded, recorded with no spin; inputs
  # redrawn on the device, the verified baseline) and over 20 level-1 pairs recorded (against this batch's medians)
  2) g 280 n2head-b "${BATCH[@]}"
     g 110 n2rec --stages recording --recording-pairs level1/2,level1/13,level1/18,level1/19,level2/12
     KBV_RECORD_TIMED=1 g "$(( $(left) - 5 ))" n2rec20 --stages bench --bench-runs reward --levels 1 \
       --bench-ids 1:1-20 --bench-limit 20 --gpu-share 5 ;;
  # what time is left: the GPU tests h100-2026-12-06-g's call 1 did not reach (its limit), recording off
  3) KBV_PYTEST_TIMEOUT="$(( $(left) - 20 ))" g "$(( $(left) - 10 ))" n3py --stages pytest \
       --pytest-k "test_handoff or test_judge_fused or test_sandbox_escape or recording_holds" ;;
esac
