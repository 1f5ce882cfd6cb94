"""Generating a problem's inputs from a seed, on the evaluation device, under one of the distributions."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from kbv.protocol import Distribution
from kbv.worker.loading import DTYPES, seed_everything


def make_inputs(problem: ModuleType, seed: int, device: str, precision: str,
                distribution: Distribution | None = None, unscaled: tuple[int, ...] = ()) -> list[Any]:
    """``get_inputs()`` drawn under ``seed`` directly on ``device``; floating inputs cast to the precision and mapped
    by the distribution to ``x * scale + shift`` (none: as drawn; integer inputs and positions in ``unscaled`` are
    left as drawn). The seed is set through the function kbv captured before any candidate import, so a candidate
    that wraps ``torch.manual_seed`` never sees it."""
    scale, shift = (distribution.scale, distribution.shift) if distribution is not None else (1.0, 0.0)
    seed_everything(seed)
    with torch.device(device):
        raw = list(problem.get_inputs())
    inputs: list[Any] = []
    for i, x in enumerate(raw):
        if isinstance(x, torch.Tensor):
            x = x.to(device)
            if x.is_floating_point():
                if precision != "fp32":
                    x = x.to(DTYPES[precision])
                if (scale != 1.0 or shift != 0.0) and i not in unscaled:
                    x = x * scale + shift if shift else x * scale
        inputs.append(x)
    return inputs
