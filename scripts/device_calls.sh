# Sourced by a session's device-call script (docs/results/<folder>/calls.sh or gpu_calls.sh) as
# `. scripts/device_calls.sh "$1" "$2"`, from the repository root with .kb and .whl carried: the carried wheels
# installed into /tmp/site, the card named in $OUT/console<N>.log, and two helpers. `g SECONDS TAG ARGS...` runs
# scripts/gpu_check.py with ARGS, streaming into that log and packing its --out into $OUT/TAG.tgz; `left` says how
# many of the call's LIMIT seconds (the second argument, default 580) are left.
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /dev/null 2>&1
S=$SECONDS; C=$OUT/console$1.log; LIMIT=${2:-580}
nvidia-smi --query-gpu=name,memory.total --format=csv >> $C 2>&1
g() { local t=$1 tag=$2; shift 2; timeout "$t" python3 scripts/gpu_check.py "$@" --out /tmp/$tag --pack $OUT/$tag.tgz >> $C 2>&1
      echo "== $tag rc=$? at $((SECONDS-S)) s" >> $C; }
left() { echo $(( LIMIT - (SECONDS - S) )); }
