"""aten._scaled_dot_product_cudnn_attention.default on bfloat16 tensors, over 2 shapes (KBV_SHAPES; the module constants are the first)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """aten._scaled_dot_product_cudnn_attention.default."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, in0, in1, in2):
        out = torch.ops.aten._scaled_dot_product_cudnn_attention.default(in0, in1, in2, None, False)
        return out[0]


in0_shape = [8, 32, 1, 128]
in0_stride = [4096, 128, 4096, 1]
in1_shape = [8, 8, 2049, 128]
in1_stride = [2113536, 264192, 128, 1]
in2_shape = [8, 8, 2049, 128]
in2_stride = [2113536, 264192, 128, 1]


def get_inputs():
    return [_randn(in0_shape, in0_stride, torch.bfloat16), _randn(in1_shape, in1_stride, torch.bfloat16), _randn(in2_shape, in2_stride, torch.bfloat16)]


def get_init_inputs():
    return []


KBV_SHAPES = [
    {'in0_shape': [8, 32, 1, 128], 'in0_stride': [4096, 128, 4096, 1], 'in1_shape': [8, 8, 2049, 128], 'in1_stride': [2113536, 264192, 128, 1], 'in2_shape': [8, 8, 2049, 128], 'in2_stride': [2113536, 264192, 128, 1]},
    {'in0_shape': [32, 16, 197, 64], 'in0_stride': [605184, 64, 3072, 1], 'in1_shape': [32, 16, 197, 64], 'in1_stride': [605184, 64, 3072, 1], 'in2_shape': [32, 16, 197, 64], 'in2_stride': [605184, 64, 3072, 1]},
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
