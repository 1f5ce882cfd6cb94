"""Device memory each process holds, read by the parent from NVML (the driver's own count), not by the worker.

``used_by(pids)`` asks NVML for the compute processes on every GPU and returns the bytes each of the given pids
holds: its context, every allocation (PyTorch's cached blocks, raw ``cudaMalloc``, VMM) and nothing of any other
process. A worker cannot change what the driver reports for it, so this figure can add a flag that the worker's
own (``kbv.worker.memory``) would hide. Through ``ctypes`` on ``libnvidia-ml.so.1``, the library ``nvidia-smi``
uses; ``None`` where it is missing or refuses (no GPU, no driver, a container that hides other pids).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from typing import Callable, Iterable

_NVML_SUCCESS = 0
_NVML_ERROR_INSUFFICIENT_SIZE = 7
_MAX_PROCESSES = 1024
_LOCK = threading.Lock()  # NVML handles are process-wide; one query at a time


class _ProcessInfo(ctypes.Structure):
    """``nvmlProcessInfo_t`` as the ``_v3`` / ``_v2`` queries fill it (NVML 11.5 and later)."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


@functools.lru_cache(maxsize=1)
def _library() -> tuple[ctypes.CDLL, Callable[..., int]] | None:
    """NVML, initialised once per process, and its newest process query; None without it."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    init = getattr(lib, "nvmlInit_v2", None)
    query = getattr(lib, "nvmlDeviceGetComputeRunningProcesses_v3", None) or getattr(
        lib, "nvmlDeviceGetComputeRunningProcesses_v2", None)
    if init is None or query is None or init() != _NVML_SUCCESS:
        return None
    return lib, query


def available() -> bool:
    return _library() is not None


def entries(pids: Iterable[int]) -> list[tuple[int, int]] | None:
    """NVML's compute-process entries of ``pids`` on every GPU, as listed: (pid, bytes), one per entry (a pid may be
    listed more than once: once per GPU, and as the driver sees fit); None where NVML cannot be asked or reports no
    memory figure."""
    loaded = _library()
    if loaded is None:
        return None
    lib, query = loaded
    wanted = {int(p) for p in pids}
    found: list[tuple[int, int]] = []
    with _LOCK:
        count = ctypes.c_uint()
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != _NVML_SUCCESS:
            return None
        for index in range(count.value):
            handle = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != _NVML_SUCCESS:
                return None
            infos = (_ProcessInfo * _MAX_PROCESSES)()
            n = ctypes.c_uint(_MAX_PROCESSES)
            status = query(handle, ctypes.byref(n), infos)
            if status == _NVML_ERROR_INSUFFICIENT_SIZE or status != _NVML_SUCCESS:
                return None
            for info in infos[:n.value]:
                if info.pid in wanted:
                    if info.usedGpuMemory >= 2**63:  # NVML_VALUE_NOT_AVAILABLE (a restricted container)
                        return None
                    found.append((int(info.pid), int(info.usedGpuMemory)))
    return found


def used_by(pids: Iterable[int]) -> dict[int, int] | None:
    """Bytes of device memory each of ``pids`` holds, summed over NVML's entries on every GPU (0 for a pid NVML
    does not list); None where NVML cannot be asked or reports no memory figure."""
    wanted = [int(p) for p in pids]
    listed = entries(wanted)
    if listed is None:
        return None
    found = {pid: 0 for pid in wanted}
    for pid, used in listed:
        found[pid] += used
    return found
