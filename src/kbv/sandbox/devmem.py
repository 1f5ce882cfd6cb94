"""Device memory each process holds, read by the parent from NVML (the driver's own count), not by the worker.

``used_by(pids)`` asks NVML for the compute processes on every GPU and returns the bytes each of the given pids
holds: its context, every allocation (PyTorch's cached blocks, raw ``cudaMalloc``, VMM) and nothing of any other
process. A worker cannot change what the driver reports for it, so this figure can add a flag that the worker's
own (``kbv.worker.memory``) would hide. ``free_bytes(gpu)`` is the device's free memory, every process's holdings
left out (the room a stage that nearly fills the GPU makes: ``kbv.eval.pair``). Through ``ctypes`` on
``libnvidia-ml.so.1``, the library ``nvidia-smi`` uses; ``None`` where it is missing or refuses (no GPU, no driver, a
container that hides other pids).
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


def nvml() -> ctypes.CDLL | None:
    """NVML, initialised once per process (shared with ``kbv.sandbox.devbusy``); None without it."""
    loaded = _library()
    return loaded[0] if loaded is not None else None


LOCK = _LOCK  # hold it around any NVML query


def device_handles(lib: ctypes.CDLL) -> list[ctypes.c_void_p] | None:
    """NVML's handle of every GPU (under ``LOCK``); None where it cannot list them."""
    count = ctypes.c_uint()
    if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != _NVML_SUCCESS:
        return None
    handles = []
    for index in range(count.value):
        handle = ctypes.c_void_p()
        if lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != _NVML_SUCCESS:
            return None
        handles.append(handle)
    return handles


def device_handle(lib: ctypes.CDLL, gpu: int | None) -> ctypes.c_void_p | None:
    """NVML's handle of GPU ``gpu`` (NVML's index, as ``nvidia-smi -i``; the first where None; under ``LOCK``);
    None where there is no such GPU or NVML cannot list them."""
    handles = device_handles(lib)
    index = gpu or 0
    return handles[index] if handles is not None and index < len(handles) else None


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
        handles = device_handles(lib)
        if handles is None:
            return None
        for handle in handles:
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


class _Memory(ctypes.Structure):
    """``nvmlMemory_t``: the device's total, free and used bytes."""

    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def free_bytes(gpu: int | None) -> int | None:
    """The device memory free on GPU ``gpu`` (NVML's index, as ``nvidia-smi -i``; the first where None), every
    process's holdings left out; None where NVML cannot be asked."""
    loaded = _library()
    if loaded is None:
        return None
    lib = loaded[0]
    memory = _Memory()
    with _LOCK:
        handle = device_handle(lib, gpu)
        if handle is None or lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != _NVML_SUCCESS:
            return None
    return int(memory.free)


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



class Watch:
    """The most device memory named processes held while the watch ran, sampled from NVML every ``period`` seconds
    on a thread of the parent: per name, and their sum at one sample (``together``), what a stage really needed
    against what the gate expected (``kbv.eval.gate``). ``result()`` is None where NVML cannot be asked; a peak that
    falls between two samples is missed, so the figures lean low."""

    def __init__(self, pids: dict[str, int], period: float = 0.05,
                 read: Callable[[Iterable[int]], dict[int, int] | None] | None = None,
                 tree: Callable[[int], list[int]] | None = None) -> None:
        self.pids = {name: int(pid) for name, pid in pids.items()}
        self.period = period
        self._read = read or used_by
        self._tree = tree  # each name's processes from its root pid at every sample (a sandboxed worker's CUDA
        # runs in the inner process of its PID namespace); None: the root alone
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.held: dict[str, int] = {}
        self.together = 0
        self.samples = 0
        self.failed = False

    def _sample(self) -> None:
        members = {name: (self._tree(pid) if self._tree else [pid]) for name, pid in self.pids.items()}
        found = self._read([pid for pids in members.values() for pid in pids])
        if found is None:
            self.failed = True
            return
        self.samples += 1
        held = {name: sum(found.get(pid, 0) for pid in pids) for name, pids in members.items()}
        for name, used in held.items():
            self.held[name] = max(self.held.get(name, 0), used)
        self.together = max(self.together, sum(held.values()))

    def _loop(self) -> None:
        while not self._stop.wait(self.period) and not self.failed:
            self._sample()

    def __enter__(self) -> Watch:
        self._sample()
        if not self.failed:
            self._thread = threading.Thread(target=self._loop, name="kbv-devmem-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def result(self) -> dict[str, object] | None:
        """``held_max`` per name, ``together_max`` and the number of samples; None without a figure."""
        if self.failed or not self.samples:
            return None
        return {"held_max": dict(self.held), "together_max": self.together, "samples": self.samples}
