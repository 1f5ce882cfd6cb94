"""Inputs the judge lends to the candidate: one shared buffer, created by the reference's worker, that holds every
tensor input of a correctness trial between guard bands.

The reference's worker (the judge, which never runs candidate code) draws the trial's inputs as always, writes a
copy of them into a fresh shared buffer with a band of pattern before and after each, and sends the buffer as a
descriptor (relayed by the parent unread). The candidate's worker maps the same memory and calls forward on views
of it. After the call the judge reads the buffer back itself: a changed band is a write out of bounds, a changed
input a write into an input. Neither depends on anything the candidate's process reports, so patching kbv's code
there (the guard check, the tamper report) blinds nothing.

Two kinds of buffer, as for outputs (``kbv.worker.handoff``): ``lent-host``, a memfd sealed against growing and
shrinking (never against writes: the candidate may write, and the judge sees it), and ``lent-cuda``, a CUDA VMM
allocation shared as a POSIX descriptor, mapped read-write in both processes.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
from typing import Any, Iterator

import torch

from kbv import wire
from kbv.worker import handoff
from kbv.worker.guard import pattern as band_pattern

_Tensor = torch.Tensor
LENT_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
ALIGN = 256  # every input starts at a multiple of this (the guard size is rounded to it too)
# device comparisons go this many bytes at a time: torch.equal's and ne's temporary is one bool per word compared
# (a 6 GiB input at once: 0.75 GiB more on a card that the 6 GiB activations already fill)
EQUAL_CHUNK_BYTES = 256 * 2**20
_memcmp = ctypes.CDLL(None).memcmp  # the C library's, already in this process: a host comparison at memory speed
_memcmp.restype, _memcmp.argtypes = ctypes.c_int, (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class LendError(Exception):
    """Inputs that cannot be lent (not tensors the buffer can hold, or no shared memory here): the trial runs the old
    way, each worker drawing its own inputs."""


def _host_buffer(nbytes: int) -> tuple[int, torch.Tensor]:
    """A memfd of ``nbytes`` sealed against resizing, and a uint8 tensor over a shared mapping of it."""
    fd = os.memfd_create("kbv-lent", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, nbytes)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, LENT_SEALS)
        return fd, torch.frombuffer(mmap.mmap(fd, nbytes), dtype=torch.uint8)
    except BaseException:
        os.close(fd)
        raise


class _Mapping:
    """A VMM allocation mapped read-write into this process, unmapped (after the device is idle) when the last
    tensor over it is gone: ``torch.as_tensor`` keeps this object alive as long as its storage."""

    def __init__(self, handle: ctypes.c_ulonglong, size: int, nbytes: int, device: int):
        drv = handoff._driver()
        self.handle, self.size, self.device = handle, size, device
        self.ptr = drv.map(handle, size, device)
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (self.ptr, False),
                                         "version": 3, "strides": None, "stream": None}

    def __del__(self) -> None:
        try:
            torch.cuda.synchronize(self.device)
            drv = handoff._driver()
            drv.unmap(self.ptr, self.size)
            drv.lib.cuMemRelease(self.handle)
        except Exception:
            pass


def _cuda_buffer(nbytes: int, device: int) -> tuple[int, torch.Tensor]:
    """A fresh VMM allocation of at least ``nbytes`` exported as a descriptor, and a uint8 tensor over it here."""
    drv = handoff._driver()
    prop = drv.prop(device)
    size = drv.padded(nbytes, prop)
    handle = ctypes.c_ulonglong()
    drv.call("cuMemCreate", ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_ulonglong(0))
    try:
        mapping = _Mapping(handle, size, nbytes, device)
    except BaseException:
        drv.lib.cuMemRelease(handle)
        raise
    fd = ctypes.c_int(-1)
    drv.call("cuMemExportToShareableHandle", ctypes.byref(fd), handle, handoff._POSIX_FD, ctypes.c_ulonglong(0))
    return fd.value, torch.as_tensor(mapping, device=torch.device("cuda", device))


def borrow(kind: str, fd: int, nbytes: int, device: str) -> torch.Tensor:
    """The candidate's side: the lent buffer behind ``fd`` (closed here) mapped into this process, as a uint8
    tensor of ``nbytes`` (writes land in the judge's buffer)."""
    try:
        if kind == "lent-host":
            return torch.frombuffer(mmap.mmap(fd, nbytes), dtype=torch.uint8)
        if kind == "lent-cuda" and device.startswith("cuda"):
            drv = handoff._driver()
            index = torch.device(device).index or 0
            handle = ctypes.c_ulonglong()
            drv.call("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), handoff._POSIX_FD)
            try:
                mapping = _Mapping(handle, drv.padded(nbytes, drv.prop(index)), nbytes, index)
            except BaseException:
                drv.lib.cuMemRelease(handle)
                raise
            return torch.as_tensor(mapping, device=torch.device("cuda", index))
        raise handoff.HandoffError(f"lent buffer of kind {kind!r} not accepted here")
    finally:
        os.close(fd)


def layout(args: list[Any], guard_bytes: int) -> tuple[list[dict[str, Any]], int, int]:
    """Where each input goes in the buffer: ``[{"tensor": {offset, dtype, shape, nbytes}} | {"value": v}]`` (each
    tensor with a band of its own before and after it), the band size used and the buffer's size; LendError for an
    input the buffer cannot hold (a tensor that is not plain, contiguous and of a wire dtype; a value that is not a
    JSON scalar)."""
    guard = max(ALIGN, guard_bytes - guard_bytes % ALIGN)
    entries: list[dict[str, Any]] = []
    offset = 0
    for arg in args:
        if type(arg) is _Tensor:
            dtype = str(arg.dtype).removeprefix("torch.")
            if dtype not in wire.DTYPE_NAMES or not _Tensor.is_contiguous(arg) or arg.requires_grad:
                raise LendError(f"an input that cannot be lent: {dtype}, contiguous {_Tensor.is_contiguous(arg)}")
            nbytes = _Tensor.numel(arg) * _Tensor.element_size(arg)
            start = offset + guard
            entries.append({"tensor": {"offset": start, "dtype": dtype, "shape": list(arg.shape),
                                       "nbytes": nbytes}})
            offset = start + -(-nbytes // ALIGN) * ALIGN + guard
        elif arg is None or isinstance(arg, (bool, int, float, str)):
            entries.append({"value": arg})
        else:
            raise LendError(f"an input of type {type(arg).__name__} cannot be lent")
    return entries, guard, max(offset, ALIGN)


def views(buffer: torch.Tensor, entries: list[dict[str, Any]]) -> list[Any]:
    """The inputs as views of ``buffer`` (tensors) or as given (values)."""
    out: list[Any] = []
    for entry in entries:
        if "tensor" in entry:
            t = entry["tensor"]
            start, nbytes = int(t["offset"]), int(t["nbytes"])
            if start < 0 or start + nbytes > _Tensor.numel(buffer):
                raise handoff.HandoffError("a lent input outside its buffer")
            view = _Tensor.view(buffer[start:start + nbytes], wire.dtype_of(t["dtype"]))
            out.append(_Tensor.view(view, [int(s) for s in t["shape"]]))
        else:
            out.append(entry.get("value"))
    return out


def _bands(entry: dict[str, Any], guard: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The byte ranges of a lent tensor's band before it and after it (the after band starts at its last byte)."""
    start, nbytes = int(entry["offset"]), int(entry["nbytes"])
    end = start + nbytes
    return (start - guard, start), (end, start + -(-nbytes // ALIGN) * ALIGN + guard)


class Lent:
    """The judge's side of one trial's lent inputs: the buffer, the pattern in its bands, and the inputs as the
    reference drew them (its own tensors, which it computes on: the buffer holds a copy)."""

    def __init__(self, args: list[Any], guard_bytes: int, seed: int, device: str, kinds: tuple[str, ...]):
        self.entries, self.guard, nbytes = layout(args, guard_bytes)
        if device.startswith("cuda"):
            if "cuda" not in kinds:
                raise LendError("CUDA descriptors are off (KBV_CUDA_HANDOFF=0)")
            self.kind = "lent-cuda"
            self.fd, self.buffer = _cuda_buffer(nbytes, torch.device(device).index or 0)
        else:
            self.kind = "lent-host"
            self.fd, self.buffer = _host_buffer(nbytes)
        self.nbytes = nbytes
        self.args = args
        self.image: torch.Tensor | None = None  # on the CPU, once refilled: every byte the buffer should hold
        gen = torch.Generator().manual_seed(seed % 2**63)
        self.patterns: list[tuple[torch.Tensor, torch.Tensor]] = []  # per lent tensor: its two bands' bytes
        for entry, arg, view in zip(self.entries, args, views(self.buffer, self.entries)):
            if "tensor" not in entry:
                continue
            pair = []
            for lo, hi in _bands(entry["tensor"], self.guard):
                band = _Tensor.to(band_pattern(hi - lo, gen), self.buffer.device)
                _Tensor.copy_(self.buffer[lo:hi], band)
                pair.append(band)
            self.patterns.append((pair[0], pair[1]))
            _Tensor.copy_(view, arg)
        if device.startswith("cuda"):
            torch.cuda.synchronize(self.buffer.device)

    def message(self) -> dict[str, Any]:
        """What the candidate is sent: the descriptor (closed here once sent) and the layout."""
        fd, self.fd = self.fd, -1
        return {"buffer": wire.Handle(fd, self.kind, "uint8", [self.nbytes], self.nbytes, close_after_send=True),
                "layout": self.entries}

    def written_since_copied(self) -> list[int]:
        """The inputs the lender's own call wrote into since they were copied into the buffer: the reference's
        ``mutated_inputs``, read before the buffer is handed over (so the copy is still as drawn)."""
        return [i for i, (entry, view) in enumerate(zip(self.entries, views(self.buffer, self.entries)))
                if "tensor" in entry and not _same_bits(view, self.args[i])]

    def refill(self, args: list[Any]) -> None:
        """New contents of the same layout (the next timed call's inputs, ``args`` the reference's own draw, which
        ``check`` compares against); the bands are left as they are (a write into one stays seen). LendError where
        the inputs do not fit the layout the candidate was sent."""
        entries, _, _ = layout(args, self.guard)
        if entries != self.entries:  # values (not in the buffer) were sent with the layout once
            raise LendError("the next inputs do not fit the slot's layout")
        for entry, arg, view in zip(self.entries, args, views(self.buffer, self.entries)):
            if "tensor" in entry:
                _Tensor.copy_(view, arg)
        self.args = args
        if self.buffer.device.type == "cuda":
            torch.cuda.synchronize(self.buffer.device)
            return
        if self.image is None:  # a slot refilled call by call: its read-backs compare one image first
            self.image = self._expected()
        else:
            for entry, arg, view in zip(self.entries, args, views(self.image, self.entries)):
                if "tensor" in entry:
                    _Tensor.copy_(view, arg)

    def _expected(self) -> torch.Tensor:
        """The bytes the buffer holds where nothing wrote into it: zeros, each band's pattern, the inputs drawn."""
        image = _Tensor.new_zeros(self.buffer, (int(_Tensor.numel(self.buffer)),))
        patterns = iter(self.patterns)
        for entry, arg, view in zip(self.entries, self.args, views(image, self.entries)):
            if "tensor" in entry:
                for (lo, hi), band in zip(_bands(entry["tensor"], self.guard), next(patterns)):
                    _Tensor.copy_(image[lo:hi], band)
                _Tensor.copy_(view, arg)
        return image

    def check(self, reference_mutated: set[int]) -> dict[str, Any]:
        """After the candidate's call: bands that changed (``guard_violations``: input, bytes changed before and
        after it) and inputs that differ from the reference's own (``mutated_inputs``; one the reference itself
        wrote into is not compared)."""
        if self.buffer.device.type == "cuda":
            torch.cuda.synchronize(self.buffer.device)
            return self.check_in_one_read(reference_mutated)
        if self.image is not None and _equal_bytes(self.buffer, self.image):  # nothing written: one comparison
            return {"guard_violations": [], "mutated_inputs": []}  # (a timed slot's read-back, once per call)
        violations, mutated = [], []
        patterns = iter(self.patterns)
        for i, (entry, view) in enumerate(zip(self.entries, views(self.buffer, self.entries))):
            if "tensor" not in entry:
                continue
            counts = [0 if _equal_bytes(self.buffer[lo:hi], band) else int(_Tensor.sum(_Tensor.ne(self.buffer[lo:hi], band)))
                      for (lo, hi), band in zip(_bands(entry["tensor"], self.guard), next(patterns))]
            if any(counts):
                violations.append({"input": i, "bytes_before": counts[0], "bytes_after": counts[1]})
            if i not in reference_mutated and not _same_bits(view, self.args[i]):
                mutated.append(i)
        return {"guard_violations": violations, "mutated_inputs": mutated}

    def check_in_one_read(self, reference_mutated: set[int]) -> dict[str, Any]:
        """``check`` with every figure (each band's changed bytes, whether each input differs) kept on the device and
        read once: on a GPU shared with other pairs each read waits for a time slice, and one per band and input
        cost 25-45 ms per judged call beside compute-heavy pairs on the H200 (h200-2026-12-05). The same answer."""
        figures: list[torch.Tensor] = []
        inputs: list[int] = []
        patterns = iter(self.patterns)
        for i, (entry, view) in enumerate(zip(self.entries, views(self.buffer, self.entries))):
            if "tensor" not in entry:
                continue
            parts = [_Tensor.sum(_Tensor.ne(self.buffer[lo:hi], band))
                     for (lo, hi), band in zip(_bands(entry["tensor"], self.guard), next(patterns))]
            compared = i not in reference_mutated and type(self.args[i]) is _Tensor
            parts.append(_differs(view, self.args[i]) if compared else _Tensor.new_zeros(parts[0], ()))
            figures.append(torch.stack(parts))
            inputs.append(i)
        violations, mutated = [], []
        for i, (before, after, differs) in zip(inputs, torch.stack(figures).tolist() if figures else []):
            if before or after:
                violations.append({"input": i, "bytes_before": int(before), "bytes_after": int(after)})
            if differs:
                mutated.append(i)
        return {"guard_violations": violations, "mutated_inputs": mutated}

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.buffer = self.image = None  # type: ignore[assignment]
        self.patterns, self.args = [], []


def _words(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two flat uint8 tensors viewed eight (or four) bytes at a time where both are aligned for it, else as they are
    (a timed call's read-back: on the CPU a 256 KiB input byte by byte took 0.17 ms, a quarter of the call)."""
    n = int(_Tensor.numel(a))
    for dtype, size in ((torch.int64, 8), (torch.int32, 4)):
        if n % size == 0 and a.storage_offset() % size == 0 and b.storage_offset() % size == 0:
            try:
                return _Tensor.view(a, dtype), _Tensor.view(b, dtype)
            except RuntimeError:  # a view the allocator's alignment does not allow: byte by byte
                break
    return a, b


def _chunks(a: torch.Tensor, b: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Two flat uint8 tensors of one size, ``EQUAL_CHUNK_BYTES`` at a time, each pair viewed as words (``_words``)."""
    for lo in range(0, int(_Tensor.numel(a)), EQUAL_CHUNK_BYTES):
        yield _words(a[lo:lo + EQUAL_CHUNK_BYTES], b[lo:lo + EQUAL_CHUNK_BYTES])


def _equal_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two flat uint8 tensors hold the same bytes (on the host by ``memcmp``: a timed slot's 384 KiB in 9 us
    against 38 us for ``torch.equal`` on this CPU)."""
    n = int(_Tensor.numel(a))
    if (a.device.type == "cpu" and b.device.type == "cpu" and a.dtype == b.dtype == torch.uint8 and n == int(_Tensor.numel(b))
            and _Tensor.is_contiguous(a) and _Tensor.is_contiguous(b)):
        return n == 0 or _memcmp(_Tensor.data_ptr(a), _Tensor.data_ptr(b), n) == 0
    if n != int(_Tensor.numel(b)):
        return False
    return all(_Tensor.equal(x, y) for x, y in _chunks(a, b))


def _flat_bytes(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A lent input and the reference's draw of it as flat bytes, both on the lent input's device."""
    flat_b = _Tensor.view(_Tensor.reshape(_Tensor.contiguous(b), -1), torch.uint8)
    return _Tensor.view(_Tensor.reshape(a, -1), torch.uint8), _Tensor.to(flat_b, a.device)


def _differs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Whether a lent input's bytes differ from the reference's draw, as an int64 0/1 kept on ``a``'s device (read
    later, with the other figures)."""
    flat_a, flat_b = _flat_bytes(a, b)
    if int(_Tensor.numel(flat_a)) != int(_Tensor.numel(flat_b)):
        return _Tensor.new_ones(flat_a, (), dtype=torch.int64)
    n = int(_Tensor.numel(flat_a))
    if n == 0:
        return _Tensor.new_zeros(flat_a, (), dtype=torch.int64)
    chunks = [_Tensor.any(_Tensor.ne(x, y)) for x, y in _chunks(flat_a, flat_b)]
    return _Tensor.to(_Tensor.any(torch.stack(chunks)), torch.int64)


def _same_bits(a: torch.Tensor, b: Any) -> bool:
    """Whether a lent input still holds exactly the bytes the reference drew."""
    if type(b) is not _Tensor:
        return True
    return _equal_bytes(*_flat_bytes(a, b))
