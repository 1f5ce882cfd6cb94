#!/usr/bin/env bash
# The device calls of h100-2026-12-05, run from the repository root as `bash docs/results/h100-2026-12-05/calls.sh N`
# with .kb and .whl carried (see this folder's README). Each step streams into $OUT/consoleN.log and packs its --out.
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /dev/null 2>&1
S=$SECONDS; C=$OUT/console$1.log
g() { local t=$1 tag=$2; shift 2; timeout "$t" python3 scripts/gpu_check.py "$@" --out /tmp/$tag --pack $OUT/$tag.tgz >> $C 2>&1
      echo "== $tag rc=$? at $((SECONDS-S)) s" >> $C; }
reward() { g "$1" "$2" --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share "$3"; }
case $1 in
  1) KBV_PYTEST_TIMEOUT=320 g 330 c1py --stages pytest
     g "${2:-220}" c1b --stages builds --builds-n 16 --builds-pch on --builds-workers 16 ;;
  2) reward 235 c2r5a 5; reward "${2:-225}" c2r5b 5 ;;
  3) g "${2:-560}" c3vs --stages vskb --vskb-budget "${3:-440}" ;;
  4) KBV_PYTEST_TIMEOUT="${2:-300}" g 310 c4py --stages pytest --pytest-k "idle or childs_kernels or load_inline or reaches"
     reward "${3:-170}" c4r 5 ;;
  5) KBV_PYTEST_TIMEOUT="${2:-190}" g 200 c5py --stages pytest --pytest-k "idle or childs_kernels or switched_off" ;;
esac
