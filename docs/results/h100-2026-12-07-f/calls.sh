#!/usr/bin/env bash
# This session's device calls, from the repository root as
# `bash docs/results/h100-2026-12-07-f/calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh), back to back on one warm machine. Put the results in a folder named after the card.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # 1. the new GPU test (sync_tail_ms) and the digest's, then the goal's 50-pair reward batch, nothing cached then
  # cached, with the GPU timing workers pinned to one CPU and every other worker to the rest (GPU_TIMING_CPUS, new
  # in h100-2026-12-07-e and never yet run in a batch under --gpu-share): no regression against h100-2026-12-07-d's 691.1 and 824.5 per hour (H100) or
  # h200-2026-12-07-c's 848.2 and 1,092.9 (H200), 50 of 50 correct? REFERENCE_REMEASURE_COMMANDS' second
  # re-measure has not yet run on a GPU (timing_ms.reference_remeasures)
  1) g 60 n1pytest --stages pytest --pytest-k "hosts_latency or digest_is_the_same"
     g 300 n1cold "${BATCH[@]}"
     g "$(( $(left) - 5 ))" n1base "${BATCH[@]}" ;;
  # 2 and 3. kbv beside KernelBench over the 20 named pairs twice on one machine start (each about 400 s: a call
  # each, back to back), pinned (the default) then unpinned (KBV_GPU_TIMING_CPUS=0): the default's first comparison
  # on one machine over all 20 (three pairs read 9.10 s a pair pinned against 7.95 unpinned in h100-2026-12-07-e's
  # call 5, one run each; the 20 pairs read 0.944 pinned in its call 6). Read timing_ms.command_clocks' cpu_mhz
  # and sync_tail_ms beside the two speeds (level3/3, level1/10, level1/13: a self-speedup of 0.807 pinned in call 6;
  # is the slow commands' fixed 0.1 ms a call the host's latency after the synchronize inside the timed events?)
  2) g "$(( $(left) - 5 ))" n2pinned --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
  3) KBV_GPU_TIMING_CPUS=0 g "$(( $(left) - 5 ))" n3free --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
  # 4. every GPU test (pytest -m gpu: the GPU corpus at full size included), not run whole since h100-2026-12-06-h,
  # with the builds first, if device time is left
  4) g "$(( $(left) - 5 ))" n4pytest --stages env,build,pytest ;;
esac
