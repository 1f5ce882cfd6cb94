#!/usr/bin/env python3
"""The judge's CPU passes over one 256 MiB float32 output at several chunk sizes, in this process with a CPU
worker's allocator thresholds (kbv.worker.memory.timing_allocator): the comparison (kbv.judge.compare_tensor), the
precision error (kbv.worker.precision.relative_l2) and a kept output's digest (kbv.worker.commit.tensor_digest).

    python docs/results/cpu-2026-12-05-b/chunks.py
"""
import time

import torch

from kbv import judge
from kbv.protocol import TOLERANCES
from kbv.worker import commit, memory, precision

memory.timing_allocator()
torch.manual_seed(0)
ref = torch.randn(4096 * 16384)
cand = ref + 1e-6


def best(fn, n=3):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(min(times), 3), [round(t, 3) for t in times]


for chunk in (1 << 24, 1 << 22, 1 << 20, 1 << 18):
    judge.CHUNK, judge.CPU_CHUNK = chunk, chunk
    commit.CPU_CHUNK = chunk
    print(f"chunk 2**{chunk.bit_length() - 1}:",
          "compare", best(lambda: judge.compare_tensor(cand, ref, TOLERANCES["fp32"])),
          "precision", best(lambda: precision.relative_l2(cand, ref, chunk), 2),
          "digest", best(lambda: commit.tensor_digest(ref)), flush=True)
print("precision at PRECISION_CHUNK 2**26", best(lambda: precision.relative_l2(cand, ref, 2**26), 2))
