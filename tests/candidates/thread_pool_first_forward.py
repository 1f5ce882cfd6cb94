"""Candidate for level1/5_ReLU that starts a helper thread in its very first forward (not at import, where kbv lists
started threads) and from then on has the helper compute half of every ReLU in parallel (hack catalogue T2: more
threads than the reference, on a second core where the worker may use one). The helper stays alive between calls.

Expected: verdict rejected with flags background_threads and fallback. On the CPU the parent takes its /proc
baseline of each worker's threads before the first forward (CorrectnessStage._distributions), so the thread the
first forward starts is growth beyond the reference's."""
import queue
import threading

import torch
import torch.nn as nn

_jobs: "queue.Queue" = queue.Queue()
_started = []


def _helper() -> None:
    while True:
        src, dst, done = _jobs.get()
        torch.clamp(src, min=0.0, out=dst)
        done.set()


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _started:
            _started.append(threading.Thread(target=_helper, daemon=True))
            _started[0].start()
        out = torch.empty_like(x)
        half = x.shape[0] // 2
        done = threading.Event()
        _jobs.put((x[half:], out[half:], done))
        torch.clamp(x[:half], min=0.0, out=out[:half])
        done.wait()
        return out
