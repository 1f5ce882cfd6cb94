"""Rotary on bfloat16 inputs, over 1 shape (KBV_SHAPES; the module constants are the first)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = torch.bfloat16


class Model(nn.Module):
    """Rotary position embedding (rotate-half layout) of q [B, S, H, D] and k [B, S, Hkv, D] at
    positions start_pos .. start_pos + S - 1; cos and sin computed in float32, applied in the input dtype."""

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        self.head_dim, self.theta = head_dim, theta

    def forward(self, q, k, start_pos: int):
        inv_freq = 1.0 / self.theta ** (torch.arange(0, self.head_dim, 2, device=q.device, dtype=torch.float32)
                                        / self.head_dim)
        positions = torch.arange(start_pos, start_pos + q.shape[1], device=q.device, dtype=torch.float32)
        freqs = torch.outer(positions, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(q.dtype)[None, :, None, :], emb.sin().to(q.dtype)[None, :, None, :]

        def rotate_half(x):
            half = x.shape[-1] // 2
            return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


head_dim = 128
q_shape = [1, 2048, 32, 128]
q_stride = None
k_shape = [1, 2048, 8, 128]
k_stride = None
start_pos = 0


def get_inputs():
    return [_randn(q_shape, q_stride, torch.bfloat16), _randn(k_shape, k_stride, torch.bfloat16), start_pos]


def get_init_inputs():
    return [head_dim, 500000.0]


KBV_SHAPES = [
    {'head_dim': 128, 'q_shape': [1, 2048, 32, 128], 'q_stride': None, 'k_shape': [1, 2048, 8, 128], 'k_stride': None, 'start_pos': 0},
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
