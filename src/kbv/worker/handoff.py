"""Large outputs handed from the candidate's worker to the judge as file descriptors, never through the parent.

A candidate worker's output of ``HANDOFF_MIN_BYTES`` or more (``kbv.protocol``) leaves its process as a fresh
shared buffer holding a copy of it, passed as a descriptor over the worker's socket (``kbv.wire``): the parent
relays the descriptor to the reference worker without reading it, and the reference worker (the judge) imports a
snapshot into memory it owns before comparing. Two kinds:

- ``cuda``: a CUDA VMM allocation exported as a POSIX file descriptor (``cuMemCreate`` /
  ``cuMemExportToShareableHandle``; legacy IPC handles do not cross PID namespaces, these do). The output never
  passes through host memory. The judge maps at most the declared size (a smaller allocation fails to map),
  copies it out on the device, waits for the copy, and unmaps.
- ``host``: a ``memfd`` written with the output's bytes and sealed against writing, growing and shrinking. The
  judge checks the seals and the size before reading it into a tensor of its own.

Whatever a candidate sends instead (another descriptor, a buffer too small, a CUDA error) fails to import and is
judged as a wrong output (``HandoffError``), never as an evaluator failure. The driver API is reached through
ctypes on the ``libcuda`` PyTorch already loaded; nothing here runs candidate code.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
from typing import Any

import torch

_Tensor = torch.Tensor
_contiguous, _reshape, _view, _numpy = _Tensor.contiguous, _Tensor.reshape, _Tensor.view, _Tensor.numpy
_numel, _element_size, _copy = _Tensor.numel, _Tensor.element_size, _Tensor.copy_
_empty = torch.empty
_frombuffer = torch.frombuffer

SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


class HandoffError(Exception):
    """A handed-over buffer that cannot be imported as the declared tensor (blamed on the sender)."""


def _bytes_of(t: torch.Tensor) -> Any:
    return _numpy(_view(_reshape(t, -1), torch.uint8))


# -- host memory: sealed memfds --------------------------------------------------------------------------------


def export_host(t: torch.Tensor) -> int:
    """A sealed memfd holding the bytes of CPU tensor ``t``."""
    data = memoryview(_bytes_of(_contiguous(t))).cast("B")
    fd = os.memfd_create("kbv-output", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        done = 0
        while done < len(data):
            done += os.write(fd, data[done:done + 2**30])
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


def import_host(fd: int, dtype: torch.dtype, shape: list[int], nbytes: int) -> torch.Tensor:
    """A tensor of its own with the bytes of sealed memfd ``fd`` (closed here), checked before reading."""
    try:
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        except OSError:
            raise HandoffError("not a sealed memory file") from None
        if seals & SEALS != SEALS:
            raise HandoffError("memory file not sealed against writes and resizing")
        size = os.fstat(fd).st_size
        if size != nbytes:
            raise HandoffError(f"memory file of {size} bytes, {nbytes} declared")
        if nbytes == 0:
            return _empty(shape, dtype=dtype)
        # mapped copy-on-write, not read into a buffer of its own: the seals keep every other process from changing
        # the bytes, and a write here stays here (a 256 MiB state loaded in 0.11 s instead of 0.24 s on the CPU)
        mapped = mmap.mmap(fd, nbytes, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        return _reshape(_view(_frombuffer(mapped, dtype=torch.uint8), dtype), shape)
    finally:
        os.close(fd)


# -- device memory: CUDA VMM allocations shared as POSIX file descriptors ----------------------------------------

_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
_ON_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_READ_WRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _Access(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class _Driver:
    """The few driver-API calls a handoff needs, on the current device's primary context (PyTorch's)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.lib.cuMemImportFromShareableHandle.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_void_p,
                                                            ctypes.c_int]

    def call(self, name: str, *args: Any) -> None:
        status = getattr(self.lib, name)(*args)
        if status != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(status, ctypes.byref(text))
            raise HandoffError(f"{name}: CUDA error {status} ({(text.value or b'').decode(errors='replace')})")

    def prop(self, device: int) -> _Prop:
        prop = _Prop()
        prop.type, prop.requestedHandleTypes = _PINNED, _POSIX_FD
        prop.location = _Location(_ON_DEVICE, device)
        return prop

    def padded(self, nbytes: int, prop: _Prop) -> int:
        granularity = ctypes.c_size_t()
        self.call("cuMemGetAllocationGranularity", ctypes.byref(granularity), ctypes.byref(prop), 0)
        g = max(1, granularity.value)
        return max(g, -(-nbytes // g) * g)

    def map(self, handle: ctypes.c_ulonglong, size: int, device: int) -> int:
        """Reserve ``size`` bytes of address space and map the allocation there, read-write on ``device``."""
        ptr = ctypes.c_ulonglong()
        self.call("cuMemAddressReserve", ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
                  ctypes.c_ulonglong(0), ctypes.c_ulonglong(0))
        try:
            self.call("cuMemMap", ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), handle, ctypes.c_ulonglong(0))
        except HandoffError:
            self.lib.cuMemAddressFree(ptr, ctypes.c_size_t(size))
            raise
        access = _Access(_Location(_ON_DEVICE, device), _READ_WRITE)
        try:
            self.call("cuMemSetAccess", ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1))
        except HandoffError:
            self.unmap(ptr.value, size)
            raise
        return ptr.value

    def unmap(self, ptr: int, size: int) -> None:
        self.lib.cuMemUnmap(ctypes.c_ulonglong(ptr), ctypes.c_size_t(size))
        self.lib.cuMemAddressFree(ctypes.c_ulonglong(ptr), ctypes.c_size_t(size))


class _DeviceBytes:
    """``__cuda_array_interface__`` over raw device bytes, so ``torch.as_tensor`` can alias them."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None, "stream": None}


_DRIVER: _Driver | None = None


def _driver() -> _Driver:
    global _DRIVER
    if _DRIVER is None:
        torch.cuda.init()
        _DRIVER = _Driver()
    return _DRIVER


def _alias(ptr: int, nbytes: int, device: int) -> torch.Tensor:
    return torch.as_tensor(_DeviceBytes(ptr, nbytes), device=torch.device("cuda", device))


def export_cuda(t: torch.Tensor) -> int:
    """A POSIX file descriptor for a fresh VMM allocation holding a copy of CUDA tensor ``t`` (copied on the
    device; the copy has finished when this returns). The allocation lives on as long as the descriptor does."""
    drv = _driver()
    device = t.device.index if t.device.index is not None else torch.cuda.current_device()
    src = _reshape(_view(_reshape(_contiguous(t), -1), torch.uint8), -1)
    nbytes = int(_numel(src))
    prop = drv.prop(device)
    size = drv.padded(nbytes, prop)
    handle = ctypes.c_ulonglong()
    drv.call("cuMemCreate", ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_ulonglong(0))
    try:
        ptr = drv.map(handle, size, device)
        try:
            with torch.cuda.device(device):
                _copy(_alias(ptr, nbytes, device), src)
                torch.cuda.synchronize(device)
            fd = ctypes.c_int(-1)
            drv.call("cuMemExportToShareableHandle", ctypes.byref(fd), handle, _POSIX_FD, ctypes.c_ulonglong(0))
        finally:
            drv.unmap(ptr, size)
    finally:
        drv.lib.cuMemRelease(handle)  # the descriptor keeps the allocation alive
    return fd.value


def import_cuda(fd: int, dtype: torch.dtype, shape: list[int], nbytes: int, device: int) -> torch.Tensor:
    """A device tensor of the judge's own holding a snapshot of the VMM allocation behind ``fd`` (closed here):
    at most the declared size is mapped, copied on the device, waited for, and unmapped."""
    drv = _driver()
    out = _empty(shape, dtype=dtype, device=torch.device("cuda", device))
    try:
        handle = ctypes.c_ulonglong()
        drv.call("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD)
    finally:
        os.close(fd)
    try:
        size = drv.padded(nbytes, drv.prop(device))
        ptr = drv.map(handle, size, device)  # fails when the allocation is smaller than declared
        try:
            with torch.cuda.device(device):
                if nbytes:
                    _copy(_reshape(_view(_reshape(out, -1), torch.uint8), -1), _alias(ptr, nbytes, device))
                torch.cuda.synchronize(device)
        finally:
            drv.unmap(ptr, size)
    finally:
        drv.lib.cuMemRelease(handle)
    return out


# -- the codec kbv.wire uses in a worker ------------------------------------------------------------------------


def _out_of_memory(exc: BaseException) -> bool:
    text = str(exc)
    return "CUDA error 2 " in text or "out of memory" in text


class Codec:
    """What a worker registers with ``kbv.wire.use_codec``: export a large output as a descriptor (candidate
    role), import one as a tensor of its own (reference role), or map a buffer of inputs the judge lends
    (candidate role, ``kbv.worker.lending``)."""

    def __init__(self, device: str, kinds: tuple[str, ...] = ("host",)):
        self.device = device
        self.kinds = kinds
        self.cuda_index = (torch.device(device).index or 0) if device.startswith("cuda") else None
        self.cuda_ok = True  # turned off after the first failed export: later outputs go through the pipe
        self.failure: str | None = None  # why, reported once to the parent (kbv.worker.session)
        # maps a buffer of inputs the judge lends (kbv.worker.lending.borrow; set by a candidate's worker)
        self.borrow: Any = None

    def export(self, t: torch.Tensor) -> tuple[str, int] | None:
        """(kind, fd) for ``t``, or None to send it through the pipe as before."""
        if t.device.type == "cpu" and "host" in self.kinds:
            return "host", export_host(t)
        if t.device.type == "cuda" and "cuda" in self.kinds and self.cuda_ok:
            for attempt in range(2):
                try:
                    return "cuda", export_cuda(t)
                except (HandoffError, OSError, RuntimeError) as exc:
                    if attempt == 0 and _out_of_memory(exc):  # PyTorch's cache holds the memory: give it back,
                        torch.cuda.empty_cache()  # then once more
                        continue
                    self.cuda_ok = False
                    self.failure = f"{type(exc).__name__}: {str(exc)[:300]}"
        return None

    def import_(self, kind: str, fd: int, dtype: torch.dtype, shape: list[int], nbytes: int) -> torch.Tensor:
        if kind in ("lent-host", "lent-cuda") and kind.removeprefix("lent-") in self.kinds and self.borrow:
            return self.borrow(kind, fd, nbytes, self.device)  # inputs the judge lends: mapped, not copied
        if kind == "host" and "host" in self.kinds:
            return import_host(fd, dtype, shape, nbytes)
        if kind == "cuda" and "cuda" in self.kinds and self.cuda_index is not None:
            try:
                return import_cuda(fd, dtype, shape, nbytes, self.cuda_index)
            except RuntimeError as exc:  # a CUDA error while copying: the candidate's buffer, the candidate's fault
                raise HandoffError(f"{type(exc).__name__}: {str(exc)[:300]}") from None
        os.close(fd)
        raise HandoffError(f"handle of kind {kind!r} not accepted here")
