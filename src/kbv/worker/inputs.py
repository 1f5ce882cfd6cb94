"""Generating a problem's inputs from a seed, on the evaluation device, under one of the distributions."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import sys

import torch

from kbv.protocol import Distribution
from kbv.worker.loading import DTYPES, seed_everything


def make_inputs(problem: ModuleType, seed: int, device: str, precision: str,
                distribution: Distribution | None = None, unscaled: tuple[int, ...] = ()) -> list[Any]:
    """``get_inputs()`` drawn under ``seed`` directly on ``device``; floating inputs cast to the precision and mapped
    by the distribution to ``x * scale + shift`` (none: as drawn; integer inputs and positions in ``unscaled`` are
    left as drawn). The seed is set through the function kbv captured before any candidate import, so a candidate
    that wraps ``torch.manual_seed`` never sees it. The mapping runs in place on a tensor nothing else holds (one
    input's memory at its peak, not three: a 6 GiB activation ran out of device memory there on an 80 GB card,
    docs/results/h100-2026-12-05-c), on a copy where ``get_inputs`` returned a tensor it keeps (a module global,
    a view, the same tensor twice); the bits are the same either way."""
    scale, shift = (distribution.scale, distribution.shift) if distribution is not None else (1.0, 0.0)
    seed_everything(seed)
    with torch.device(device):
        raw = list(problem.get_inputs())
    inputs: list[Any] = []
    for i in range(len(raw)):
        x, raw[i] = raw[i], None
        if isinstance(x, torch.Tensor):
            x = x.to(device)
            if x.is_floating_point():
                if precision != "fp32":
                    x = x.to(DTYPES[precision])
                if (scale != 1.0 or shift != 0.0) and i not in unscaled:
                    x = _mapped(x, scale, shift)
        inputs.append(x)
    return inputs


def _mapped(x: torch.Tensor, scale: float, shift: float) -> torch.Tensor:
    """``x * scale + shift``, in place where this function holds the only reference to ``x`` and its storage is its
    own (``sys.getrefcount``: the argument and the call's own), else on a new tensor."""
    if sys.getrefcount(x) <= 3 and x._base is None and not x.requires_grad:
        x.mul_(scale)
        return x.add_(shift) if shift else x
    return x * scale + shift if shift else x * scale
