import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the last dimension, at several shapes (KBV_SHAPES); more are held out on the evaluator side."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


rows = 8
cols = 16


def get_inputs():
    return [torch.rand(rows, cols) * 4.0]


def get_init_inputs():
    return []


KBV_SHAPES = [{"rows": 8, "cols": 16}, {"rows": 5, "cols": 48}]
