#!/usr/bin/env bash
# The device calls of this folder, run from the repository root as `bash docs/results/<folder>/calls.sh N [limits]`
# with .kb and .whl carried (see this folder's README). Each step streams into $OUT/consoleN.log and packs its --out.
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /dev/null 2>&1
S=$SECONDS; C=$OUT/console$1.log
nvidia-smi --query-gpu=name,memory.total --format=csv >> $C 2>&1
g() { local t=$1 tag=$2; shift 2; timeout "$t" python3 scripts/gpu_check.py "$@" --out /tmp/$tag --pack $OUT/$tag.tgz >> $C 2>&1
      echo "== $tag rc=$? at $((SECONDS-S)) s" >> $C; }
reward() { g "$1" "$2" --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share "$3"; }
case $1 in
  1) timeout 60 python3 docs/results/h200-2026-12-05-d/cupti_probe.py --out $OUT/cupti_probe.json > $OUT/cupti_probe.log 2>&1
     echo "== probe rc=$? at $((SECONDS-S)) s" >> $C
     KBV_PYTEST_TIMEOUT="${2:-430}" g "$(( ${2:-430} + 10 ))" c1py --stages pytest ;;
  2) reward "${2:-270}" c2r5 5; g "${3:-95}" c2fx --stages bench --bench-runs fixed ;;
  3) g 150 c3rec --stages recording
     for i in 1 2 3; do g 60 c3sq$i --stages suite --only level1/1_Square_Matmul
                        KBV_GPU_TIMING_CPUS=4 g 60 c3pin$i --stages suite --only level1/1_Square_Matmul
                        [ $((SECONDS-S)) -gt "${2:-300}" ] && break; done ;;
  4) timeout 60 python3 docs/results/h200-2026-12-05-d/cupti_probe.py --out $OUT/cupti_probe.json > $OUT/cupti_probe.log 2>&1
     echo "== probe rc=$? at $((SECONDS-S)) s" >> $C
     KBV_PYTEST_TIMEOUT="${2:-300}" g "$(( ${2:-300} + 10 ))" c4py --stages pytest --pytest-k "adversarial_gpu or tf32" ;;
  5) timeout 60 python3 docs/results/h200-2026-12-05-d/cupti_probe.py --out $OUT/cupti_probe.json > $OUT/cupti_probe.log 2>&1
     echo "== probe rc=$? at $((SECONDS-S)) s" >> $C ;;
esac
