"""A kept output's digest on this CPU, the old rule (forced by raising GRID_MIN_BYTES) against the new, 256 MiB and 1 GiB."""
import statistics, sys, time
import torch
from kbv.worker import commit

for mib in (256, 1024):
    t = torch.randn(mib * 2**20 // 4)
    for rule, threshold in (("old", 1 << 62), ("new", 1 << 24)):
        commit.GRID_MIN_BYTES = threshold
        commit._POSITIONS.clear()
        commit.tensor_digest(t)
        times = []
        for _ in range(5):
            t0 = time.perf_counter(); commit.tensor_digest(t); times.append(time.perf_counter() - t0)
        print(f"{mib} MiB {rule}: median {statistics.median(times) * 1e3:.1f} ms over 5", flush=True)
