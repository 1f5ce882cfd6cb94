#!/usr/bin/env bash
# As run this session (h100-2026-12-07-h): h100-2026-12-07-g/next_calls.sh, unchanged, from the repository root at
# fbcadf7 as `bash docs/results/h100-2026-12-07-g/next_calls.sh N LIMIT` with N, LIMIT = 1 590, 2 540 (with
# KBV_CORPUS_GPU_SHARE=4 in its environment), 3 550, .kb and .whl carried, back to back on one warm machine (an
# H100 80GB HBM3). Its original header, as written for this session:
# The next session's device calls (NOT RUN yet), from the repository root as
# `bash docs/results/h100-2026-12-07-g/next_calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh), back to back on one warm machine. Put the results in a folder named after the card.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # 1. the 50-pair reward batch, nothing cached then cached. In h100-2026-12-07-g the cold batch needed more than
  # its 300 s (45 of 50 pairs: a machine whose kernels and harness both ran 5-30 % slower than -f's) and the cached
  # one was cut at 43: so 340 s for the cold one here. Read: evaluations per hour (H100 -f: 712.5 and 880.2; H200
  # h200-2026-12-07-c: 848.2 and 1,092.9), the cached self-speedups (-g, REFERENCE_CACHE_SLOW_MAX's first GPU run:
  # 0.903-1.044 over 33 pairs, 4 of 28 cached set aside; -f without it 0.924-1.262), and whether any pooled
  # clean-command finding took the clean times (timing_ms.reference_clean ... substituted, 0aa4916)
  1) g 340 n1cold "${BATCH[@]}"
     g "$(( $(left) - 5 ))" n1base "${BATCH[@]}" ;;
  # 2. every GPU test with the builds first, the GPU corpus 4 pairs in flight (KBV_CORPUS_GPU_SHARE, new): in -g
  # the corpus took 168 s of pytest's 394 s serially; are its verdicts the same? And the handoff test that failed
  # in -g (an honest 2 MiB ReLU rejected; its message now names the flags: a launch-bound reference_slowed?)
  2) KBV_CORPUS_GPU_SHARE=4 g "$(( $(left) - 5 ))" n2pytest --stages env,build,pytest ;;
  # 3. the fixed pair three ways (in -g the no-seccomp run was a false reference_slowed at 1.35 pooled, the case
  # REFERENCE_CLEAN_REJECT_ABOVE now takes the clean times for), then kbv beside KernelBench over the 20 pairs
  # (H100 -g: 0.965 on a slow machine; -f 1.011; goal <= 1 on the H200)
  3) g 120 n3fixed --stages bench --bench-runs fixed,fixed-noseccomp,fixed-open
     g "$(( $(left) - 5 ))" n3vs --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
esac
