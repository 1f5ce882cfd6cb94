"""Roofline bounds for kbv problems: FLOPs by precision class, minimum bytes, and the time no kernel can beat.

    T_roofline = max( sum_p FLOPs_p / peak_p ,  bytes / bandwidth ),   attainment S = T_roofline / T_measured

**FLOPs** are counted over one forward of the reference (``count``), on the ``meta`` device where it works (no
memory is allocated, so default sizes of several GB cost nothing), else on the CPU (see ``count``):

- *Tensor FLOPs* come from ``torch.utils.flop_counter.FlopCounterMode`` (matmul, conv, attention; 2 FLOPs per
  multiply-add; conv and addmm biases are not in its formulas). kbv adds formulas for ``mv``, ``addmv``, ``dot``,
  ``vdot`` and ``addbmm`` (2 FLOPs per multiply-add). Each op's FLOPs go to the precision class of its inputs:
  fp32 -> ``tf32`` (kbv's verified baseline runs fp32 matmuls with TF32, and both baselines run cuDNN convolutions
  with TF32; ``fp32_matmul="ieee"`` sends fp32 *matmuls* to ``fp32``, the SIMT roof, as the standard baseline runs
  them), bf16 -> ``bf16``, fp16 -> ``fp16``, float8 -> ``fp8``.
- *Attention* (``F.scaled_dot_product_attention``) is counted semantically with FlopCounterMode's own SDPA formula
  (two batched matmuls) times the share of (query, key) pairs a causal mask keeps (``is_causal=True``; top-left
  aligned, as torch defines it), plus 6 SIMT FLOPs per kept score (scale 1, softmax 5); the ops torch runs inside
  it (a materialised mask, full-size matmuls) are not counted again. An explicit ``attn_mask`` is counted in full
  (its contents are data).
- *SIMT FLOPs* (class ``fp32``, whatever the dtype) come from a per-element cost table (``SIMT_COSTS``) applied to
  every other aten op of the forward through a ``TorchDispatchMode``: a cost per output element (``out``) or per
  element of the first tensor input (``in``). Arithmetic, comparisons and selects are 1 (``exp``, ``log``,
  ``sqrt``, ``rsqrt`` too), ``sigmoid``/``tanh``/``erf`` 4, ``silu`` 5, ``gelu`` 8; reductions (``sum``, ``amax``,
  ``argmax``, ...) 1 per input element (``mean`` 1 more per output element); ``softmax``/``log_softmax`` 5 per
  element; ``layer_norm``, ``group_norm`` and training-mode ``batch_norm`` 8 per element (eval-mode batch norm 4);
  pooling one per window element per output. The bias of ``addmm``/``baddbmm``/``addmv`` and of a convolution with
  a bias is 1 SIMT FLOP per output element. Views, copies, casts, concatenation, indexing and creation ops are 0
  (``ZERO_COST``); any other op is costed 0 and listed in ``Counts.uncounted``.

**Bytes** are the minimum any implementation must move: each unique input tensor, parameter/buffer and output
tensor read or written once at its dtype's size (tensors de-duplicated by storage, offset, shape, stride and dtype,
so an output that *is* an input counts once). Intermediates are free (a perfect fusion).

**Regime**: ``memory`` when the intensity (total FLOPs / bytes) is below the ridge point of the *dominant*
precision (the class with the largest FLOPs_p / peak_p), else ``compute``. ``launch_bound`` is set when
``t_roofline_ms < LAUNCH_BOUND_MS`` (0.01 ms = 10 us): a single CUDA kernel launch plus kbv's device-wide
synchronize costs several microseconds on an H100/H200, so below 10 us the roofline is not attainable and
attainment mostly measures launch overhead. An attainment above 1 (faster than the bound) means the count is wrong
or the kernel skips work: it is flagged ``above_roofline``, never reported as a win.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from kbv.hardware import Ceilings, ceilings_for

# Bump when a counting rule changes: part of the counts cache key.
COUNT_RULES_VERSION = 1

LAUNCH_BOUND_MS = 0.01  # t_roofline below 10 us: launch-overhead bound (see the module docstring)
ABOVE_ROOFLINE = 1.0  # attainment above this is flagged above_roofline
CPU_FALLBACK_BYTES = 64 << 20  # a meta failure is recounted on the CPU at the requested size up to this much state

ATTENTION_SIMT_PER_SCORE = 6  # scale (1) + softmax (5) per kept (query, key) score


class RooflineError(RuntimeError):
    """A problem whose FLOPs and bytes could not be counted."""


# ---------------------------------------------------------------------------------------------------------------
# Per-op cost tables

_CONV_OPS = frozenset({
    "convolution", "_convolution", "convolution_overrideable", "cudnn_convolution", "cudnn_convolution_transpose",
    "mkldnn_convolution", "_slow_conv2d_forward", "slow_conv3d_forward", "slow_conv_transpose2d",
    "slow_conv_transpose3d", "slow_conv_dilated2d", "slow_conv_dilated3d", "_nnpack_spatial_convolution",
    "thnn_conv2d", "miopen_convolution",
})

_COST_ONE = (
    "add", "sub", "rsub", "mul", "div", "neg", "abs", "sign", "sgn", "remainder", "fmod", "floor", "ceil", "round",
    "trunc", "frac", "maximum", "minimum", "fmax", "fmin", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
    "logical_or", "logical_not", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "where",
    "masked_fill", "relu", "threshold", "clamp_min", "clamp_max", "reciprocal", "exp", "exp2", "expm1", "log",
    "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "square", "isnan", "isinf", "isfinite",
    "nan_to_num", "copysign", "heaviside", "relu6",
)
SIMT_COSTS: dict[str, tuple[float, str]] = {name: (1.0, "out") for name in _COST_ONE}
SIMT_COSTS.update({
    # pointwise, per output element
    "clamp": (2.0, "out"), "hardtanh": (2.0, "out"), "leaky_relu": (2.0, "out"), "addcmul": (2.0, "out"),
    "addcdiv": (2.0, "out"), "xlogy": (2.0, "out"), "softshrink": (2.0, "out"), "hardshrink": (2.0, "out"),
    "prelu": (2.0, "out"), "_prelu_kernel": (2.0, "out"), "lerp": (3.0, "out"), "softplus": (3.0, "out"),
    "elu": (3.0, "out"), "celu": (3.0, "out"), "hardsigmoid": (3.0, "out"), "logit": (3.0, "out"),
    "sigmoid": (4.0, "out"), "tanh": (4.0, "out"), "erf": (4.0, "out"), "erfc": (4.0, "out"),
    "hardswish": (4.0, "out"), "selu": (4.0, "out"), "silu": (5.0, "out"), "log_sigmoid_forward": (5.0, "out"),
    "gelu": (8.0, "out"), "mish": (8.0, "out"), "_fused_dropout": (2.0, "out"), "native_dropout": (2.0, "out"),
    # reductions, per element of the input
    "sum": (1.0, "in"), "nansum": (1.0, "in"), "prod": (1.0, "in"), "amax": (1.0, "in"), "amin": (1.0, "in"),
    "max": (1.0, "in"), "min": (1.0, "in"), "aminmax": (1.0, "in"), "argmax": (1.0, "in"), "argmin": (1.0, "in"),
    "all": (1.0, "in"), "any": (1.0, "in"), "cumsum": (1.0, "in"), "cumprod": (1.0, "in"), "logcumsumexp": (4.0, "in"),
    "linalg_vector_norm": (2.0, "in"), "norm": (2.0, "in"), "var": (4.0, "in"), "std": (4.0, "in"),
    "var_mean": (4.0, "in"), "std_mean": (4.0, "in"), "logsumexp": (4.0, "in"),
    # softmax family, per element
    "_softmax": (5.0, "in"), "_log_softmax": (5.0, "in"), "_safe_softmax": (5.0, "in"),
    # normalisations, per element of the input
    "native_layer_norm": (8.0, "in"), "native_group_norm": (8.0, "in"), "_fused_rms_norm": (5.0, "in"),
    "_native_batch_norm_legit_no_training": (4.0, "in"),
    # losses
    "mse_loss": (3.0, "in"), "l1_loss": (3.0, "in"), "smooth_l1_loss": (4.0, "in"), "huber_loss": (4.0, "in"),
    "binary_cross_entropy": (6.0, "in"), "binary_cross_entropy_with_logits": (8.0, "in"),
})

ZERO_COST = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "t", "transpose", "permute", "expand", "expand_as",
    "squeeze", "unsqueeze", "slice", "select", "split", "split_with_sizes", "unsafe_split", "unsafe_split_with_sizes",
    "unbind", "chunk", "narrow", "as_strided", "detach", "alias", "lift_fresh", "lift_fresh_copy", "clone", "copy",
    "_to_copy", "to", "contiguous", "cat", "stack", "flip", "roll", "repeat", "tile", "index", "index_select",
    "gather", "scatter", "index_put", "embedding", "empty", "empty_like", "empty_strided", "new_empty",
    "new_empty_strided", "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
    "new_full", "fill", "zero", "tril", "triu", "scalar_tensor", "arange", "rand", "randn", "randint", "rand_like",
    "randn_like", "bernoulli", "constant_pad_nd", "reflection_pad1d", "reflection_pad2d", "replication_pad1d",
    "replication_pad2d", "pad", "sort", "argsort", "topk", "masked_select", "nonzero", "diagonal", "movedim",
    "view_as_real", "view_as_complex", "_local_scalar_dense", "pixel_shuffle", "pixel_unshuffle", "im2col", "col2im",
    "channel_shuffle", "native_channel_shuffle", "unfold", "set", "resize", "_assert_async", "sym_size", "sym_stride",
    "sym_numel", "sym_storage_offset", "is_same_size", "_has_compatible_shallow_copy_type", "one_hot", "upsample_nearest1d",
    "upsample_nearest2d", "upsample_nearest3d", "_unsafe_index", "slice_scatter", "select_scatter", "as_strided_scatter",
    "diagonal_scatter", "view_copy", "permute_copy", "expand_copy", "t_copy", "transpose_copy", "unsqueeze_copy",
    "squeeze_copy", "split_copy", "unbind_copy",
})


def _numel(x: Any) -> int:
    return int(x.numel()) if isinstance(x, torch.Tensor) else 0


def _first_tensor(values: Sequence[Any]) -> torch.Tensor | None:
    for v in values:
        if isinstance(v, torch.Tensor):
            return v
    return None


def _first_out(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    flat, _ = tree_flatten(out)
    return _first_tensor(flat)


def _window(arg: Any) -> int:
    if isinstance(arg, int):
        return arg * arg
    if isinstance(arg, (list, tuple)) and arg:
        return math.prod(int(a) for a in arg) if len(arg) > 1 else int(arg[0]) ** 2
    return 1


def _pool_window(name: str, args: Sequence[Any]) -> int:
    kernel = args[1] if len(args) > 1 else 1
    if isinstance(kernel, (list, tuple)) and len(kernel) == 1:
        dims = 1 if name.endswith("1d") else 3 if name.endswith("3d") else 2
        return int(kernel[0]) ** dims
    if name.endswith("3d"):
        return kernel ** 3 if isinstance(kernel, int) else math.prod(kernel)
    return _window(kernel)


def _bool_arg(args: Sequence[Any], default: bool = True) -> bool:
    for a in args:
        if isinstance(a, bool):
            return a
    return default


def _special_simt(name: str, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> float | None:
    """Ops whose SIMT cost is not a flat per-element number; None when ``name`` is not one of them."""
    first_in = _first_tensor(args)
    first_out = _first_out(out)
    if name in ("addmm", "baddbmm", "addmv", "addbmm"):  # the bias / accumulate term of a tensor op
        return float(_numel(first_out))
    if name in ("convolution", "_convolution", "convolution_overrideable"):
        bias = args[2] if len(args) > 2 else kwargs.get("bias")
        return float(_numel(first_out)) if isinstance(bias, torch.Tensor) else 0.0
    if name == "pow":
        exponent = args[1] if len(args) > 1 else kwargs.get("exponent")
        cheap = isinstance(exponent, (int, float)) and exponent in (2, 1, 0.5, -1, -0.5, 0)
        return (1.0 if cheap else 2.0) * _numel(first_out)
    if name == "mean" or name == "nanmean":
        return float(_numel(first_in) + _numel(first_out))
    if name in ("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
                "cudnn_batch_norm", "miopen_batch_norm", "_batch_norm_with_update", "_batch_norm_no_update"):
        training = name != "_batch_norm_no_update" and (name == "_batch_norm_with_update" or _bool_arg(args[3:]))
        return (8.0 if training else 4.0) * _numel(first_in)
    if name in ("nll_loss_forward", "nll_loss2d_forward", "nll_loss_nd"):
        target = args[1] if len(args) > 1 else None
        return float(_numel(target))
    if name in ("max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "max_pool3d_with_indices",
                "avg_pool1d", "avg_pool2d", "avg_pool3d"):
        return float(_numel(first_out) * _pool_window(name, args))
    if name in ("_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_avg_pool1d", "adaptive_max_pool2d",
                "adaptive_max_pool3d", "adaptive_max_pool1d"):
        return float(_numel(first_in) + _numel(first_out))
    if name in ("upsample_bilinear2d", "_upsample_bilinear2d_aa", "upsample_linear1d"):
        return 8.0 * _numel(first_out)
    if name in ("upsample_bicubic2d", "upsample_trilinear3d"):
        return 16.0 * _numel(first_out)
    if name in ("scatter_add", "scatter_reduce", "index_add", "embedding_bag", "_embedding_bag"):
        return float(_numel(args[2] if name != "embedding_bag" and len(args) > 2 else first_in))
    return None


# ---------------------------------------------------------------------------------------------------------------
# Counting modes

def _mv_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * a_shape[0] * a_shape[1]


def _addmv_flop(bias_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * a_shape[0] * a_shape[1]


def _dot_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * a_shape[0]


def _addbmm_flop(bias_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    b, m, k = a_shape
    return 2 * b * m * k * b_shape[2]


def _cpu_sdpa_flop(q_shape, k_shape, v_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(q_shape, k_shape, v_shape)


def _custom_formulas() -> dict[Any, Callable[..., int]]:
    aten = torch.ops.aten
    table: dict[Any, Callable[..., int]] = {aten.mv: _mv_flop, aten.addmv: _addmv_flop, aten.dot: _dot_flop,
                                            aten.vdot: _dot_flop, aten.addbmm: _addbmm_flop}
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        table[aten._scaled_dot_product_flash_attention_for_cpu] = _cpu_sdpa_flop
    return table


def _precision_class(dtype: torch.dtype | None, tf32: bool) -> str:
    if dtype == torch.float32:
        return "tf32" if tf32 else "fp32"
    if dtype == torch.bfloat16:
        return "bf16"
    if dtype == torch.float16:
        return "fp16"
    if dtype is not None and "float8" in str(dtype):
        return "fp8"
    if dtype == torch.float64:
        return "fp64"
    return str(dtype).replace("torch.", "") if dtype is not None else "unknown"


def _op_name(func: Any) -> str:
    name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else getattr(func, "__name__", str(func))
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]  # in-place variants cost what the out-of-place op costs
    return name


class _Counter(TorchDispatchMode):
    """Attributes FlopCounterMode's FLOPs to each op and its precision class, and adds SIMT FLOPs from the table.

    Entered *above* a FlopCounterMode: each op passes through here first, then through the FlopCounterMode, whose
    total is read before and after to get the op's tensor FLOPs."""

    def __init__(self, flop_counter: FlopCounterMode, fp32_matmul: str, conv_tf32: bool):
        super().__init__()
        self.fcm = flop_counter
        self.fp32_matmul = fp32_matmul
        self.conv_tf32 = conv_tf32
        self.flops: dict[str, float] = defaultdict(float)
        self.by_op: dict[str, float] = defaultdict(float)
        self.uncounted: set[str] = set()
        self.suppress = 0

    def add(self, cls: str, op: str, flops: float) -> None:
        if flops:
            self.flops[cls] += flops
            self.by_op[op] += flops

    def tensor_class(self, dtype: torch.dtype | None, conv: bool) -> str:
        tf32 = self.conv_tf32 if conv else self.fp32_matmul == "tf32"
        return _precision_class(dtype, tf32)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.suppress:
            return func(*args, **kwargs)
        before = self.fcm.get_total_flops()
        out = func(*args, **kwargs)
        tensor = self.fcm.get_total_flops() - before
        name = _op_name(func)
        if tensor:
            first = _first_tensor([a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()])
            dtype = first.dtype if first is not None else None
            self.add(self.tensor_class(dtype, name in _CONV_OPS), name, float(tensor))
        simt = _special_simt(name, args, kwargs, out)
        if simt is None:
            if name in SIMT_COSTS:
                cost, basis = SIMT_COSTS[name]
                n = _numel(_first_tensor(args)) if basis == "in" else _numel(_first_out(out))
                simt = cost * n
            else:
                simt = 0.0
                if not tensor and name not in ZERO_COST:
                    self.uncounted.add(name)
        self.add("fp32", name, simt)
        return out


def _causal_pairs(s_q: int, s_k: int) -> int:
    """(query, key) pairs a top-left-aligned causal mask keeps: sum over rows i of min(i + 1, s_k)."""
    full = min(s_q, s_k)
    return full * (full + 1) // 2 + max(0, s_q - s_k) * s_k


class _AttentionMode(TorchFunctionMode):
    """Counts F.scaled_dot_product_attention semantically (causal masks keep only their triangle) and keeps the
    ops torch runs inside it from being counted again."""

    def __init__(self, counter: _Counter):
        super().__init__()
        self.counter = counter
        self.causal_calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not torch._C._nn.scaled_dot_product_attention or self.counter.suppress:
            return func(*args, **kwargs)
        params = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
        bound = dict(zip(params, args)) | kwargs
        q, k, v = bound["query"], bound["key"], bound["value"]
        causal = bool(bound.get("is_causal", False))

        def four_d(shape: torch.Size) -> tuple[int, int, int, int]:
            lead = list(shape[:-2])
            heads = lead[-1] if len(lead) >= 2 else 1
            batch = math.prod(lead[:-1]) if len(lead) >= 2 else (lead[0] if lead else 1)
            return (int(batch), int(heads), int(shape[-2]), int(shape[-1]))

        qs, ks, vs = four_d(q.shape), four_d(k.shape), four_d(v.shape)
        full = sdpa_flop_count(qs, ks, vs)
        b, h, s_q, _ = qs
        s_k = ks[2]
        kept = _causal_pairs(s_q, s_k) if causal else s_q * s_k
        share = kept / (s_q * s_k) if s_q * s_k else 0.0
        c = self.counter
        c.add(c.tensor_class(q.dtype, conv=False), "scaled_dot_product_attention", full * share)
        c.add("fp32", "scaled_dot_product_attention", ATTENTION_SIMT_PER_SCORE * b * h * kept)
        self.causal_calls += int(causal)
        c.suppress += 1
        try:
            return func(*args, **kwargs)
        finally:
            c.suppress -= 1


# ---------------------------------------------------------------------------------------------------------------
# Counts

@dataclass
class Counts:
    """FLOPs per precision class and minimum bytes of one forward of a problem's reference."""

    problem: str
    precision: str
    profile: str | None
    device: str  # where the forward ran: "meta" (no allocation) or "cpu"
    flops: dict[str, int]
    bytes: int
    bytes_breakdown: dict[str, int]
    by_op: dict[str, int] = field(default_factory=dict)
    uncounted: list[str] = field(default_factory=list)
    fp32_matmul: str = "tf32"
    fallback: str | None = None  # why the count did not run on meta at the requested size, when it did not
    notes: list[str] = field(default_factory=list)
    shapes: dict[str, Any] = field(default_factory=dict)
    rules_version: int = COUNT_RULES_VERSION

    @property
    def total_flops(self) -> int:
        return int(sum(self.flops.values()))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Counts":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def _load(path: Path, profile: str | None, shape: dict[str, Any] | None = None) -> ModuleType:
    """Import a problem file under a private module name (never ``kbv_problem``), with a size profile and then one
    shape's overrides applied."""
    from kbv.worker.loading import apply_sizes, import_file

    name = f"kbv_roofline_problem_{next(_module_ids)}"
    try:
        module = import_file(path, name)
    finally:
        sys.modules.pop(name, None)
    return apply_sizes(module, profile, shape)


_module_ids = itertools.count()


def _storage_key(t: torch.Tensor) -> tuple[Any, ...]:
    try:
        storage = t.untyped_storage()._cdata
    except Exception:  # tensor subclasses without a plain storage
        storage = id(t)
    return (storage, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def minimum_bytes(inputs: Sequence[Any], model: torch.nn.Module | None, outputs: Any) -> dict[str, int]:
    """Bytes of each unique input, parameter/buffer and output tensor, once each: ``{"inputs", "state",
    "outputs"}``. An output that is an input (same storage, offset, shape, stride, dtype) is counted with the
    inputs only."""
    seen: set[tuple[Any, ...]] = set()
    totals = {"inputs": 0, "state": 0, "outputs": 0}

    def add(t: Any, bucket: str) -> None:
        if not isinstance(t, torch.Tensor):
            return
        key = _storage_key(t)
        if key in seen:
            return
        seen.add(key)
        totals[bucket] += t.numel() * t.element_size()

    for t in tree_flatten(list(inputs))[0]:
        add(t, "inputs")
    if model is not None:
        for p in model.parameters():
            add(p, "state")
        for b in model.buffers():
            add(b, "state")
    for t in tree_flatten(outputs)[0]:
        add(t, "outputs")
    return totals


class _MetaFailure(Exception):
    def __init__(self, stage: str, message: str, state_bytes: int | None):
        super().__init__(message)
        self.stage = stage
        self.state_bytes = state_bytes


def _count_once(path: Path, profile: str | None, precision: str, device: str, fp32_matmul: str, conv_tf32: bool,
                mode: str | None, seed: int, shape: dict[str, Any] | None = None) -> Counts:
    from kbv.worker.inputs import make_inputs
    from kbv.worker.loading import build_model, init_inputs, shapes_of

    module = _load(path, profile, shape)
    run_mode = mode or getattr(module, "KBV_MODE", "train")
    stage = "construction"
    state_bytes: int | None = None
    try:
        with torch.random.fork_rng(devices=[]):
            model = build_model(module.Model, init_inputs(module), seed, device, precision, run_mode)
            stage = "inputs"
            inputs = make_inputs(module, seed, device, precision)
        sizes = minimum_bytes(inputs, model, None)
        state_bytes = sizes["inputs"] + sizes["state"]
        stage = "forward"
        fcm = FlopCounterMode(display=False, custom_mapping=_custom_formulas())
        counter = _Counter(fcm, fp32_matmul, conv_tf32)
        attention = _AttentionMode(counter)
        with torch.random.fork_rng(devices=[]), torch.no_grad(), fcm, counter, attention:
            outputs = model(*inputs)
    except Exception as exc:
        if device != "meta":
            raise
        raise _MetaFailure(stage, f"{type(exc).__name__}: {exc}", state_bytes) from exc
    breakdown = minimum_bytes(inputs, model, outputs)
    notes = []
    if attention.causal_calls:
        notes.append("causal attention counted at the (query, key) pairs its mask keeps")
    return Counts(
        problem=str(path), precision=precision, profile=profile, device=device,
        flops={k: int(round(v)) for k, v in sorted(counter.flops.items()) if v},
        bytes=int(sum(breakdown.values())), bytes_breakdown=breakdown,
        by_op={k: int(round(v)) for k, v in sorted(counter.by_op.items(), key=lambda kv: -kv[1])},
        uncounted=sorted(counter.uncounted), fp32_matmul=fp32_matmul, notes=notes, shapes=shapes_of(module),
    )


def count(problem_path: str | Path, profile: str | None = None, precision: str = "fp32", *,
          fp32_matmul: str = "tf32", conv_tf32: bool = True, mode: str | None = None, seed: int = 0,
          shape: dict[str, Any] | None = None) -> Counts:
    """Count FLOPs (per precision class) and minimum bytes of one forward of a problem's reference.

    Runs on the ``meta`` device (nothing is allocated; shapes come from ``get_inputs()`` under ``torch.device
    ("meta")``). If the problem cannot run on meta (data-dependent code, ``.item()``, ...), it is counted on the
    CPU: at the requested size when the meta run got far enough to show that its inputs, parameters and buffers
    take at most ``CPU_FALLBACK_BYTES``, else at the ``small`` profile. ``Counts.device``, ``Counts.profile`` and
    ``Counts.fallback`` say what happened; a count at another profile than requested does not describe the
    requested size. ``profile=None`` (or ``"default"``) means the default sizes. ``fp32_matmul``: ``"tf32"`` (the
    verified baseline) or ``"ieee"`` (the standard one) for the class fp32 matmuls count in; ``mode``:
    ``"train"``/``"eval"`` (default: the problem's ``KBV_MODE``, else train, as kbv runs it); ``shape``: one
    shape's module-constant overrides, applied after the profile (multi-shape problems).
    """
    if fp32_matmul not in ("tf32", "ieee"):
        raise ValueError("fp32_matmul must be 'tf32' or 'ieee'")
    from kbv.worker.loading import DTYPES

    if precision not in DTYPES:
        raise ValueError(f"precision must be one of {sorted(DTYPES)}")
    path = Path(problem_path).resolve()
    profile = None if profile in (None, "default") else profile
    try:
        return _count_once(path, profile, precision, "meta", fp32_matmul, conv_tf32, mode, seed, shape)
    except _MetaFailure as failure:
        meta_error = f"meta {failure.stage} failed ({failure})"
        has_small = "small" in getattr(_load(path, None), "KBV_PROFILES", {})
        if shape and not (failure.state_bytes is not None and failure.state_bytes <= CPU_FALLBACK_BYTES):
            raise RooflineError(f"{path.name}: {meta_error}; a shape is counted at its own size only") from None
        if failure.state_bytes is not None and failure.state_bytes <= CPU_FALLBACK_BYTES:
            cpu_profile, why = profile, "inputs and state are small: counted on the CPU at the requested size"
        elif profile == "small":
            cpu_profile, why = profile, "counted on the CPU at the requested small profile"
        elif has_small:
            cpu_profile, why = "small", "counted on the CPU at the small profile, NOT the requested size"
        else:
            raise RooflineError(f"{path.name}: {meta_error}, and it has no small profile to count on the CPU") \
                from None
        counts = _count_once(path, cpu_profile, precision, "cpu", fp32_matmul, conv_tf32, mode, seed, shape)
        counts.fallback = f"{meta_error}; {why}"
        return counts


# ---------------------------------------------------------------------------------------------------------------
# Roofline

def _median(summary: Any) -> float | None:
    value = summary.get("median") if isinstance(summary, dict) else summary
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None


@dataclass
class Roofline:
    """The roofline bound of a problem's counts on a device's ceilings."""

    counts: Counts
    ceilings: Ceilings
    launch_threshold_ms: float = LAUNCH_BOUND_MS

    def __post_init__(self) -> None:
        for cls in self.counts.flops:
            self.ceilings.peak(cls)  # KeyError naming the missing ceiling

    @property
    def flops(self) -> dict[str, int]:
        return dict(self.counts.flops)

    @property
    def bytes(self) -> int:
        return self.counts.bytes

    @property
    def total_flops(self) -> int:
        return self.counts.total_flops

    @property
    def intensity(self) -> float:
        """FLOP per byte (total FLOPs of every class over the minimum bytes)."""
        return self.total_flops / self.bytes if self.bytes else math.inf

    @property
    def compute_ms(self) -> dict[str, float]:
        return {cls: 1e3 * f / self.ceilings.peak(cls) for cls, f in self.counts.flops.items()}

    @property
    def t_compute_ms(self) -> float:
        return sum(self.compute_ms.values())

    @property
    def t_memory_ms(self) -> float:
        return 1e3 * self.bytes / self.ceilings.bandwidth

    @property
    def t_roofline_ms(self) -> float:
        return max(self.t_compute_ms, self.t_memory_ms)

    @property
    def dominant_precision(self) -> str | None:
        """The class with the largest FLOPs_p / peak_p (None without FLOPs)."""
        times = self.compute_ms
        return max(times, key=times.get) if times else None

    @property
    def ridge(self) -> float | None:
        dom = self.dominant_precision
        return self.ceilings.ridge(dom) if dom else None

    @property
    def regime(self) -> str:
        ridge = self.ridge
        return "memory" if ridge is None or self.intensity < ridge else "compute"

    @property
    def launch_bound(self) -> bool:
        return self.t_roofline_ms < self.launch_threshold_ms

    def attainment(self, t_measured_ms: float | None) -> float | None:
        """S = t_roofline / t_measured (None for a missing or non-positive time). S > 1 is flagged
        (``above_roofline``): a counting bug or a kernel that skips work."""
        t = _median(t_measured_ms)
        return self.t_roofline_ms / t if t is not None else None

    @staticmethod
    def above_roofline(attainment: float | None) -> bool:
        return attainment is not None and attainment > ABOVE_ROOFLINE

    def to_json(self) -> dict[str, Any]:
        c = self.counts
        return {
            "flops": self.flops, "bytes": self.bytes, "intensity": self.intensity, "regime": self.regime,
            "t_roofline_ms": self.t_roofline_ms,
            "ceilings": {k: v for k, v in self.ceilings.to_json().items() if k != "details"},
            "t_compute_ms": self.t_compute_ms, "t_memory_ms": self.t_memory_ms,
            "dominant_precision": self.dominant_precision, "ridge": self.ridge, "launch_bound": self.launch_bound,
            "counted": {"device": c.device, "profile": c.profile, "precision": c.precision,
                        "fp32_matmul": c.fp32_matmul, "fallback": c.fallback, "uncounted": c.uncounted,
                        "bytes_breakdown": c.bytes_breakdown, "notes": c.notes, "rules_version": c.rules_version},
        }

    def record_section(self, timing_ms: dict[str, Any]) -> dict[str, Any]:
        """The ``roofline`` section of a kbv record, from the record's ``timing_ms``: the bound plus the attainment
        of the candidate (its verified median; its standard one where only the standard baseline was timed) and of
        both reference baselines; ``above_roofline`` lists those with S > 1."""
        cand_key = next((k for k in ("candidate_verified", "candidate_standard") if _median(timing_ms.get(k))), None)
        times = {"candidate": timing_ms.get(cand_key) if cand_key else None,
                 "reference_verified": timing_ms.get("reference_verified"),
                 "reference_standard": timing_ms.get("reference_standard")}
        attainment = {name: self.attainment(t) for name, t in times.items()}
        section = self.to_json()
        section["attainment"] = attainment
        section["candidate_timing"] = cand_key.split("_", 1)[1] if cand_key else None
        section["above_roofline"] = sorted(n for n, s in attainment.items() if self.above_roofline(s))
        return section


def analyze(problem_path: str | Path, device: str = "H200 SXM", *, profile: str | None = None,
            precision: str = "fp32", fp32_matmul: str = "tf32", cache_dir: str | Path | None = None,
            prefer_measured: bool = True) -> Roofline:
    """Count a problem and bound it on a device (measured ceilings under ``cache_dir`` preferred)."""
    counts = count(problem_path, profile, precision, fp32_matmul=fp32_matmul)
    return Roofline(counts, ceilings_for(device, cache_dir, prefer_measured))


# ---------------------------------------------------------------------------------------------------------------
# Counting outside the calling process, with a cache (for the trusted parent, which never imports problem code)

def counts_key(problem_path: str | Path, profile: str | None, precision: str, fp32_matmul: str = "tf32",
               shape: dict[str, Any] | None = None) -> str:
    source = Path(problem_path).read_bytes()
    material = json.dumps({"source": hashlib.sha256(source).hexdigest(), "profile": profile, "shape": shape,
                           "precision": precision, "fp32_matmul": fp32_matmul, "torch": torch.__version__,
                           "rules": COUNT_RULES_VERSION}, sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()


def count_isolated(problem_path: str | Path, profile: str | None = None, precision: str = "fp32", *,
                   fp32_matmul: str = "tf32", timeout: float = 300.0, shape: dict[str, Any] | None = None) -> Counts:
    """``count`` in a fresh Python process (``python -m kbv.roofline --counts``), killed after ``timeout`` s."""
    cmd = [sys.executable, "-m", "kbv.roofline", "--problem", str(problem_path), "--precision", precision,
           "--fp32-matmul", fp32_matmul, "--counts"]
    if profile not in (None, "default"):
        cmd += ["--profile", str(profile)]
    if shape:
        cmd += ["--shape", json.dumps(shape)]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise RooflineError(f"counting {problem_path} took more than {timeout:g} s") from None
    if done.returncode != 0:
        raise RooflineError(f"counting {problem_path} failed: {done.stderr.strip()[-2000:]}")
    return Counts.from_json(json.loads(done.stdout))


def counts_cached(problem_path: str | Path, profile: str | None, precision: str, cache_dir: str | Path, *,
                  fp32_matmul: str = "tf32", isolated: bool = True, timeout: float = 300.0,
                  shape: dict[str, Any] | None = None) -> Counts:
    """Counts from ``<cache_dir>/roofline/<key>.json`` (key: the problem's source hash, profile, precision, fp32
    matmul class, torch version and ``COUNT_RULES_VERSION``), counted (in a fresh process when ``isolated``) and
    saved on a miss."""
    profile = None if profile in (None, "default") else profile
    path = Path(cache_dir) / "roofline" / f"{counts_key(problem_path, profile, precision, fp32_matmul, shape)}.json"
    try:
        return Counts.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    if isolated:
        counts = count_isolated(problem_path, profile, precision, fp32_matmul=fp32_matmul, timeout=timeout,
                                shape=shape)
    else:
        counts = count(problem_path, profile, precision, fp32_matmul=fp32_matmul, shape=shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(counts.to_json()))
    tmp.replace(path)
    return counts


# ---------------------------------------------------------------------------------------------------------------
# python -m kbv.roofline

def _format_row(name: str, roof: Roofline) -> str:
    return (f"{name:36s} {roof.total_flops / 1e9:12.3f} {roof.bytes / 1e6:11.2f} {roof.intensity:10.2f} "
            f"{roof.regime:8s} {roof.t_roofline_ms:12.5f}{'  launch-bound' if roof.launch_bound else ''}"
            f"{'  [' + roof.counts.fallback + ']' if roof.counts.fallback else ''}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kbv.roofline", description=__doc__.split("\n")[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--problem", type=Path, help="a problem file")
    target.add_argument("--problems", type=Path, help="a suite folder (level*/ subfolders)")
    parser.add_argument("--device", default="H200 SXM", help="registry or torch/nvidia-smi device name")
    parser.add_argument("--profile", default=None, help="size profile (default: the default sizes)")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--fp32-matmul", default="tf32", choices=["tf32", "ieee"])
    parser.add_argument("--cache-dir", type=Path, default=None, help="where measured ceilings are saved")
    parser.add_argument("--datasheet", action="store_true", help="ignore measured ceilings")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--counts", action="store_true", help="print the raw counts as JSON (no ceilings)")
    parser.add_argument("--shape", default=None, help="one shape's overrides as JSON (multi-shape problems)")
    args = parser.parse_args(argv)
    if args.counts:
        if args.problem is None:
            parser.error("--counts needs --problem")
        shape = json.loads(args.shape) if args.shape else None
        print(json.dumps(count(args.problem, args.profile, args.precision, fp32_matmul=args.fp32_matmul,
                               shape=shape).to_json()))
        return 0
    cache_dir = args.cache_dir
    if cache_dir is None:
        cache_dir = Path(os.environ.get("KBV_CACHE_DIR", Path.home() / ".cache" / "kbv"))
    ceilings = ceilings_for(args.device, cache_dir, prefer_measured=not args.datasheet)
    if args.problem is not None:
        paths = [args.problem]
    else:
        from kbv.problems import discover

        paths = [p.path for p in discover(args.problems)]
    results = {}
    for path in paths:
        counts = count(path, args.profile, args.precision, fp32_matmul=args.fp32_matmul)
        results[path] = Roofline(counts, ceilings)
    if args.json:
        data = {str(p): r.to_json() for p, r in results.items()}
        print(json.dumps(next(iter(data.values())) if args.problem is not None else data, indent=2))
        return 0
    print(f"ceilings: {ceilings.name} ({ceilings.source})")
    print(f"{'problem':36s} {'GFLOP':>12s} {'MB':>11s} {'FLOP/B':>10s} {'regime':8s} {'t_roof_ms':>12s}")
    for path, roof in results.items():
        print(_format_row(f"{path.parent.name}/{path.stem}", roof))
    return 0


if __name__ == "__main__":
    sys.exit(main())
