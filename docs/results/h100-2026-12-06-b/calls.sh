#!/usr/bin/env bash
# This folder's device calls, from the repository root as `bash docs/results/h100-2026-12-06-b/calls.sh N [limit]`
# with .kb and .whl carried (shared preamble: scripts/device_calls.sh). Call 1 was
# docs/results/cpu-2026-12-06-b/gpu_calls.sh 1 575 on the tree of 9589aa5; calls 2 and 3 run the tree that refuses a
# cut the candidate's times do not bear out and cleans a cut pair.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
case $1 in
  # the cut pair cleaned (cuda_queue_after_reply with and without the stop; the honest Triton control), CUDA builds
  # 16 at a time with the CUDA source's torch/types.h, the fixed pair with the clean command and without
  2) KBV_CORPUS_IDS=cuda_idle_gpu_load,cuda_queue_after_reply,cuda_example_triton_gelu \
       KBV_PYTEST_TIMEOUT=200 g 210 c2py --stages pytest --pytest-k "queue_after_reply or gpu_work_launched or idle_gpu_load"
     g 140 c2b --stages builds --builds-pch on --builds-n 24 --builds-workers 16
     g 80 c2fx --stages bench --bench-runs fixed
     KBV_CLEAN_REFERENCE=0 g "$(( $(left) - 5 ))" c2fx0 --stages bench --bench-runs fixed ;;
  # the reward batch twice (the first times and caches every reference, with its clean commands: the honest
  # clean ratio over 50 pairs; the second is the steady state)
  3) g 275 c3r5a --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5
     g "$(( $(left) - 5 ))" c3r5b --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 \
       --bench-limit 50 --gpu-share 5 ;;
esac
# Call 4 (the tree that reads the pair's pooled reference median against the clean command and confirms a flag
# with a fresh pair): bash docs/results/h100-2026-12-06-b/calls.sh 4 280
[ "$1" = 4 ] && KBV_CORPUS_IDS=cuda_idle_gpu_load,cuda_queue_after_reply,cuda_example_triton_gelu KBV_PYTEST_TIMEOUT=250 \
  g 260 c4py --stages pytest --pytest-k "queue_after_reply or gpu_work_launched or idle_gpu_load"
