"""aten.pow.Tensor_Scalar on float32 tensors, over 1 shape (KBV_SHAPES; the module constants are the first)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """aten.pow.Tensor_Scalar."""

    def __init__(self, arg1) -> None:
        super().__init__()
        self.arg1 = arg1

    def forward(self, in0):
        out = torch.ops.aten.pow.Tensor_Scalar(in0, self.arg1)
        return out


in0_shape = [8, 1, 4096]
in0_stride = None
arg1 = 2


def get_inputs():
    return [_positive(in0_shape, in0_stride, torch.float32)]


def get_init_inputs():
    return [arg1]


KBV_SHAPES = [
    {'in0_shape': [8, 1, 4096], 'in0_stride': None, 'arg1': 2},
]
KBV_SKIP = {'D4': 'pow is defined for positive inputs only', 'D5': 'pow is defined for positive inputs only', 'D6': 'pow is defined for positive inputs only'}

def _alloc(shape, stride, draw):
    """A tensor of this shape and stride over fresh storage filled by draw(size)."""
    if stride is None:
        return draw(list(shape))
    size = 0 if 0 in shape else 1 + sum((n - 1) * s for n, s in zip(shape, stride))
    return torch.as_strided(draw([size]), list(shape), list(stride))


def _randn(shape, stride, dtype):
    return _alloc(shape, stride, lambda s: torch.randn(s).to(dtype))


def _positive(shape, stride, dtype):
    return _alloc(shape, stride, lambda s: (torch.rand(s) + 0.5).to(dtype))


def _mask(shape, stride, dtype):
    return _alloc(shape, stride, lambda s: torch.rand(s) < 0.5)


def _randint(shape, stride, dtype, high):
    return _alloc(shape, stride, lambda s: torch.randint(0, max(int(high), 1), s, dtype=dtype))
