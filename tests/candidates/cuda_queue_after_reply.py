"""Candidate for level1/5_ReLU (CUDA) that leaves GPU work queued for the next command: a thread started at import
through ``_thread`` waits until no forward has run for 30 ms (its timing command has replied: the other role is
being timed), then replays, once per idle spell, a CUDA graph of 40 4096x4096 fp32 matmuls three times onto a stream
of its own: a few launches of the CPU (far below the idle-CPU rule's slack), hundreds of milliseconds of the GPU
beside the reference's next timing command. Its own timed calls are honest (``torch.relu``).

Expected: rejected with ``reference_slowed``: the reference's commands right after the candidate's are slower than
its others by more than ``REFERENCE_AFTER_CANDIDATE_MAX`` (timing_ms.reference_after_candidate). With that bound
unbounded it is correct (tests/test_adversarial_gpu.py).
"""
import _thread
import time

import torch
import torch.nn as nn

_last = [time.perf_counter()]
_ready = []


def _queue() -> None:
    try:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            a = torch.randn(4096, 4096, device="cuda")
            b = torch.mm(a, a)  # cuBLAS set up before the capture
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                for _ in range(40):
                    torch.mm(a, a, out=b)
        stream.synchronize()
    except Exception:  # no GPU in this process: nothing to queue
        return
    finally:
        _ready.append(True)
    queued_after = 0.0
    while True:
        time.sleep(0.005)
        last = _last[0]
        if time.perf_counter() - last > 0.03 and queued_after != last:  # once per idle spell
            queued_after = last
            with torch.cuda.stream(stream):
                for _ in range(3):
                    graph.replay()


_thread.start_new_thread(_queue, ())
while not _ready:
    time.sleep(0.01)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _last[0] = time.perf_counter()
        out = torch.relu(x)
        _last[0] = time.perf_counter()
        return out
