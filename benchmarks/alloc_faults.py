#!/usr/bin/env python3
"""What the C allocator's thresholds do to a small kernel's CPU timing: a 64x1024 ReLU timed per call (cache flush
between calls, as kbv's timer does) with each of kbv's two settings, and with glibc's defaults.

    python benchmarks/alloc_faults.py [--calls 300]

``measuring`` (every allocation of 64 KiB or more its own mapping: the memory measurement's setting) makes each
256 KiB output a fresh mapping whose page faults the timed call pays; ``timing`` (kbv.worker.memory.timing_allocator)
and the defaults reuse heap blocks. Each setting runs in a fresh process (the thresholds stay set once changed).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import statistics, sys, time
sys.path.insert(0, sys.argv[3])
import torch
from kbv.worker import memory
setting, calls = sys.argv[1], int(sys.argv[2])
if setting == "measuring":
    memory.measuring_allocator()
elif setting == "timing":
    memory.timing_allocator()
torch.set_num_threads(1)
flush = torch.empty(2 * 2**20 // 4, dtype=torch.int32)
times = []
for _ in range(calls):
    x = torch.rand(64, 1024)
    flush.fill_(1)
    t0 = time.perf_counter_ns()
    out = torch.relu(x)
    times.append((time.perf_counter_ns() - t0) / 1e6)
    del out
times = times[calls // 5:]
print(f"{statistics.median(times):.4f} {min(times):.4f}")
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    for setting in ("measuring", "timing", "glibc-default"):
        out = subprocess.run([sys.executable, "-c", _CHILD, setting, str(args.calls), str(ROOT / "src")],
                             capture_output=True, text=True, check=True).stdout.split()
        print(f"{setting:14s} median {float(out[0]) * 1e3:8.1f} us   min {float(out[1]) * 1e3:8.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
