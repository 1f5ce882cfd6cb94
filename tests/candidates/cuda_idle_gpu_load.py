"""Candidate for level1/5_ReLU (CUDA) whose worker loads the GPU whenever it has no forward to run: a thread started
at import through ``_thread`` (no ``threading`` record, no thread growth after the first call) launches a 4096x4096
fp32 matmul chunk onto a stream of its own whenever no forward has run for 20 ms, that is while the reference is
timed, and waits for each chunk by polling an event with sleeps, so its CPU clock stays near idle (the CPU's
``idle_work`` rule does not see it). The reference's timed calls then share the GPU with the chunks. Its own timed
calls are honest (``torch.relu``).

Expected today (a gap entry of the manifest): no ``idle_work``, since the GPU's idle-work reading
(``timing_ms.idle_gpu``, the driver's utilisation samples of the idle worker) is recorded only; what it reads here
beside what honest pairs read on the H200 sets the rule (docs/security.md, rule 4).
"""
import _thread
import time

import torch
import torch.nn as nn

_last = [time.perf_counter()]


def _load() -> None:
    a = b = stream = None
    while True:
        if time.perf_counter() - _last[0] > 0.02:  # no forward for 20 ms: the other role is being timed
            if a is None:
                a = torch.randn(4096, 4096, device="cuda")
                b = torch.empty_like(a)
                stream = torch.cuda.Stream()
            done = torch.cuda.Event()
            with torch.cuda.stream(stream):
                for _ in range(4):
                    torch.mm(a, a, out=b)
                done.record(stream)
            while not done.query():
                time.sleep(0.004)
        else:
            time.sleep(0.004)


_thread.start_new_thread(_load, ())


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _last[0] = time.perf_counter()
        out = torch.relu(x)
        _last[0] = time.perf_counter()
        return out
