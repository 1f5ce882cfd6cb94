"""Shipped trace recipes: plain-PyTorch models at full width (2 layers), random bf16 weights made on the device.

A recipe (and a user entry point ``module:function``) is ``fn(device: str, size: str, **overrides) -> Workload``;
``size`` is ``full`` or ``tiny`` (same code, a tiny config, for CPU tests). Overrides a recipe accepts:
``prefill_tokens``, ``decode_steps``, ``batch`` (the decode batch for LLMs, the image batch for the ViT).

LLM workloads (``llama3_8b``, ``mixtral_8x7b``): one ``prefill`` step (batch 1 x ``prefill_tokens``, from an
empty cache, logits of the last position only), then ``decode_steps`` ``decode`` steps at batch ``batch``, step i
(0-based) writing position P+i and attending to the P+i+1 cached keys (P = ``prefill_tokens``). The decode batch's
cache is pre-filled with random values (as if its P tokens had been prefilled), so steps are re-runnable in order
without a reset. The ViT (``vit_l16``) runs one ``forward`` step.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from kbv.trace.capture import Workload
from kbv.trace.modules import MLP, Attention, GatedMLP, LayerNorm, MoE, RMSNorm, Rotary

SIZES = ("full", "tiny")
DTYPE = torch.bfloat16


@dataclass(frozen=True)
class LMConfig:
    """A Llama-style decoder (GQA, RoPE, RMSNorm); ``n_experts`` > 0 makes the feed-forward a MoE."""

    vocab: int
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    theta: float
    n_experts: int = 0
    top_k: int = 0


@dataclass(frozen=True)
class ViTConfig:
    """A ViT (pre-norm, CLS token, learned position embeddings)."""

    image: int
    patch: int
    hidden: int
    n_layers: int
    n_heads: int
    intermediate: int
    eps: float
    classes: int


LLAMA3_8B = LMConfig(vocab=128256, hidden=4096, n_layers=2, n_heads=32, n_kv_heads=8, head_dim=128,
                     intermediate=14336, eps=1e-5, theta=500000.0)
MIXTRAL_8X7B = LMConfig(vocab=32000, hidden=4096, n_layers=2, n_heads=32, n_kv_heads=8, head_dim=128,
                        intermediate=14336, eps=1e-5, theta=1e6, n_experts=8, top_k=2)
VIT_L16 = ViTConfig(image=224, patch=16, hidden=1024, n_layers=2, n_heads=16, intermediate=4096, eps=1e-6,
                    classes=1000)
TINY_LM = LMConfig(vocab=256, hidden=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, intermediate=128,
                   eps=1e-5, theta=500000.0)
TINY_MOE = LMConfig(vocab=256, hidden=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, intermediate=96,
                    eps=1e-5, theta=1e6, n_experts=4, top_k=2)
TINY_VIT = ViTConfig(image=32, patch=8, hidden=64, n_layers=2, n_heads=4, intermediate=128, eps=1e-6, classes=10)

LM_DEFAULTS = {"full": {"prefill_tokens": 2048, "decode_steps": 16, "batch": 8},
               "tiny": {"prefill_tokens": 16, "decode_steps": 3, "batch": 2}}
VIT_DEFAULTS = {"full": {"batch": 32}, "tiny": {"batch": 2}}


class DecoderLayer(nn.Module):
    """Pre-norm decoder layer with a KV cache ``[B, Hkv, S_max, D]`` held as buffers."""

    def __init__(self, c: LMConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.c = c
        self.attn_norm = RMSNorm(c.hidden, c.eps, dtype)
        self.q_proj = nn.Linear(c.hidden, c.n_heads * c.head_dim, bias=False, dtype=dtype)
        self.k_proj = nn.Linear(c.hidden, c.n_kv_heads * c.head_dim, bias=False, dtype=dtype)
        self.v_proj = nn.Linear(c.hidden, c.n_kv_heads * c.head_dim, bias=False, dtype=dtype)
        self.o_proj = nn.Linear(c.n_heads * c.head_dim, c.hidden, bias=False, dtype=dtype)
        self.rotary = Rotary(c.head_dim, c.theta)
        self.attn = Attention(c.n_heads, c.n_kv_heads, c.head_dim, causal=True)
        self.ffn_norm = RMSNorm(c.hidden, c.eps, dtype)
        self.ffn: nn.Module = (MoE(c.hidden, c.intermediate, c.n_experts, c.top_k, True, dtype) if c.n_experts
                               else GatedMLP(c.hidden, c.intermediate, dtype))
        self.k_cache = self.v_cache = torch.empty(0)

    def forward(self, x: torch.Tensor, start_pos: int) -> torch.Tensor:
        c, (b, s, _) = self.c, x.shape
        h = self.attn_norm(x)
        q = self.q_proj(h).view(b, s, c.n_heads, c.head_dim)
        k = self.k_proj(h).view(b, s, c.n_kv_heads, c.head_dim)
        v = self.v_proj(h).view(b, s, c.n_kv_heads, c.head_dim)
        q, k = self.rotary(q, k, start_pos)
        end = start_pos + s
        self.k_cache[:b, :, start_pos:end] = k.transpose(1, 2)
        self.v_cache[:b, :, start_pos:end] = v.transpose(1, 2)
        if start_pos == 0:  # prefill from an empty cache: attend to what was just computed
            keys, values = k.transpose(1, 2), v.transpose(1, 2)
        else:
            keys, values = self.k_cache[:b, :, :end], self.v_cache[:b, :, :end]
        o = self.attn(q.transpose(1, 2), keys, values)
        x = x + self.o_proj(o.transpose(1, 2).reshape(b, s, c.n_heads * c.head_dim))
        h = self.ffn_norm(x)
        h = self.ffn(h.view(b * s, c.hidden)).view(b, s, c.hidden) if c.n_experts else self.ffn(h)
        return x + h


class DecoderLM(nn.Module):
    """Embedding, decoder layers, final RMSNorm, LM head on the last position."""

    def __init__(self, c: LMConfig, dtype: torch.dtype = DTYPE) -> None:
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.vocab, c.hidden, dtype=dtype)
        self.layers = nn.ModuleList(DecoderLayer(c, dtype) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.hidden, c.eps, dtype)
        self.lm_head = nn.Linear(c.hidden, c.vocab, bias=False, dtype=dtype)

    def allocate_cache(self, batch: int, max_len: int) -> None:
        """Give every layer a KV cache filled with random values (stand-ins for already-prefilled sequences)."""
        for layer in self.layers:
            shape = (batch, self.c.n_kv_heads, max_len, self.c.head_dim)
            layer.k_cache = torch.randn(shape, dtype=self.embed.weight.dtype, device=self.embed.weight.device)
            layer.v_cache = torch.randn_like(layer.k_cache)

    def forward(self, tokens: torch.Tensor, start_pos: int) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, start_pos)
        return self.lm_head(self.norm(x[:, -1:]))


class ViTBlock(nn.Module):
    """Pre-norm ViT block: LayerNorm, fused qkv linear, non-causal attention, proj; LayerNorm, GELU MLP."""

    def __init__(self, c: ViTConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.c = c
        self.norm1 = LayerNorm(c.hidden, c.eps, dtype)
        self.qkv = nn.Linear(c.hidden, 3 * c.hidden, dtype=dtype)
        self.attn = Attention(c.n_heads, c.n_heads, c.hidden // c.n_heads, causal=False)
        self.proj = nn.Linear(c.hidden, c.hidden, dtype=dtype)
        self.norm2 = LayerNorm(c.hidden, c.eps, dtype)
        self.mlp = MLP(c.hidden, c.intermediate, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, s, 3, self.c.n_heads, h // self.c.n_heads).permute(2, 0, 3, 1, 4)
        o = self.attn(qkv[0], qkv[1], qkv[2])
        x = x + self.proj(o.transpose(1, 2).reshape(b, s, h))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """Vision transformer: conv2d patch embedding (kernel = stride = patch), CLS token, blocks, head on CLS."""

    def __init__(self, c: ViTConfig, dtype: torch.dtype = DTYPE) -> None:
        super().__init__()
        n_patches = (c.image // c.patch) ** 2
        self.patch_embed = nn.Conv2d(3, c.hidden, c.patch, stride=c.patch, dtype=dtype)
        self.cls_token = nn.Parameter(torch.randn(1, 1, c.hidden, dtype=dtype) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, n_patches + 1, c.hidden, dtype=dtype) * 0.02)
        self.blocks = nn.ModuleList(ViTBlock(c, dtype) for _ in range(c.n_layers))
        self.norm = LayerNorm(c.hidden, c.eps, dtype)
        self.head = nn.Linear(c.hidden, c.classes, dtype=dtype)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


def _check(size: str, defaults: dict[str, dict[str, int]], overrides: dict[str, Any]) -> dict[str, int]:
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, not {size!r}")
    unknown = set(overrides) - set(defaults[size])
    if unknown:
        raise TypeError(f"unknown workload options {sorted(unknown)} (known: {sorted(defaults[size])})")
    return {**defaults[size], **{k: int(v) for k, v in overrides.items() if v is not None}}


def _lm_workload(full: LMConfig, tiny: LMConfig, device: str, size: str, overrides: dict[str, Any]) -> Workload:
    o = _check(size, LM_DEFAULTS, overrides)
    c = full if size == "full" else tiny
    p, n, batch = o["prefill_tokens"], o["decode_steps"], o["batch"]
    with torch.device(device):
        torch.manual_seed(0)
        model = DecoderLM(c).eval().requires_grad_(False)
        model.allocate_cache(max(1, batch), p + n)
        prompt = torch.randint(0, c.vocab, (1, p))
        decode_tokens = [torch.randint(0, c.vocab, (batch, 1)) for _ in range(n)]
    steps: list[tuple[str, Callable[[], Any]]] = [("prefill", lambda: model(prompt, 0))]
    steps += [("decode", lambda i=i: model(decode_tokens[i], p + i)) for i in range(n)]
    config = {"layers": c.n_layers, "prefill_batch": 1, "prefill_tokens": p, "decode_steps": n, "decode_batch": batch,
              "model": {k: v for k, v in vars(c).items()}}
    return Workload(model=model, steps=steps, config=config)


def llama3_8b(device: str, size: str = "full", **overrides: Any) -> Workload:
    """Llama-3-8B, 2 layers: GQA 32/8 heads, head_dim 128, SwiGLU 14336, RoPE theta 5e5, vocab 128256."""
    return _lm_workload(LLAMA3_8B, TINY_LM, device, size, overrides)


def mixtral_8x7b(device: str, size: str = "full", **overrides: Any) -> Workload:
    """Mixtral-8x7B, 2 layers: GQA 32/8, 8 SwiGLU experts (14336) top-2 renormalised, theta 1e6, vocab 32000."""
    return _lm_workload(MIXTRAL_8X7B, TINY_MOE, device, size, overrides)


def vit_l16(device: str, size: str = "full", **overrides: Any) -> Workload:
    """ViT-L/16 at 224x224, 2 layers: hidden 1024, 16 heads, GELU MLP 4096, LayerNorm eps 1e-6."""
    o = _check(size, VIT_DEFAULTS, overrides)
    c = VIT_L16 if size == "full" else TINY_VIT
    with torch.device(device):
        torch.manual_seed(0)
        model = ViT(c).eval().requires_grad_(False)
        images = torch.randn(o["batch"], 3, c.image, c.image, dtype=DTYPE)
    return Workload(model=model, steps=[("forward", lambda: model(images))],
                    config={"layers": c.n_layers, "batch": o["batch"], "model": dict(vars(c))})


RECIPES: dict[str, Callable[..., Workload]] = {"llama3_8b": llama3_8b, "mixtral_8x7b": mixtral_8x7b,
                                               "vit_l16": vit_l16}


def load_entry(target: str) -> Callable[..., Workload]:
    """A shipped recipe by name, or ``module:function`` (a dotted module or a path to a ``.py`` file)."""
    if target in RECIPES:
        return RECIPES[target]
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{target!r} is neither a recipe ({', '.join(RECIPES)}) nor module:function")
    if module_name.endswith(".py") or "/" in module_name:
        path = Path(module_name).resolve()
        spec = importlib.util.spec_from_file_location(f"kbv_trace_entry_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise AttributeError(f"{module_name} has no callable {attr!r}")
    return fn


def build_workload(target: str, device: str, size: str, **overrides: Any) -> Workload:
    """Call the entry point; only the overrides actually given are passed (a user entry point may take none)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    workload = load_entry(target)(device, size, **given)
    if not isinstance(workload, Workload):
        raise TypeError(f"{target} returned {type(workload).__name__}, not kbv.trace.Workload")
    return workload
