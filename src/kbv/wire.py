"""The message format between the trusted parent and its worker processes.

A message is a JSON header followed by one raw part per tensor, each sent as its own frame on a
``multiprocessing`` connection. Nothing is pickled, so a hostile worker can send only data, never code. The header
lists each tensor's dtype, shape and byte count; the receiver allocates the tensor itself and reads the frame
straight into it (``recv_bytes_into``), so tensors arrive as parent-owned host memory with one copy, and a frame
whose size disagrees with its header is refused. In the header a tensor stands as ``{"__tensor__": i}``.
"""

from __future__ import annotations

import json
from multiprocessing.connection import Connection
from typing import Any

import torch

MAX_HEADER_BYTES = 64 * 2**20
MAX_TENSOR_BYTES = 64 * 2**30
# Unbound tensor methods captured at import (before any candidate code runs in a worker), so a candidate that
# patches torch.Tensor cannot change how its outputs are copied out.
_Tensor = torch.Tensor
_detach, _to, _contiguous, _reshape, _view = _Tensor.detach, _Tensor.to, _Tensor.contiguous, _Tensor.reshape, _Tensor.view
_numpy, _numel, _element_size = _Tensor.numpy, _Tensor.numel, _Tensor.element_size
_resolve_conj, _resolve_neg = _Tensor.resolve_conj, _Tensor.resolve_neg
MAX_DIM = 2**40
_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in (
        "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
        "complex64", "complex128",
    )
}


class WireError(ValueError):
    """A message that does not follow the format (truncated, inconsistent or of an unknown dtype)."""


def split(obj: Any) -> tuple[bytes, list[torch.Tensor]]:
    tensors: list[torch.Tensor] = []
    specs: list[dict[str, Any]] = []

    def walk(x: Any) -> Any:
        if isinstance(x, _Tensor):
            host = _contiguous(_resolve_neg(_resolve_conj(_to(_detach(x), "cpu"))))
            tensors.append(host)
            specs.append({"dtype": str(host.dtype).removeprefix("torch."), "shape": list(host.shape),
                          "nbytes": _numel(host) * _element_size(host)})
            return {"__tensor__": len(tensors) - 1}
        if isinstance(x, dict):
            return {str(k): walk(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v) for v in x]
        return x

    body = walk(obj)
    return json.dumps({"body": body, "__tensors__": specs}, allow_nan=True).encode(), tensors


def _bytes_view(t: torch.Tensor) -> Any:
    """A writable uint8 numpy view of a contiguous CPU tensor's memory (numpy has no bfloat16)."""
    return _numpy(_view(_reshape(t, -1), torch.uint8))


def send(conn: Connection, obj: Any) -> None:
    """Send JSON-compatible data in which torch.Tensors may appear anywhere (copied to host first)."""
    send_parts(conn, *split(obj))


def send_parts(conn: Connection, header: bytes, tensors: list[torch.Tensor]) -> None:
    conn.send_bytes(header)
    for t in tensors:
        if _numel(t):
            conn.send_bytes(_bytes_view(t))


def _parse_header(data: bytes) -> tuple[Any, list[tuple[torch.dtype, list[int], int]]]:
    try:
        header = json.loads(data)
        specs = header["__tensors__"]
        body = header["body"]
    except (ValueError, KeyError, TypeError) as exc:
        raise WireError(f"bad header: {exc}") from None
    if not isinstance(specs, list):
        raise WireError("bad tensor table")
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
        parsed.append((dtype, shape, nbytes))
    return body, parsed


def recv(conn: Connection) -> Any:
    """Receive one message; every tensor is a fresh, receiver-owned CPU tensor. Raises EOFError on a closed
    channel and WireError on a malformed message."""
    body, specs = _parse_header(conn.recv_bytes(MAX_HEADER_BYTES))
    tensors: list[torch.Tensor] = []
    for dtype, shape, nbytes in specs:
        t = torch.empty(shape, dtype=dtype)
        if nbytes:
            try:
                got = conn.recv_bytes_into(_bytes_view(t))
            except Exception as exc:  # BufferTooShort: a frame larger than its header said
                if isinstance(exc, (EOFError, OSError)):
                    raise
                raise WireError("tensor frame larger than declared") from None
            if got != nbytes:
                raise WireError(f"tensor frame of {got} bytes, {nbytes} declared")
        tensors.append(t)

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            if set(x) == {"__tensor__"}:
                index = x["__tensor__"]
                if type(index) is not int or not 0 <= index < len(tensors):
                    raise WireError(f"bad tensor reference {index!r}")
                return tensors[index]
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return walk(body)
