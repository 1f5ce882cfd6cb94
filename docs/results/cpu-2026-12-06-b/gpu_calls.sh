#!/usr/bin/env bash
# The next session's device calls (NOT RUN in this session: its device time was spent), from the repository root as
# `bash docs/results/cpu-2026-12-06-b/gpu_calls.sh N [limit]` with .kb and .whl carried. Each step streams into
# $OUT/consoleN.log and packs its --out. Put the results in a folder named after the card that came.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
case $1 in
  # the idle worker stopped, the synchronize before each reply and the clean command (issue 12), with the honest
  # controls; then CUDA builds with the CUDA source's torch/types.h and with torch/extension.h (issue 13)
  1) KBV_CORPUS_IDS=cuda_idle_gpu_load,cuda_queue_after_reply,cuda_example_triton_gelu \
       KBV_PYTEST_TIMEOUT=300 g 310 c1py --stages pytest --pytest-k "adversarial_gpu or tf32 or load_inline"
     g "$(( $(left) - 5 ))" c1b --stages builds --builds-pch on,on-full --builds-n 24 ;;
  # the reward batch (timing_ms.reference_clean of 50 honest pairs: the honest ratio on a GPU), the fixed pair
  # with the clean command (the default) and without it: what it costs on a GPU
  2) g "$(( $(left) - 190 ))" c2r5 --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 \
       --bench-limit 50 --gpu-share 5
     g 95 c2fx --stages bench --bench-runs fixed
     KBV_CLEAN_REFERENCE=0 g 90 c2fx0 --stages bench --bench-runs fixed ;;
esac
