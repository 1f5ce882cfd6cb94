"""Candidate for level1/5_ReLU (CUDA) whose worker loads the GPU whenever it has no forward to run: a thread started
at import through ``_thread`` (no ``threading`` record, no thread growth after the first call) launches a 4096x4096
fp32 matmul chunk onto a stream of its own whenever no forward has run for 20 ms, that is while the reference is
timed, and sleeps between chunks (its matmul is warmed up at import, so no cuBLAS set-up falls in its idle time).
The reference's timed calls then share the GPU with the chunks. Its own timed calls are honest (``torch.relu``).

Expected: rejected with ``idle_work``, from the parent's reading of its worker's CPU clock while it had no command:
on the H100 (docs/results/h100-2026-12-05) its launches used 55 ms of CPU over 0.6 s idle (an earlier version that
polled an event every 4 ms, 104 ms), the reference's worker under 1 ms. The driver's utilisation samples of its idle
worker (``timing_ms.idle_gpu``, recorded only) named it in none of this version's readings and in 3 of the earlier
version's; with the CPU rule off it is correct (tests/test_adversarial_gpu.py).
"""
import _thread
import time

import torch
import torch.nn as nn

_last = [time.perf_counter()]
_ready = []


def _load() -> None:
    try:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):  # warmed up at import: no cuBLAS set-up while idle
            a = torch.randn(4096, 4096, device="cuda")
            b = torch.mm(a, a)
        stream.synchronize()
    except Exception:  # no GPU in this process: nothing to load
        return
    finally:
        _ready.append(True)
    while True:
        if time.perf_counter() - _last[0] > 0.02:  # no forward for 20 ms: the other role is being timed
            with torch.cuda.stream(stream):
                for _ in range(4):  # about 10 ms of the GPU, a few launches of the CPU
                    torch.mm(a, a, out=b)
            time.sleep(0.01)
        else:
            time.sleep(0.01)


_thread.start_new_thread(_load, ())
while not _ready:
    time.sleep(0.01)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _last[0] = time.perf_counter()
        out = torch.relu(x)
        _last[0] = time.perf_counter()
        return out
