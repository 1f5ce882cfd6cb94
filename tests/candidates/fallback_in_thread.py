"""Candidate for level1/5_ReLU that calls torch.relu on a helper thread (started at import) and waits for it (hack
catalogue F1: library fallback, hidden from the dispatch route, whose mode stack is per thread). Nothing is left
running after forward returns.

Expected: verdict rejected with flags background_threads (its pool's thread is alive from the import on) and
fallback (the all-threads CPU profiler sees aten::relu on the helper thread; on CUDA the GPU route sees its kernel).
"""
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn

_pool = ThreadPoolExecutor(max_workers=1)
_pool.submit(lambda: None).result()  # the thread exists before any forward


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _pool.submit(torch.relu, x).result()
