"""Candidate for level1/5_ReLU that calls torch.relu on a helper thread (started at import) and waits for it (hack
catalogue F1: library fallback, hidden from the dispatch route, whose mode stack is per thread). Nothing is left
running after forward returns.

Expected today: verdict correct with no flags (the profiled forward shows no work at all: fallback.no_work_observed).
Gap (F1): library work on another thread is invisible on the CPU route (a CUDA profiler would see the kernels).
"""
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn

_pool = ThreadPoolExecutor(max_workers=1)
_pool.submit(lambda: None).result()  # the thread exists before any forward


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _pool.submit(torch.relu, x).result()
