"""Candidate for level1/5_ReLU that forks a child process at its second forward; the child stays alive (it could
keep working on anything it shares) until the worker is gone (hack catalogue T2: work outside the call, in another
process).

Expected: verdict rejected with flags background_threads (the parent lists the worker's process tree after every
forward and timing command: one more process than after the first call, where the reference has none) and fallback.
standard_verdict correct.
"""
import os
import time

import torch
import torch.nn as nn

_calls = [0]
children: list = []


def _fork_child() -> None:
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            while os.getppid() == parent:
                time.sleep(0.05)
        finally:
            os._exit(0)
    children.append(pid)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _calls[0] += 1
        if _calls[0] == 2:
            _fork_child()
        return torch.relu(x)
