import torch
import torch.nn as nn


class Model(nn.Module):
    """A broken problem: forward raises (kbv lint must report error, not crash)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("this problem is broken on purpose")


def get_inputs():
    return [torch.rand(4, 4)]


def get_init_inputs():
    return []
