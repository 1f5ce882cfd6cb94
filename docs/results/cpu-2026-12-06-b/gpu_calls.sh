#!/usr/bin/env bash
# The next session's device calls (NOT RUN in this session: its device time was spent), from the repository root as
# `bash docs/results/cpu-2026-12-06-b/gpu_calls.sh N [limit]` with .kb and .whl carried. Each step streams into
# $OUT/consoleN.log and packs its --out. Put the results in a folder named after the card that came.
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /dev/null 2>&1
S=$SECONDS; C=$OUT/console$1.log; LIMIT=${2:-580}
nvidia-smi --query-gpu=name,memory.total --format=csv >> $C 2>&1
g() { local t=$1 tag=$2; shift 2; timeout "$t" python3 scripts/gpu_check.py "$@" --out /tmp/$tag --pack $OUT/$tag.tgz >> $C 2>&1
      echo "== $tag rc=$? at $((SECONDS-S)) s" >> $C; }
left() { echo $(( LIMIT - (SECONDS - S) )); }
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
