"""The message format between the trusted parent and its worker processes.

A message is a JSON header plus raw tensor bytes: ``<u32 header length><header JSON><payload>``. Nothing is
pickled, so a hostile worker can send only data, never code, and the parent decodes tensors into memory it owns.
Tensors are placed in the header as ``{"__tensor__": i}`` with their dtype, shape and byte count listed in
``header["__tensors__"]``.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import torch

MAX_MESSAGE_BYTES = 16 * 2**30
# Unbound tensor methods captured at import (before any candidate code runs in a worker), so a candidate that
# patches torch.Tensor cannot change how its outputs are copied out.
_Tensor = torch.Tensor
_detach, _to, _contiguous, _reshape, _view = _Tensor.detach, _Tensor.to, _Tensor.contiguous, _Tensor.reshape, _Tensor.view
_numpy, _numel = _Tensor.numpy, _Tensor.numel
_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in (
        "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
        "complex64", "complex128",
    )
}


class WireError(ValueError):
    """A message that does not follow the format (truncated, inconsistent or of an unknown dtype)."""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def encode(obj: Any) -> bytes:
    """Encode JSON-compatible data in which torch.Tensors may appear anywhere (copied to host, contiguous)."""
    tensors: list[dict[str, Any]] = []
    chunks: list[bytes] = []

    def walk(x: Any) -> Any:
        if isinstance(x, _Tensor):
            host = _contiguous(_to(_detach(x), "cpu"))
            raw = _numpy(_view(_reshape(host, -1), torch.uint8)).tobytes() if _numel(host) else b""
            tensors.append({"dtype": _dtype_name(host.dtype), "shape": list(host.shape), "nbytes": len(raw)})
            chunks.append(raw)
            return {"__tensor__": len(tensors) - 1}
        if isinstance(x, dict):
            return {str(k): walk(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v) for v in x]
        return x

    body = walk(obj)
    header = json.dumps({"body": body, "__tensors__": tensors}, allow_nan=True).encode()
    return struct.pack("<I", len(header)) + header + b"".join(chunks)


def decode(data: bytes) -> Any:
    """Decode a message; every tensor is a fresh, parent-owned CPU tensor."""
    if len(data) < 4:
        raise WireError("message shorter than its length prefix")
    (hlen,) = struct.unpack_from("<I", data, 0)
    if 4 + hlen > len(data):
        raise WireError("header length beyond the message")
    try:
        header = json.loads(data[4 : 4 + hlen])
        specs = header["__tensors__"]
        body = header["body"]
    except (ValueError, KeyError, TypeError) as exc:
        raise WireError(f"bad header: {exc}") from None
    if not isinstance(specs, list):
        raise WireError("bad tensor table")
    tensors: list[torch.Tensor] = []
    offset = 4 + hlen
    for spec in specs:
        try:
            dtype = _DTYPES[spec["dtype"]]
            shape = [int(s) for s in spec["shape"]]
            nbytes = int(spec["nbytes"])
        except (KeyError, TypeError, ValueError) as exc:
            raise WireError(f"bad tensor spec {spec!r}: {exc}") from None
        if any(s < 0 for s in shape):
            raise WireError(f"negative dimension in {shape}")
        numel = 1
        for s in shape:
            numel *= s
        itemsize = torch.empty((), dtype=dtype).element_size()
        if numel * itemsize != nbytes or offset + nbytes > len(data):
            raise WireError(f"tensor bytes inconsistent with dtype {spec['dtype']} and shape {shape}")
        if nbytes:
            flat = torch.frombuffer(bytearray(data[offset : offset + nbytes]), dtype=torch.uint8)
            tensors.append(flat.view(dtype).reshape(shape))
        else:
            tensors.append(torch.empty(shape, dtype=dtype))
        offset += nbytes
    if offset != len(data):
        raise WireError("trailing bytes after the last tensor")

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            if set(x) == {"__tensor__"}:
                index = x["__tensor__"]
                if not isinstance(index, int) or not 0 <= index < len(tensors):
                    raise WireError(f"bad tensor reference {index!r}")
                return tensors[index]
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return walk(body)
