"""CUDA candidate for level1/5_ReLU that keeps a 1 GiB workspace allocated with the CUDA driver API through ctypes
(cuMemAlloc), outside PyTorch's caching allocator, and writes it on every call (hack catalogue M6: memory hidden
from the torch allocator).

Expected today: verdict correct with flag fallback and no memory flag: kbv's CUDA memory measure is
torch.cuda.max_memory_allocated, which never sees the workspace. Gap (M6): no cudaMemGetInfo/NVML measure (then flag
memory_above_reference).
"""
import ctypes

import torch
import torch.nn as nn

_WORKSPACE_BYTES = 1 << 30
_cuda = None
_workspace = ctypes.c_uint64(0)


def _touch_workspace() -> None:
    global _cuda
    if _cuda is None:
        _cuda = ctypes.CDLL("libcuda.so.1")
        rc = _cuda.cuMemAlloc_v2(ctypes.byref(_workspace), ctypes.c_size_t(_WORKSPACE_BYTES))
        if rc != 0:
            raise RuntimeError(f"cuMemAlloc_v2 failed: {rc}")
    rc = _cuda.cuMemsetD8_v2(_workspace, ctypes.c_ubyte(1), ctypes.c_size_t(_WORKSPACE_BYTES))
    if rc != 0:
        raise RuntimeError(f"cuMemsetD8_v2 failed: {rc}")


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _touch_workspace()
        return torch.relu(x)
