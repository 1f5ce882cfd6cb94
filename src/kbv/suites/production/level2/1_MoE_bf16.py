"""MoE on bfloat16 inputs, over 1 shape (KBV_SHAPES; the module constants are the first)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = torch.bfloat16


class Model(nn.Module):
    """Mixture of experts over tokens x [T, hidden]: a bias-free router (float32 logits), softmax, top-k experts
    per token (weights renormalised when norm_topk_prob), the weighted sum of the chosen experts' gated MLPs
    (SiLU, no biases)."""

    def __init__(self, hidden_size: int, intermediate_size: int, n_experts: int, top_k: int,
                 norm_topk_prob: bool) -> None:
        super().__init__()
        self.n_experts, self.top_k, self.norm_topk_prob = n_experts, top_k, norm_topk_prob
        self.gate = nn.Linear(hidden_size, n_experts, bias=False, dtype=DTYPE)
        h, i = hidden_size ** -0.5, intermediate_size ** -0.5
        self.w_gate = nn.Parameter(torch.randn(n_experts, intermediate_size, hidden_size, dtype=DTYPE) * h)
        self.w_up = nn.Parameter(torch.randn(n_experts, intermediate_size, hidden_size, dtype=DTYPE) * h)
        self.w_down = nn.Parameter(torch.randn(n_experts, hidden_size, intermediate_size, dtype=DTYPE) * i)

    def forward(self, x):
        probs = torch.softmax(F.linear(x.float(), self.gate.weight.float()), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(x.dtype)
        out = torch.zeros_like(x)
        for e in range(self.n_experts):
            token, slot = torch.where(chosen == e)
            if token.numel() == 0:
                continue
            h = x[token]
            y = F.linear(F.silu(F.linear(h, self.w_gate[e])) * F.linear(h, self.w_up[e]), self.w_down[e])
            out.index_add_(0, token, y * weights[token, slot, None])
        return out


hidden_size = 4096
intermediate_size = 14336
n_experts = 8
top_k = 2
x_shape = [8, 4096]
x_stride = None


def get_inputs():
    return [_randn(x_shape, x_stride, torch.bfloat16)]


def get_init_inputs():
    return [hidden_size, intermediate_size, n_experts, top_k, True]


KBV_SHAPES = [
    {'hidden_size': 4096, 'intermediate_size': 14336, 'n_experts': 8, 'top_k': 2, 'x_shape': [8, 4096], 'x_stride': None},
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
