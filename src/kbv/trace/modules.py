"""Building blocks of the trace recipes: the modules a kernel writer would fuse, marked for capture.

Each marked block has a class attribute ``kbv_kind`` and a method ``kbv_params() -> dict``; ``kbv.trace.capture``
hooks every such module and records its inputs, parameters and time. The kinds and parameter names are a contract
(the suite builder generates problem files from them):

====================  ==========================================================================================
kind                  params; forward
====================  ==========================================================================================
``rmsnorm``           hidden_size, eps; ``forward(x)``
``layernorm``         hidden_size, eps; ``forward(x)``
``rotary``            head_dim, theta; ``forward(q[B,S,H,D], k[B,S,Hkv,D], start_pos) -> (q_rot, k_rot)``
``attention``         n_heads, n_kv_heads, head_dim, causal; ``forward(q[B,H,Sq,D], k[B,Hkv,Skv,D], v) -> [B,H,Sq,D]``
``gated_mlp``         hidden_size, intermediate_size, activation ("silu"); ``forward(x)``
``mlp``               hidden_size, intermediate_size, activation ("gelu"); ``forward(x)``
``moe``               hidden_size, intermediate_size, n_experts, top_k, norm_topk_prob; ``forward(x[T, hidden])``
====================  ==========================================================================================

``attention.causal`` reports the masking of the last call (a causal layer runs unmasked for a single query, Sq=1,
as in decode), so a recorded entry says what was actually run.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """RMSNorm as Llama computes it: in fp32, then scaled by the weight in the input dtype."""

    kbv_kind = "rmsnorm"

    def __init__(self, hidden_size: int, eps: float, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.hidden_size, self.eps = hidden_size, eps
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)

    def kbv_params(self) -> dict[str, Any]:
        return {"hidden_size": self.hidden_size, "eps": self.eps}


class LayerNorm(nn.Module):
    """LayerNorm over the last dimension, with weight and bias."""

    kbv_kind = "layernorm"

    def __init__(self, hidden_size: int, eps: float, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.hidden_size, self.eps = hidden_size, eps
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(hidden_size, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.hidden_size,), self.weight, self.bias, self.eps)

    def kbv_params(self) -> dict[str, Any]:
        return {"hidden_size": self.hidden_size, "eps": self.eps}


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):
    """Rotary position embedding (rotate-half layout, as Llama), cos/sin computed per call from ``start_pos``."""

    kbv_kind = "rotary"

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        self.head_dim, self.theta = head_dim, theta
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor, start_pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(start_pos, start_pos + q.shape[1], device=q.device, dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(q.dtype)[None, :, None, :], emb.sin().to(q.dtype)[None, :, None, :]
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin

    def kbv_params(self) -> dict[str, Any]:
        return {"head_dim": self.head_dim, "theta": self.theta}


class Attention(nn.Module):
    """The scaled-dot-product core (``F.scaled_dot_product_attention``), grouped-query when n_kv_heads < n_heads.

    A causal layer masks only when Sq == Skv (prefill from an empty cache) and runs unmasked for Sq == 1 (decode);
    a prefix cache with Sq > 1 is not supported (top-left causal alignment would be wrong there).
    """

    kbv_kind = "attention"

    def __init__(self, n_heads: int, n_kv_heads: int, head_dim: int, causal: bool) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim, self.causal = n_heads, n_kv_heads, head_dim, causal
        self.last_causal = causal

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        sq, skv = q.shape[-2], k.shape[-2]
        causal = self.causal and sq > 1
        if causal and sq != skv:
            raise NotImplementedError(f"causal attention with Sq={sq} != Skv={skv} > 1 (chunked prefill)")
        self.last_causal = causal
        if self.n_kv_heads == self.n_heads:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        try:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        except TypeError:  # torch < 2.5: no enable_gqa
            rep = self.n_heads // self.n_kv_heads
            return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                                  is_causal=causal)

    def kbv_params(self) -> dict[str, Any]:
        return {"n_heads": self.n_heads, "n_kv_heads": self.n_kv_heads, "head_dim": self.head_dim,
                "causal": self.last_causal}


class GatedMLP(nn.Module):
    """SwiGLU feed-forward: ``down(silu(gate(x)) * up(x))``, no biases."""

    kbv_kind = "gated_mlp"

    def __init__(self, hidden_size: int, intermediate_size: int, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    def kbv_params(self) -> dict[str, Any]:
        return {"hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size, "activation": "silu"}


class MLP(nn.Module):
    """Transformer MLP: ``fc2(gelu(fc1(x)))`` with biases, exact (erf) GELU."""

    kbv_kind = "mlp"

    def __init__(self, hidden_size: int, intermediate_size: int, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.fc1 = nn.Linear(hidden_size, intermediate_size, dtype=dtype)
        self.fc2 = nn.Linear(intermediate_size, hidden_size, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))

    def kbv_params(self) -> dict[str, Any]:
        return {"hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size, "activation": "gelu"}


class MoE(nn.Module):
    """Sparse mixture of experts as Mixtral: router linear, fp32 softmax, top-k (renormalised when
    ``norm_topk_prob``), each expert a ``GatedMLP`` run on its tokens, results scattered back with ``index_add_``."""

    kbv_kind = "moe"

    def __init__(self, hidden_size: int, intermediate_size: int, n_experts: int, top_k: int, norm_topk_prob: bool,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.n_experts, self.top_k, self.norm_topk_prob = n_experts, top_k, norm_topk_prob
        self.gate = nn.Linear(hidden_size, n_experts, bias=False, dtype=dtype)
        self.experts = nn.ModuleList(GatedMLP(hidden_size, intermediate_size, dtype) for _ in range(n_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = F.softmax(self.gate(x), dim=-1, dtype=torch.float32)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(x.dtype)
        out = torch.zeros_like(x)
        mask = F.one_hot(chosen, self.n_experts).permute(2, 1, 0)  # [expert, k, token]
        for e in (mask.sum(dim=(1, 2)) > 0).nonzero().flatten().tolist():
            slot, token = torch.where(mask[e])
            out.index_add_(0, token, self.experts[e](x[token]) * weights[token, slot, None])
        return out

    def kbv_params(self) -> dict[str, Any]:
        return {"hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
                "n_experts": self.n_experts, "top_k": self.top_k, "norm_topk_prob": self.norm_topk_prob}


KINDS = ("rmsnorm", "layernorm", "rotary", "attention", "gated_mlp", "mlp", "moe")
