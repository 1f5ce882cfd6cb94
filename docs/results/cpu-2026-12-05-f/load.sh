#!/usr/bin/env bash
# The C++ ReLU and its profiled-call attack, evaluated while this 2-core CPU is loaded from outside, from the
# repository root with the virtual environment active: `bash docs/results/cpu-2026-12-05-f/load.sh OUT [HOGS]`.
# Load: another corpus subset and a test run beside it, plus HOGS busy shell loops (HOGS "none": no load at all). Prints, per record,
# the timing stage's samples in the candidate's own code, the expected count and whether it is missing.
out=$1; hogs=${2:-3}; mkdir -p "$out" "$out-beside"
if [ "$hogs" != none ]; then
(KBV_CORPUS_IDS=idle_spinner,fallback_numpy_matmul,persistent_worker_thread,memory_cmd_detect,correct_torch \
 KBV_CORPUS_RECORDS_DIR="$out-beside" timeout 300 python -m pytest -q tests/test_adversarial.py -k corpus > /dev/null 2>&1 &)
(timeout 300 python -m pytest -q tests/test_lending.py tests/test_verdict_rules.py > /dev/null 2>&1 &)
for _ in $(seq 1 "$hogs"); do (timeout 60 sh -c 'while :; do :; done' &); done
sleep 3
fi
KBV_CORPUS_IDS=example_cpp_relu,correct_torch,profiled_own_timed_torch KBV_CORPUS_RECORDS_DIR="$out" timeout 900 \
  python -m pytest -q tests/test_adversarial.py -k "corpus and (example_cpp_relu or correct_torch or profiled_own_timed_torch)" | tail -1
python3 - "$out" <<'PY'
import glob, json, sys
for f in glob.glob(f"{sys.argv[1]}/*.jsonl"):
    for line in open(f):
        r = json.loads(line)
        s = (r.get("fallback") or {}).get("sampled") or {}
        print(r["candidate"].split("/")[-1], r["verdict"], r["flags"],
              {k: s.get(k) for k in ("timed_own_samples", "timed_expected_samples", "timed_own_missing")})
PY
