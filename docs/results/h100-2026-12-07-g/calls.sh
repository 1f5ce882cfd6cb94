#!/usr/bin/env bash
# As run this session (h100-2026-12-07-g): h100-2026-12-07-f/next_calls.sh, unchanged, from the repository root at
# 723e467 as `bash docs/results/h100-2026-12-07-f/next_calls.sh N LIMIT` with N, LIMIT = 1 575, 2 560, 3 585, .kb and
# .whl carried, back to back on one warm machine (an H100 80GB HBM3).
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # 1. the 50-pair reward batch, nothing cached then cached, with REFERENCE_CACHE_SLOW_MAX (138c7f6, never yet run
  # on a GPU): how many cached pairs set the cache aside (timing_ms.reference_cache_too_slow), what it costs an hour
  # (H100 h100-2026-12-07-f: 712.5 and 880.2; H200 h200-2026-12-07-c: 848.2 and 1,092.9), and the cached run's
  # self-speedups (h100-2026-12-07-f: 0.924-1.262, 7 of 40 outside +-5 %)
  1) g 300 n1cold "${BATCH[@]}"
     g "$(( $(left) - 5 ))" n1base "${BATCH[@]}" ;;
  # 2. every GPU test (pytest -m gpu: the GPU corpus at full size included), not run whole since h100-2026-12-06-h,
  # with the builds first (about 95 s, then about 380 s)
  2) g "$(( $(left) - 5 ))" n2pytest --stages env,build,pytest ;;
  # 3. kbv beside KernelBench over the 20 named pairs, pinned with one thread (the default): on an H200 the goal's
  # figure (<= 1); on an H100 h100-2026-12-07-f read 1.011 pinned and 0.979 unpinned on one start
  # Before it, the fixed pair with and without the sandbox and seccomp (about 15 s each): in h100-2026-12-07-f the
  # candidate's worker spent a median 1.88 times the reference's time on the same digests (worker_split_ms.digest,
  # 17 self pairs; copies, asks and timed calls 1.00-1.01): is it the sandbox (seccomp's speculation mitigations)?
  3) g 120 n3fixed --stages bench --bench-runs fixed,fixed-noseccomp,fixed-open
     g "$(( $(left) - 5 ))" n3vs --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
esac
