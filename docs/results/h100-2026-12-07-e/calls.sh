#!/usr/bin/env bash
# Device calls of the fifth session of 2026-12-07, from the repository root as
# `bash docs/results/<this folder>/calls.sh N [limit]` with .kb and .whl carried (shared preamble:
# scripts/device_calls.sh), back to back on one warm machine. Put the results in a folder named after the card.
. scripts/device_calls.sh "$1" "$2"  # the wheels, the card, g and left
export KBV_CACHE_DIR=/tmp/cache-head TRITON_CACHE_DIR=/tmp/triton-head
BATCH=(--stages bench --bench-runs reward --levels 1,2 --bench-ids 1:1-30,2:1-20 --bench-limit 50 --gpu-share 5)
case $1 in
  # 1. the timer's GPU tests (a command sent an estimate makes no estimate calls; the digest; the allocator count),
  # then kbv beside KernelBench's harness over the 20 named pairs (goal <= 1; 1.081 and 1.050 on h100-2026-12-07-d,
  # 1.162 on h200-2026-12-07-c before the change), with the worker's split of the time before its trials
  # (worker_split_ms: first_inputs, estimate_calls, warmup_calls): where do the sub-ms pairs' 20-30 ms a command go?
  1) g 150 e1pytest --stages pytest --pytest-k "estimate or digest_is_the_same or device_allocations"
     g "$(( $(left) - 5 ))" e1vs --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
  # 2. the goal's 50-pair reward batch, nothing cached then cached (on an H200: 1,092.9 per hour cached on
  # h200-2026-12-07-c, sustained on another machine?); REFERENCE_REMEASURE_COMMANDS' second re-measure has not yet
  # run on a GPU (no cached time was set aside in 99 cached evaluations): see timing_ms.reference_remeasures
  2) g 300 e2cold "${BATCH[@]}"
     g "$(( $(left) - 5 ))" e2base "${BATCH[@]}" ;;
  # 3. the pairs whose reference ran whole commands at one of two speeds (level3/3: 0.68-0.74 or 1.05-1.18 ms on
  # h100-2026-12-07-d, pinned to 4 CPUs or not), first with both roles' timing workers on one CPU (the same one:
  # they never run together), then unpinned, on the same machine: is the second speed a launch thread that woke on
  # a busy core? Only the verified baseline's commands switch speed (README here), so read timing_ms.command_clocks
  # (each command's SM clock and the driver's reasons, beside its medians) with reference_clean.pairs
  3) P=level3/3_DeepNarrowMLP,level1/10_3D_tensor_matrix_multiplication,level1/13_Matmul_for_symmetric_matrices
     KBV_GPU_TIMING_CPUS=1 g "$(( $(left) / 2 - 5 ))" e3two-one-cpu --stages vskb --vskb-pairs "$P" --vskb-budget "$(( $(left) / 2 - 40 ))"
     g "$(( $(left) - 5 ))" e3two-free --stages vskb --vskb-pairs "$P" --vskb-budget "$(( $(left) - 40 ))" ;;
  # 4. the GPU tests of this session's changes (the digest by rows and columns, the re-warm rule, the estimate),
  # then four pairs on this tree with the parent's own split of each timing command (timing_ms.parent_split_ms):
  # a sub-ms pair, a 4 GiB output, a slow kernel, level3/3's two speeds (now pinned to one CPU by default)
  4) g 120 e4pytest --stages pytest --pytest-k "digest_is_the_same or estimate or device_allocations"
     P=level3/4_LeNet5,level1/7_Matmul_with_small_K_dimension_,level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide,level3/3_DeepNarrowMLP
     g "$(( $(left) - 5 ))" e4vs --stages vskb --vskb-pairs "$P" --vskb-budget "$(( $(left) - 40 ))" ;;
  # 5. the same-machine checks: the old tree (d01b032, before this session; unpacked into .kb/old by `git archive
  # d01b032 src scripts benchmarks | tar -x -C .kb/old`) on a 4 GiB output and a slow kernel, then this tree on the
  # same two; three launch-bound pairs unpinned (KBV_GPU_TIMING_CPUS=0), then pinned (the new default)
  5) R=$PWD; mkdir -p .kb/old/.kb && ln -sfn $R/.kb/kernelbench .kb/old/.kb/kernelbench && ln -sfn $R/.kb/peers-kernelbench .kb/old/.kb/peers-kernelbench
     AB=level1/7_Matmul_with_small_K_dimension_,level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide
     (cd .kb/old && PYTHONPATH=$R/.kb/old/src:/tmp/site KBV_CACHE_DIR=/tmp/cache-old TRITON_CACHE_DIR=/tmp/triton-old timeout 100 python3 scripts/gpu_check.py --stages vskb --vskb-pairs $AB --out /tmp/e5old --pack $OUT/e5old.tgz >> $C 2>&1)
     echo "== e5old rc=$? at $((SECONDS-S)) s" >> $C
     g 100 e5new --stages vskb --vskb-pairs $AB
     P=level3/4_LeNet5,level3/3_DeepNarrowMLP,level1/10_3D_tensor_matrix_multiplication
     KBV_GPU_TIMING_CPUS=0 g 100 e5free --stages vskb --vskb-pairs "$P"
     g 100 e5pinned --stages vskb --vskb-pairs "$P" ;;
  # 6. kbv beside KernelBench's harness over the 20 named pairs, this tree
  6) g "$(( $(left) - 5 ))" e6vs --stages vskb --vskb-budget "$(( $(left) - 40 ))" ;;
esac
