"""Attention on bfloat16 inputs, over 1 shape (KBV_SHAPES; the module constants are the first)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = torch.bfloat16


class Model(nn.Module):
    """Scaled dot-product attention of q [B, H, Sq, D] over k, v [B, Hkv, Skv, D], key/value heads repeated for
    grouped queries; causal masks align the last query with the last key (a query attends to keys up to its own
    position in the cache)."""

    def __init__(self, n_heads: int, n_kv_heads: int, head_dim: int, causal: bool) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim, self.causal = n_heads, n_kv_heads, head_dim, causal

    def forward(self, q, k, v):
        groups = self.n_heads // self.n_kv_heads
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        sq, skv = q.shape[2], k.shape[2]
        if not self.causal or sq == 1:
            return F.scaled_dot_product_attention(q, k, v)
        if sq == skv:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        mask = torch.ones(sq, skv, dtype=torch.bool, device=q.device).tril(skv - sq)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


n_heads = 16
n_kv_heads = 16
head_dim = 64
q_shape = [32, 16, 197, 64]
q_stride = [605184, 64, 3072, 1]
k_shape = [32, 16, 197, 64]
k_stride = [605184, 64, 3072, 1]
v_shape = [32, 16, 197, 64]
v_stride = [605184, 64, 3072, 1]


def get_inputs():
    return [_randn(q_shape, q_stride, torch.bfloat16), _randn(k_shape, k_stride, torch.bfloat16), _randn(v_shape, v_stride, torch.bfloat16)]


def get_init_inputs():
    return [n_heads, n_kv_heads, head_dim, False]


KBV_SHAPES = [
    {'n_heads': 16, 'n_kv_heads': 16, 'head_dim': 64, 'q_shape': [32, 16, 197, 64], 'q_stride': [605184, 64, 3072, 1], 'k_shape': [32, 16, 197, 64], 'k_stride': [605184, 64, 3072, 1], 'v_shape': [32, 16, 197, 64], 'v_stride': [605184, 64, 3072, 1]},
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
