"""RMSNorm on bfloat16 inputs, over 1 shape (KBV_SHAPES; the module constants are the first)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = torch.bfloat16


class Model(nn.Module):
    """RMSNorm over the last dimension, computed as x * rsqrt(mean(x^2) + eps) in float32, cast back,
    times the weight."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size, dtype=DTYPE))

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


hidden_size = 4096
x_shape = [8, 1, 4096]
x_stride = None


def get_inputs():
    return [_randn(x_shape, x_stride, torch.bfloat16)]


def get_init_inputs():
    return [hidden_size, 1e-05]


KBV_SHAPES = [
    {'hidden_size': 4096, 'x_shape': [8, 1, 4096], 'x_stride': None},
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
