"""aten.mm.default on bfloat16 tensors, over 31 shapes (KBV_SHAPES; the module constants are the first)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """aten.mm.default."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, in0, in1):
        out = torch.ops.aten.mm.default(in0, in1)
        return out


in0_shape = [2, 4096]
in0_stride = None
in1_shape = [4096, 14336]
in1_stride = [1, 4096]


def get_inputs():
    return [_randn(in0_shape, in0_stride, torch.bfloat16), _randn(in1_shape, in1_stride, torch.bfloat16)]


def get_init_inputs():
    return []


KBV_SHAPES = [
    {'in0_shape': [2, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [1, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [3, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [2, 14336], 'in0_stride': None, 'in1_shape': [14336, 4096], 'in1_stride': [1, 14336]},
    {'in0_shape': [8, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [1, 14336], 'in0_stride': None, 'in1_shape': [14336, 4096], 'in1_stride': [1, 14336]},
    {'in0_shape': [3, 14336], 'in0_stride': None, 'in1_shape': [14336, 4096], 'in1_stride': [1, 14336]},
    {'in0_shape': [8, 4096], 'in0_stride': None, 'in1_shape': [4096, 4096], 'in1_stride': [1, 4096]},
    {'in0_shape': [2048, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [4, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [8, 4096], 'in0_stride': None, 'in1_shape': [4096, 32000], 'in1_stride': [1, 4096]},
    {'in0_shape': [8, 14336], 'in0_stride': None, 'in1_shape': [14336, 4096], 'in1_stride': [1, 14336]},
    {'in0_shape': [8, 4096], 'in0_stride': None, 'in1_shape': [4096, 1024], 'in1_stride': [1, 4096]},
    {'in0_shape': [2048, 4096], 'in0_stride': None, 'in1_shape': [4096, 4096], 'in1_stride': [1, 4096]},
    {'in0_shape': [2048, 14336], 'in0_stride': None, 'in1_shape': [14336, 4096], 'in1_stride': [1, 14336]},
    {'in0_shape': [4, 14336], 'in0_stride': None, 'in1_shape': [14336, 4096], 'in1_stride': [1, 14336]},
    {'in0_shape': [5, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [5, 14336], 'in0_stride': None, 'in1_shape': [14336, 4096], 'in1_stride': [1, 14336]},
    {'in0_shape': [1, 4096], 'in0_stride': None, 'in1_shape': [4096, 128256], 'in1_stride': [1, 4096]},
    {'in0_shape': [2048, 4096], 'in0_stride': None, 'in1_shape': [4096, 1024], 'in1_stride': [1, 4096]},
    {'in0_shape': [542, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [524, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [514, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [519, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [545, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [560, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [510, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [508, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [502, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [511, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
    {'in0_shape': [509, 4096], 'in0_stride': None, 'in1_shape': [4096, 14336], 'in1_stride': [1, 4096]},
]

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
