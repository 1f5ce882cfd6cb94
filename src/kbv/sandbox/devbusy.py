"""How busy each process kept a GPU, read by the parent from NVML's per-process utilisation samples, not by the
worker.

``samples(pids, since)`` lists the driver's samples taken after ``since`` (seconds since the epoch) that name one of
``pids``, each with its time after ``since`` and its SM share; ``busy(pids, since)`` counts them per pid, with the
highest share of the GPU's streaming multiprocessors in any of them. The parent asks
this for a timing worker that has no command while the other role is timed: kernels it queued before its last
reply, or that a thread of it launches afterwards, run on the GPU beside the other role's timed calls (a stopped or
idle process's kernels still run), which its CPU clock (``idle_work``) does not show. The driver samples at its own
period (about a sixth of a second), so a short burst can fall between samples: the figure leans low. None where NVML
is missing or refuses.
"""

from __future__ import annotations

import ctypes
from typing import Iterable

from kbv.sandbox import devmem

_NVML_SUCCESS = 0
_NVML_ERROR_INSUFFICIENT_SIZE = 7
_NVML_ERROR_NOT_FOUND = 6  # no sample after the timestamp


class _Sample(ctypes.Structure):
    """``nvmlProcessUtilizationSample_t``."""

    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


def samples(pids: Iterable[int], since: float) -> list[tuple[int, float, int]] | None:
    """The driver's samples taken after ``since`` that name a pid of ``pids``, over every GPU: (pid, seconds from
    ``since`` to the sample's timestamp, SM utilisation in percent). None where NVML cannot be asked."""
    lib = devmem.nvml()
    if lib is None:
        return None
    wanted = {int(p) for p in pids}
    after = ctypes.c_ulonglong(int(since * 1e6))
    found: list[tuple[int, float, int]] = []
    with devmem.LOCK:
        handles = devmem.device_handles(lib)
        if handles is None:
            return None
        for handle in handles:
            n = ctypes.c_uint(0)
            status = lib.nvmlDeviceGetProcessUtilization(handle, None, ctypes.byref(n), after)
            if status == _NVML_ERROR_NOT_FOUND or (status == _NVML_SUCCESS and n.value == 0):
                continue
            if status not in (_NVML_SUCCESS, _NVML_ERROR_INSUFFICIENT_SIZE):
                return None
            buffer = (_Sample * max(1, n.value))()
            status = lib.nvmlDeviceGetProcessUtilization(handle, buffer, ctypes.byref(n), after)
            if status == _NVML_ERROR_NOT_FOUND:
                continue
            if status != _NVML_SUCCESS:
                return None
            found += [(int(x.pid), x.timeStamp / 1e6 - since, int(x.smUtil)) for x in buffer[:n.value]
                      if x.pid in wanted]
    return found


def busy(pids: Iterable[int], since: float) -> dict[int, tuple[int, int]] | None:
    """Per pid of ``pids``: (samples after ``since`` naming it, the most SM utilisation in percent among them), over
    every GPU; (0, 0) for a pid no sample names. None where NVML cannot be asked."""
    pids = [int(p) for p in pids]
    found = samples(pids, since)
    if found is None:
        return None
    wanted = {p: (0, 0) for p in pids}
    for pid, _, sm in found:
        seen, most = wanted[pid]
        wanted[pid] = (seen + 1, max(most, sm))
    return wanted
