"""The message format between the trusted parent and its worker processes.

A message is a JSON header followed by one raw part per distinct tensor, each sent as its own frame on a
``multiprocessing`` connection (a 4-byte big-endian signed length, or -1 and an 8-byte length for frames over
2 GiB, then the bytes). Nothing is pickled, so a hostile worker can send only data, never code. The header lists
each tensor's dtype, shape and byte count; in the body a tensor stands as ``{"__tensor__": i}``, and a tensor that
occurs several times in one message (the same view of the same memory) is sent once and referenced by index.

The receiver reads frames from the connection's file descriptor itself: it checks the header against the caller's
byte budget, the tensor count and the header size limit before allocating anything, then reads each frame's length
prefix and refuses a frame whose length differs from its header before reading any of it, and finally reads the
frame straight into the tensor it allocated (``os.readv``, no intermediate copy). Tensors arrive as fresh,
receiver-owned CPU memory; references to one index are the same tensor object.

Large outputs may instead travel as file descriptors (``split(..., handoff=True)`` in a worker that registered a
codec, ``kbv.worker.handoff``): the header marks such a tensor with ``"handle": kind``, and one frame right after
the header (one byte, ``b"H"``) carries every descriptor of the message as ``SCM_RIGHTS``. A receiver with a codec
(the judge) imports each one into a tensor of its own, or puts ``{"handoff_error": reason}`` in its place; one
without (the parent) gets :class:`Handle` objects, which it can only send on. Descriptors are still only data: a
receiver never runs anything a sender chose.
"""

from __future__ import annotations

import array
import json
import os
import select
import socket
import struct
import time
from multiprocessing.connection import Connection
from typing import Any

import torch

from kbv.protocol import HANDOFF_MIN_BYTES, REPLY_HEADER_BYTES_MAX, REPLY_TENSORS_MAX

MAX_HEADER_BYTES = REPLY_HEADER_BYTES_MAX
MAX_TENSORS = REPLY_TENSORS_MAX
MAX_TENSOR_BYTES = 64 * 2**30
MAX_MESSAGE_BYTES = 64 * 2**30  # recv's budget when the caller gives none
_READ_CHUNK = 2**30  # one readv reads at most this much (Linux caps a read near 2 GiB anyway)
# Unbound tensor methods captured at import (before any candidate code runs in a worker), so a candidate that
# patches torch.Tensor cannot change how its outputs are copied out.
_Tensor = torch.Tensor
_detach, _to, _contiguous, _reshape, _view = _Tensor.detach, _Tensor.to, _Tensor.contiguous, _Tensor.reshape, _Tensor.view
_numpy, _numel, _element_size = _Tensor.numpy, _Tensor.numel, _Tensor.element_size
_resolve_conj, _resolve_neg = _Tensor.resolve_conj, _Tensor.resolve_neg
_data_ptr, _stride, _get_device, _is_conj, _is_neg = (_Tensor.data_ptr, _Tensor.stride, _Tensor.get_device,
                                                      _Tensor.is_conj, _Tensor.is_neg)
_empty = torch.empty
_poll, _perf_counter = select.poll, time.perf_counter  # spin's, captured before any candidate code like the above
MAX_DIM = 2**40
_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in (
        "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
        "complex64", "complex128",
    )
}


DTYPE_NAMES = frozenset(_DTYPES)


def dtype_of(name: str) -> torch.dtype:
    """The dtype a header names (KeyError for one the format does not carry)."""
    return _DTYPES[name]


# a sealed memfd; a CUDA VMM allocation (kbv.worker.handoff); inputs the judge lends, the same two kinds unsealed for
# writing (kbv.worker.lending)
HANDLE_KINDS = ("host", "cuda", "lent-host", "lent-cuda")
MAX_HANDLES = 250  # descriptors in one message (one SCM_RIGHTS message carries at most 253)
_HANDLE_FRAME = struct.pack("!i", 1) + b"H"


class Handle:
    """A tensor's bytes in a shared buffer behind a file descriptor, not imported by this process: the parent
    holds these and relays them to the judge without reading them. Closed when dropped."""

    __slots__ = ("fd", "kind", "dtype", "shape", "nbytes", "close_after_send")

    def __init__(self, fd: int, kind: str, dtype: str, shape: list[int], nbytes: int, close_after_send: bool):
        self.fd, self.kind, self.dtype, self.shape, self.nbytes = fd, kind, dtype, shape, nbytes
        self.close_after_send = close_after_send

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Handle({self.kind}, {self.dtype}, {self.shape})"


def handles_in(obj: Any) -> list[Handle]:
    """The distinct handles anywhere in a received message."""
    found: dict[int, Handle] = {}
    _collect_handles(obj, found)
    return list(found.values())


def _collect_handles(x: Any, found: dict[int, Handle]) -> None:
    # module-level walkers, not recursive closures: a closure that calls itself is a reference cycle that would keep
    # every tensor and descriptor it saw alive until the garbage collector runs (on a GPU each pins an output copy)
    if isinstance(x, Handle):
        found[id(x)] = x
    elif isinstance(x, dict):
        for v in x.values():
            _collect_handles(v, found)
    elif isinstance(x, list):
        for v in x:
            _collect_handles(v, found)


_CODEC: Any = None  # a worker's kbv.worker.handoff.Codec: export(tensor) -> (kind, fd) | None, import_(...)


def use_codec(codec: Any) -> None:
    """Register this process's handoff codec (workers only; the parent never imports a handle)."""
    global _CODEC
    _CODEC = codec


class WireError(ValueError):
    """A message that does not follow the format (truncated, inconsistent, of an unknown dtype or over budget)."""


class WireTimeout(Exception):
    """The other side stopped part-way through a message (not sending, or not reading) past the deadline."""


def split(obj: Any, handoff: bool = False, host: bool = False) -> tuple[bytes, list[Any]]:
    """The header and the distinct host tensors (or handles) of ``obj``: a tensor that occurs several times (the
    same view of the same memory: pointer, shape, strides, dtype, device) is copied and sent once. With
    ``handoff`` and a registered codec, a tensor of ``HANDOFF_MIN_BYTES`` or more is exported as a descriptor
    instead (closed once sent); with ``host`` too, always as a sealed host copy (a descriptor that may be relayed to
    several receivers, none of which can change it); :class:`Handle` objects in ``obj`` are relayed as they are."""
    splitter = _Splitter(handoff, host)
    body = splitter.walk(obj)
    return (json.dumps({"body": body, "__tensors__": splitter.specs}, allow_nan=True).encode(), splitter.tensors)


class _Splitter:
    """``split``'s walk and what it collects (a class, not a recursive closure: no reference cycle)."""

    def __init__(self, handoff: bool, host: bool = False):
        self.handoff = handoff
        self.host = host
        self.tensors: list[Any] = []
        self.specs: list[dict[str, Any]] = []
        self.seen: dict[tuple[Any, ...], int] = {}
        self.handles = 0

    def walk(self, x: Any) -> Any:
        tensors, specs, seen = self.tensors, self.specs, self.seen
        if isinstance(x, Handle):
            mark: tuple[Any, ...] = ("handle", id(x))
            if mark not in seen:
                if x.fd < 0 or self.handles >= MAX_HANDLES:
                    raise WireError("a closed handle, or too many handles in one message")
                self.handles += 1
                tensors.append(x)
                specs.append({"dtype": x.dtype, "shape": list(x.shape), "nbytes": x.nbytes, "handle": x.kind})
                seen[mark] = len(tensors) - 1
            return {"__tensor__": seen[mark]}
        if isinstance(x, _Tensor):
            try:
                key: tuple[Any, ...] | None = (_get_device(x), _data_ptr(x), tuple(x.shape), tuple(_stride(x)),
                                               str(x.dtype), bool(_is_conj(x)), bool(_is_neg(x)))
            except Exception:  # no strided storage (sparse, nested): sent as is, never merged
                key = None
            if key is not None and key in seen:
                return {"__tensor__": seen[key]}
            nbytes = int(_numel(x)) * int(_element_size(x))
            if self.handoff and _CODEC is not None and nbytes >= HANDOFF_MIN_BYTES and self.handles < MAX_HANDLES:
                plain = _resolve_neg(_resolve_conj(_detach(x)))
                exported = _CODEC.export(_to(plain, "cpu") if self.host else plain)
                if exported is not None:
                    self.handles += 1
                    kind, fd = exported
                    dtype = str(x.dtype).removeprefix("torch.")
                    tensors.append(Handle(fd, kind, dtype, list(x.shape), nbytes, close_after_send=True))
                    specs.append({"dtype": dtype, "shape": list(x.shape), "nbytes": nbytes, "handle": kind})
                    if key is not None:
                        seen[key] = len(tensors) - 1
                    return {"__tensor__": len(tensors) - 1}
            host = _contiguous(_resolve_neg(_resolve_conj(_to(_detach(x), "cpu"))))
            tensors.append(host)
            specs.append({"dtype": str(host.dtype).removeprefix("torch."), "shape": list(host.shape),
                          "nbytes": _numel(host) * _element_size(host)})
            if key is not None:
                seen[key] = len(tensors) - 1
            return {"__tensor__": len(tensors) - 1}
        if isinstance(x, dict):
            return {str(k): self.walk(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [self.walk(v) for v in x]
        return x


def _bytes_view(t: torch.Tensor) -> Any:
    """A writable uint8 numpy view of a contiguous CPU tensor's memory (numpy has no bfloat16)."""
    return _numpy(_view(_reshape(t, -1), torch.uint8))


def send(conn: Connection, obj: Any, deadline: float | None = None) -> None:
    """Send JSON-compatible data in which torch.Tensors may appear anywhere (copied to host first). With a
    ``deadline`` (time.monotonic), a receiver that stops reading makes it raise WireTimeout instead of blocking."""
    send_parts(conn, *split(obj), deadline=deadline)


def send_parts(conn: Connection, header: bytes, tensors: list[Any], deadline: float | None = None) -> None:
    handles = [t for t in tensors if isinstance(t, Handle)]
    try:
        _send_frames(conn, header, [t for t in tensors if not isinstance(t, Handle)], handles, deadline)
    finally:
        for h in handles:
            if h.close_after_send:
                h.close()


def _ready(fd: int, event: int, timeout: float) -> bool:
    """Whether ``fd`` is ready for ``event`` within ``timeout`` seconds: poll, not select, which refuses
    descriptors above 1023 (a parent with many pairs in flight holds more: seen on the H200)."""
    poller = select.poll()
    poller.register(fd, event)
    return bool(poller.poll(max(0.0, timeout) * 1000))


def _send_handles(fd: int, handles: list[Handle], deadline: float | None) -> None:
    """The descriptors frame: one byte with every handle's descriptor attached (SCM_RIGHTS)."""
    sock = socket.socket(fileno=fd)
    try:
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [h.fd for h in handles]).tobytes())]
        while True:
            try:
                sent = sock.sendmsg([_HANDLE_FRAME], ancillary)
                break
            except BlockingIOError:
                remaining = (deadline - time.monotonic()) if deadline is not None else 1.0
                if remaining <= 0 or not _ready(fd, select.POLLOUT, remaining):
                    raise WireTimeout("the receiver stopped reading") from None
        rest = memoryview(_HANDLE_FRAME)[sent:]
        while rest:
            try:
                rest = rest[os.write(fd, rest):]
            except BlockingIOError:
                _ready(fd, select.POLLOUT, 1.0)
    finally:
        sock.detach()


def _send_frames(conn: Connection, header: bytes, tensors: list[torch.Tensor], handles: list[Handle],
                 deadline: float | None) -> None:
    frames = [memoryview(header), *(memoryview(_bytes_view(t)).cast("B") for t in tensors if _numel(t))]
    if deadline is None:
        conn.send_bytes(frames[0])
        if handles:
            _send_handles(conn.fileno(), handles, None)
        for frame in frames[1:]:
            conn.send_bytes(frame)
        return
    fd = conn.fileno()
    os.set_blocking(fd, False)  # the deadline is kept with poll; the descriptor is blocking again afterwards
    try:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        for i, frame in enumerate(frames):
            if i == 1 and handles:
                _send_handles(fd, handles, deadline)
            n = len(frame)
            prefix = struct.pack("!i", n) if n <= 0x7FFFFFFF else struct.pack("!i", -1) + struct.pack("!Q", n)
            for part in (memoryview(prefix), frame):
                while part:
                    try:
                        part = part[os.write(fd, part[:_READ_CHUNK]):]
                    except BlockingIOError:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0 or not poller.poll(remaining * 1000):
                            raise WireTimeout("the receiver stopped reading") from None
        if len(frames) == 1 and handles:
            _send_handles(fd, handles, deadline)
    finally:
        os.set_blocking(fd, True)


def _parse_header(data: bytes) -> tuple[Any, list[tuple[torch.dtype, list[int], int, str | None]]]:
    try:
        header = json.loads(data)
        specs = header["__tensors__"]
        body = header["body"]
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise WireError(f"bad header: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(specs, list):
        raise WireError("bad tensor table")
    if len(specs) > MAX_TENSORS:
        raise WireError(f"{len(specs)} tensors in one message (at most {MAX_TENSORS})")
    parsed = []
    for spec in specs:
        try:
            dtype = _DTYPES[spec["dtype"]]
            if not isinstance(spec["shape"], list) or not all(type(s) is int for s in spec["shape"]):
                raise TypeError("shape must be a list of integers")
            shape = list(spec["shape"])
            nbytes = spec["nbytes"]
            if type(nbytes) is not int:
                raise TypeError("nbytes must be an integer")
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise WireError(f"bad tensor spec {spec!r}: {exc}") from None
        if any(s < 0 for s in shape):
            raise WireError(f"negative dimension in {shape}")
        if any(s > MAX_DIM for s in shape) or len(shape) > 64:
            raise WireError(f"dimension out of range in {shape}")
        numel = 1
        for s in shape:
            numel *= s
        if numel * torch.empty((), dtype=dtype).element_size() != nbytes or nbytes > MAX_TENSOR_BYTES:
            raise WireError(f"tensor bytes inconsistent with dtype {spec['dtype']} and shape {shape}")
        kind = spec.get("handle")
        if kind is not None and kind not in HANDLE_KINDS:
            raise WireError(f"unknown handle kind {kind!r}")
        parsed.append((dtype, shape, nbytes, kind))
    if sum(1 for *_, kind in parsed if kind is not None) > MAX_HANDLES:
        raise WireError(f"more than {MAX_HANDLES} handles in one message")
    return body, parsed


def _read_exact(fd: int, view: memoryview, deadline: float | None = None) -> None:
    """Fill ``view`` from ``fd``. EOFError when the channel is closed before the first byte (as multiprocessing
    does), OSError when it closes part-way, WireTimeout when ``deadline`` (time.monotonic) passes first."""
    done, size = 0, len(view)
    poller = None
    if deadline is not None:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
    while done < size:
        if poller is not None:
            remaining = deadline - time.monotonic()  # type: ignore[operator]
            if remaining <= 0 or not poller.poll(remaining * 1000):
                raise WireTimeout("the sender stopped part-way through a message")
        n = os.readv(fd, [view[done:done + _READ_CHUNK]])
        if n == 0:
            if done == 0:
                raise EOFError
            raise OSError("got end of file during message")
        done += n


def _frame_length(fd: int, deadline: float | None) -> int:
    """Read one frame's length prefix (and nothing of the frame)."""
    prefix = bytearray(4)
    _read_exact(fd, memoryview(prefix), deadline)
    (size,) = struct.unpack("!i", prefix)
    if size == -1:
        wide = bytearray(8)
        _read_exact(fd, memoryview(wide), deadline)
        (size,) = struct.unpack("!Q", wide)
    elif size < 0:
        raise WireError(f"negative frame length {size}")
    return size


def _recv_handles(fd: int, wanted: int, deadline: float | None) -> list[int]:
    """The descriptors frame: exactly ``wanted`` descriptors on one byte, or WireError (any received are closed)."""
    if deadline is not None:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not _ready(fd, select.POLLIN, remaining):
            raise WireTimeout("the sender stopped part-way through a message")
    sock = socket.socket(fileno=fd)
    try:
        data, ancillary, flags, _ = sock.recvmsg(len(_HANDLE_FRAME), socket.CMSG_SPACE(wanted * 4))
    finally:
        sock.detach()
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            got = array.array("i")
            got.frombytes(payload[:len(payload) - len(payload) % got.itemsize])
            fds.extend(got)
    try:
        if not data:
            raise OSError("got end of file during message")
        rest = bytearray(len(_HANDLE_FRAME) - len(data))
        if rest:
            _read_exact(fd, memoryview(rest), deadline)
        if bytes(data) + bytes(rest) != _HANDLE_FRAME or flags & socket.MSG_CTRUNC or len(fds) != wanted:
            raise WireError(f"bad handles frame ({len(fds)} descriptors, {wanted} declared)")
    except BaseException:
        for f in fds:
            os.close(f)
        raise
    return fds


def _received(fd: int, kind: str, dtype: torch.dtype, shape: list[int], nbytes: int, relay: bool) -> Any:
    """A received descriptor: kept as a :class:`Handle` by a relaying receiver (the parent) or one without a codec,
    else imported by this process's codec (a worker)."""
    name = str(dtype).removeprefix("torch.")
    if relay or _CODEC is None:
        return Handle(fd, kind, name, shape, nbytes, close_after_send=False)
    try:
        return _CODEC.import_(kind, fd, dtype, shape, nbytes)
    except Exception as exc:  # the sender's buffer, the sender's fault: judged as a wrong output
        return {"handoff_error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def spin(conn: Connection, seconds: float) -> bool:
    """Poll ``conn`` without sleeping for up to ``seconds``; True once a message is there to read. A reply that comes
    within that time is then read without the wake-up of a sleeping process."""
    if seconds <= 0:
        return False
    poller = _poll()
    poller.register(conn.fileno(), select.POLLIN)
    end = _perf_counter() + seconds
    while True:
        if poller.poll(0):
            return True
        if _perf_counter() >= end:
            return False


def recv(conn: Connection, max_bytes: int | None = None, deadline: float | None = None, relay: bool = False) -> Any:
    """Receive one message; every tensor is a fresh, receiver-owned CPU tensor. ``max_bytes`` bounds the tensor
    bytes the message may declare (default MAX_MESSAGE_BYTES): a larger message is refused before anything is
    allocated. ``deadline`` (time.monotonic) bounds the whole read. With ``relay`` (the parent) descriptors stay
    :class:`Handle` objects whatever codec this process registered: the parent never reads a candidate's output.
    Raises EOFError on a closed channel, WireError on a malformed or oversized message and WireTimeout past the
    deadline; after either the channel is out of step and must be closed."""
    budget = MAX_MESSAGE_BYTES if max_bytes is None else max_bytes
    fd = conn.fileno()
    size = _frame_length(fd, deadline)
    if size > MAX_HEADER_BYTES:
        raise WireError(f"header of {size} bytes (at most {MAX_HEADER_BYTES})")
    data = bytearray(size)
    if size:
        _read_exact(fd, memoryview(data), deadline)
    body, specs = _parse_header(bytes(data))
    declared = sum(nbytes for _, _, nbytes, _ in specs)
    if declared > budget:
        raise WireError(f"reply declares {declared} tensor bytes, over its budget of {budget}")
    wanted = sum(1 for *_, kind in specs if kind is not None)
    fds = _recv_handles(fd, wanted, deadline) if wanted else []
    tensors: list[Any] = []
    try:
        for dtype, shape, nbytes, kind in specs:
            if kind is not None:
                tensors.append(_received(fds.pop(0), kind, dtype, shape, nbytes, relay))
                continue
            t = _empty(shape, dtype=dtype)
            if nbytes:
                got = _frame_length(fd, deadline)
                if got != nbytes:
                    raise WireError(f"tensor frame of {got} bytes, {nbytes} declared")
                _read_exact(fd, memoryview(_bytes_view(t)).cast("B"), deadline)
            tensors.append(t)
    finally:
        for left in fds:  # descriptors of a message that failed part-way
            os.close(left)

    try:
        return _resolve(body, tensors)
    except RecursionError:
        raise WireError("message nested too deeply") from None


def _resolve(x: Any, tensors: list[Any]) -> Any:
    """A received body with its tensor references replaced by the received tensors (or handles)."""
    if isinstance(x, dict):
        if set(x) == {"__tensor__"}:
            index = x["__tensor__"]
            if type(index) is not int or not 0 <= index < len(tensors):
                raise WireError(f"bad tensor reference {index!r}")
            return tensors[index]
        return {k: _resolve(v, tensors) for k, v in x.items()}
    if isinstance(x, list):
        return [_resolve(v, tensors) for v in x]
    return x
