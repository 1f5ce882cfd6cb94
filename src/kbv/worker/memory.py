"""Peak memory of one forward call beyond what was allocated before it.

CUDA: the caching allocator's peak (``reset_peak_memory_stats`` / ``max_memory_allocated``) minus the bytes
allocated before the call. CPU (best effort): the process's resident-set high-water mark (``VmHWM``, reset through
``/proc/self/clear_refs``) minus the resident set before the call, after returning freed heap to the OS with
``malloc_trim``, the least over a few calls. It counts every allocation of the process, PyTorch's or not, but memory the C allocator reuses
without growing the resident set is invisible; ``None`` where /proc is unavailable.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from pathlib import Path
from typing import Any, Callable

import torch

CPU_REPEATS = 3  # stray allocations only add to a resident-set peak: the least of a few calls is the cleanest


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    """The C library, looked up once per process (``find_library`` costs about 1.6 ms a call)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def trim() -> None:
    """Return freed heap memory to the system (so a later rise of the resident set is the next call's)."""
    _malloc_trim()


def _malloc_trim() -> None:
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


# glibc's mallopt parameters and the two settings a CPU worker switches between
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_PERTURB = -1, -3, -6
MEASURE_MMAP_BYTES = 64 * 1024  # measuring: every C allocation of this size or more is its own mapping...
MEASURE_TRIM_BYTES = 128 * 1024  # ...and freed heap beyond this goes back to the OS
TIMING_MMAP_BYTES = 32 * 2**20  # timing: glibc's own ceiling for the threshold (DEFAULT_MMAP_THRESHOLD_MAX)
TIMING_TRIM_BYTES = 512 * 2**20


def _set_thresholds(mmap_bytes: int, trim_bytes: int) -> None:
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(_M_MMAP_THRESHOLD, mmap_bytes)  # setting it also turns off glibc's dynamic adjustment
        libc.mallopt(_M_TRIM_THRESHOLD, trim_bytes)


def timing_allocator() -> None:
    """Fixed C-allocator thresholds for timing, as a warmed-up PyTorch process has them: buffers up to 32 MiB come
    from (and return to) the heap, so a timed call pays no page faults for its outputs.

    glibc raises its mmap threshold as large blocks are freed; fixing it at that ceiling makes every worker, with
    any history, allocate alike. Without it each output of 64 KiB or more would be a fresh mapping whose page
    faults cost ten times a small kernel's own work (seen on the CPU: 0.13 ms against 0.013 ms for a 256 KiB ReLU),
    and timings would depend on whether a block happened to be reused. Called once per CPU worker, before any
    candidate code, and again after each memory measurement.
    """
    _set_thresholds(TIMING_MMAP_BYTES, TIMING_TRIM_BYTES)


def measuring_allocator() -> None:
    """Thresholds for the memory measurement: every C allocation of 64 KiB or more is its own mapping, returned to
    the OS when freed, so one call's large buffers show in the resident set's rise whatever the heap held before
    (two processes with different histories then show the same peak for the same forward)."""
    _set_thresholds(MEASURE_MMAP_BYTES, MEASURE_TRIM_BYTES)


def peak_bytes(fn: Callable[[], Any], device: str) -> dict[str, Any]:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.empty_cache()  # memory in use means held: blocks cached but free (autotuning, an earlier larger
        in_use_before = device_in_use(device)  # call) differ between processes running the same code
        out = fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        torch.cuda.empty_cache()  # what the output and the candidate's own buffers hold stays counted
        in_use_after = device_in_use(device)
        del out
        return {"peak_bytes": int(peak), "method": "torch.cuda.max_memory_allocated",
                "device_in_use": in_use_after, "device_in_use_call_delta": in_use_after - in_use_before}
    measuring_allocator()
    try:
        return _cpu_peak(fn)
    finally:
        timing_allocator()


def _cpu_peak(fn: Callable[[], Any]) -> dict[str, Any]:
    peaks = []
    for _ in range(CPU_REPEATS):
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
        peaks.append(max(0, high - before) * 1024)
    return {"peak_bytes": min(peaks), "method": f"VmHWM delta, least of {CPU_REPEATS} calls (best effort)"}


POISON_COPIES = 2  # CUDA: blocks of each size poisoned before a call


def poison_freed(device: str, byte: int, sizes: list[int], copies: int = POISON_COPIES) -> int:
    """Make the memory the next call allocates hold ``byte``. Returns the bytes poisoned up front.

    CPU: glibc's ``M_PERTURB`` fills every allocation (``malloc``/``posix_memalign``, heap or mapping, any size)
    with the byte from now on, and every freed block with its complement. CUDA: blocks of the given sizes
    (``copies`` of each) are allocated, filled and freed, so the caching allocator hands them to the next
    allocations of those sizes; best effort, as the allocator may still return other cached memory, and only as many
    blocks as the device has room for (the rest are left out, never an error of the candidate's)."""
    if not device.startswith("cuda"):
        libc = _libc()
        if libc is not None and hasattr(libc, "mallopt"):
            libc.mallopt(_M_PERTURB, (~byte & 0xFF) or 0x100)  # M_PERTURB: allocations get ~value's low byte
        return 0
    blocks = []
    total = 0
    try:
        for size in sizes:
            for _ in range(copies):
                if size <= 0:
                    continue
                block = torch.empty(int(size), dtype=torch.uint8, device=device)
                block.fill_(byte)
                blocks.append(block)
                total += int(size)
    except torch.OutOfMemoryError:  # kbv's own blocks, not the candidate's doing: as many as fit (the caller
        pass  # records the shortfall); on an 80 GB card two 6 GiB blocks beside a shared GPU's other pairs did not
    torch.cuda.synchronize()
    del blocks
    return total


CANARY_BYTES = 16 * 1024  # above glibc's per-thread cache (whose blocks M_PERTURB does not fill), below mmap


def perturb_canary() -> int | None:
    """The byte a fresh heap allocation holds right now, if every byte of it is the same (``M_PERTURB`` in force),
    else None: taken before and after a poisoned call, a change means the call turned the poison off."""
    libc = _libc()
    if libc is None or not hasattr(libc, "malloc"):
        return None
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    ptr = libc.malloc(CANARY_BYTES)
    if not ptr:
        return None
    try:
        data = ctypes.string_at(ptr, CANARY_BYTES)
    finally:
        libc.free(ptr)
    return data[0] if data.count(data[:1]) == CANARY_BYTES else None


def device_in_use(device: str) -> int | None:
    """Bytes of device memory in use by anyone (``cudaMemGetInfo``: total - free); None on the CPU."""
    if not device.startswith("cuda"):
        return None
    free, total = torch.cuda.mem_get_info()
    return int(total - free)
