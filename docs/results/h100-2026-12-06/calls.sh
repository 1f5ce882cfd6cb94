#!/usr/bin/env bash
# This session's device calls, run from the repository root as `bash docs/results/<folder>/calls.sh N [limit]` with
# .kb and .whl carried. Each step streams into $OUT/consoleN.log and packs its --out. The folder is renamed after the
# card that came (its paths below are the only ones to follow).
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
reward() { g "$1" "$2" --stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5; }
probe() { timeout 60 python3 docs/results/h200-2026-12-05-d/cupti_probe.py --out $OUT/cupti_probe.json > $OUT/cupti_probe.log 2>&1
          echo "== probe rc=$? at $((SECONDS-S)) s" >> $C; }
case $1 in
  1) probe                                            # the recording's mechanism on this card
     KBV_PYTEST_TIMEOUT=420 g 430 c1py --stages pytest  # the GPU tests and corpus (three new entries)
     [ "$(left)" -gt 240 ] && reward "$(left)" c1r5 ;;   # the reward batch, where an H200's speed leaves time
  2) reward "$(( $(left) - 100 ))" c2r5; g 95 c2fx --stages bench --bench-runs fixed ;;
  3) g 150 c3rec --stages recording
     for i in 1 2 3; do g 60 c3sq$i --stages suite --only level1/1_Square_Matmul
                        KBV_GPU_TIMING_CPUS=4 g 60 c3pin$i --stages suite --only level1/1_Square_Matmul
                        [ "$(left)" -lt 130 ] && break; done ;;
esac
# call 4 (after calls 1-3 on the H100: the idle worker stopped, the recording off by default): the probe fixed, then
# the GPU corpus entries that launch while idle, the honest Triton control and the TF32 and load_inline tests
if [ "$1" = 4 ]; then
  probe
  KBV_CORPUS_IDS=cuda_idle_gpu_load,cuda_queue_after_reply,cuda_example_triton_gelu KBV_PYTEST_TIMEOUT="$(( $(left) - 15 ))" \
    g "$(( $(left) - 5 ))" c4py --stages pytest --pytest-k "adversarial_gpu or tf32 or load_inline"
fi
