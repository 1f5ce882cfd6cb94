"""Peak memory of one forward call beyond what was allocated before it.

CUDA: the caching allocator's peak (``reset_peak_memory_stats`` / ``max_memory_allocated``) minus the bytes
allocated before the call. CPU (best effort): the process's resident-set high-water mark (``VmHWM``, reset through
``/proc/self/clear_refs``) minus the resident set before the call, after returning freed heap to the OS with
``malloc_trim``. It counts every allocation of the process, PyTorch's or not, but memory the C allocator reuses
without growing the resident set is invisible; ``None`` where /proc is unavailable.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path
from typing import Any, Callable

import torch


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _malloc_trim() -> None:
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_bytes(fn: Callable[[], Any], device: str) -> dict[str, Any]:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        del out
        return {"peak_bytes": int(peak), "method": "torch.cuda.max_memory_allocated"}
    _malloc_trim()
    before = _status_kib("VmRSS")
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return {"peak_bytes": None, "method": "unavailable"}
    out = fn()
    high = _status_kib("VmHWM")
    del out
    if before is None or high is None:
        return {"peak_bytes": None, "method": "unavailable"}
    return {"peak_bytes": max(0, high - before) * 1024, "method": "VmHWM delta (best effort)"}
