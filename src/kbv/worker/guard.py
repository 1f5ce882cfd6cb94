"""Guard bands: each input tensor is placed inside a larger buffer whose bytes before and after its data hold a
pattern drawn from the trial's seed; after the call, a changed band means the kernel wrote out of bounds."""

from __future__ import annotations

from typing import Any

import torch

_Tensor = torch.Tensor


def surround(args: list[Any], guard_bytes: int, seed: int) -> tuple[list[Any], list[tuple[int, _Tensor, _Tensor, int]]]:
    """Copies of the contiguous tensor inputs, each in the middle of a buffer with ``guard_bytes`` of pattern on
    either side (a multiple of 256 bytes keeps the data's alignment). Returns the new arguments and, per guarded
    input, (position, buffer, pattern, guard size)."""
    guard_bytes -= guard_bytes % 256
    out: list[Any] = []
    guards: list[tuple[int, _Tensor, _Tensor, int]] = []
    gen = torch.Generator().manual_seed(seed % 2**63)
    for i, arg in enumerate(args):
        if type(arg) is not _Tensor or not _Tensor.is_contiguous(arg) or _Tensor.numel(arg) == 0 or guard_bytes <= 0:
            out.append(arg)
            continue
        nbytes = _Tensor.numel(arg) * _Tensor.element_size(arg)
        pattern = torch.randint(0, 256, (2 * guard_bytes,), dtype=torch.uint8, generator=gen)
        pattern = _Tensor.to(pattern, _Tensor.device.__get__(arg))
        buffer = torch.empty(nbytes + 2 * guard_bytes, dtype=torch.uint8, device=_Tensor.device.__get__(arg))
        _Tensor.copy_(buffer[:guard_bytes], pattern[:guard_bytes])
        _Tensor.copy_(buffer[guard_bytes + nbytes:], pattern[guard_bytes:])
        inner = _Tensor.view(_Tensor.view(buffer[guard_bytes:guard_bytes + nbytes], arg.dtype), arg.shape)
        _Tensor.copy_(inner, arg)
        out.append(inner)
        guards.append((i, buffer, pattern, guard_bytes))
    return out, guards


def violations(guards: list[tuple[int, _Tensor, _Tensor, int]]) -> list[dict[str, Any]]:
    """Inputs whose bands changed: position, and the bytes changed before and after the data."""
    found = []
    for i, buffer, pattern, g in guards:
        before = int(_Tensor.sum(buffer[:g] != pattern[:g]))
        after = int(_Tensor.sum(buffer[-g:] != pattern[g:]))
        if before or after:
            found.append({"input": i, "bytes_before": before, "bytes_after": after})
    return found
