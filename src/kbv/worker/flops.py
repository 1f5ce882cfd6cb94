"""Worker side of the roofline: counting FLOPs per precision class and minimum bytes of one forward of a
problem's reference. It executes problem code, so the trusted parent runs it in a fresh process
(``python -m kbv.worker.flops``, see ``kbv.roofline.count``) and reads its JSON; the counting rules are described in
``kbv.roofline``."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import weakref
from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count


from kbv.counts import Counts



CPU_FALLBACK_BYTES = 64 << 20  # a meta failure is recounted on the CPU at the requested size up to this much state

ATTENTION_SIMT_PER_SCORE = 6  # scale (1) + softmax (5) per kept (query, key) score


class CountError(RuntimeError):
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
        self.live: dict[int, list[int]] = {}  # per storage the ops made: [bytes, tensors still alive]
        self.live_bytes = 0
        self.peak_live_bytes = 0  # the most the ops' outputs held at once (``intermediate_bytes``)
        self.held: set[int] = set()  # the inputs', parameters' and buffers' storages: not made by an op

    def hold(self, tensors: Any) -> None:
        """Storages that exist before the forward (a view of one, or an in-place op's result, is not new memory)."""
        self.held.update(t.untyped_storage()._cdata for t in tree_flatten(tensors)[0] if isinstance(t, torch.Tensor))

    def _made(self, out: Any) -> None:
        """The storages an op's outputs hold, counted once each until their last tensor is gone."""
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in self.held:
                continue
            if key not in self.live:
                self.live[key] = [storage.nbytes(), 0]
                self.live_bytes += storage.nbytes()
                self.peak_live_bytes = max(self.peak_live_bytes, self.live_bytes)
            self.live[key][1] += 1
            weakref.finalize(t, self._gone, key)

    def _gone(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is not None:
            entry[1] -= 1
            if entry[1] == 0:
                self.live_bytes -= entry[0]
                del self.live[key]

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
            out = func(*args, **kwargs)
            self._made(out)
            return out
        before = self.fcm.get_total_flops()
        out = func(*args, **kwargs)
        self._made(out)
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
# Counting

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
        counter.hold([list(inputs), list(model.parameters()), list(model.buffers())])
        attention = _AttentionMode(counter)
        with torch.random.fork_rng(devices=[]), torch.no_grad(), fcm, counter, attention:
            outputs = model(*inputs)
    except Exception as exc:
        if device != "meta":
            raise
        raise _MetaFailure(stage, f"{type(exc).__name__}: {exc}", state_bytes) from exc
    breakdown = minimum_bytes(inputs, model, outputs)
    intermediate = max(0, counter.peak_live_bytes - breakdown["outputs"])
    notes = []
    if attention.causal_calls:
        notes.append("causal attention counted at the (query, key) pairs its mask keeps")
    return Counts(
        problem=str(path), precision=precision, profile=profile, device=device,
        flops={k: int(round(v)) for k, v in sorted(counter.flops.items()) if v},
        bytes=int(sum(breakdown.values())), bytes_breakdown=breakdown,
        by_op={k: int(round(v)) for k, v in sorted(counter.by_op.items(), key=lambda kv: -kv[1])},
        uncounted=sorted(counter.uncounted), fp32_matmul=fp32_matmul, notes=notes, shapes=shapes_of(module),
        intermediate_bytes=intermediate,
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
            raise CountError(f"{path.name}: {meta_error}; a shape is counted at its own size only") from None
        if failure.state_bytes is not None and failure.state_bytes <= CPU_FALLBACK_BYTES:
            cpu_profile, why = profile, "inputs and state are small: counted on the CPU at the requested size"
        elif profile == "small":
            cpu_profile, why = profile, "counted on the CPU at the requested small profile"
        elif has_small:
            cpu_profile, why = "small", "counted on the CPU at the small profile, NOT the requested size"
        else:
            raise CountError(f"{path.name}: {meta_error}, and it has no small profile to count on the CPU") \
                from None
        counts = _count_once(path, cpu_profile, precision, "cpu", fp32_matmul, conv_tf32, mode, seed, shape)
        counts.fallback = f"{meta_error}; {why}"
        return counts




def batch(jobs: list[dict[str, Any]]) -> None:
    """Count many problems in this one process (the first count pays the start-up, later ones milliseconds): one
    JSON line per job, in order, ``{"counts": ...}`` or ``{"error": "..."}``, flushed as each one ends."""
    for job in jobs:
        try:
            counts = count(Path(job["problem"]), job.get("profile"), job.get("precision", "fp32"),
                           fp32_matmul=job.get("fp32_matmul", "tf32"), shape=job.get("shape"))
            line: dict[str, Any] = {"counts": counts.to_json()}
        except Exception as exc:  # one problem's failure is its own line
            line = {"error": f"{type(exc).__name__}: {str(exc)[:1000]}"}
        print(json.dumps(line), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kbv.worker.flops --problem P [--profile NAME] [--precision P] [--fp32-matmul M] [--shape JSON]``:
    print the counts as JSON; ``--batch`` reads a JSON list of such jobs from stdin instead (``batch``)."""
    parser = argparse.ArgumentParser(prog="python -m kbv.worker.flops", description="Count one problem's forward.")
    parser.add_argument("--batch", action="store_true", help="jobs as a JSON list on stdin, one line out per job")
    parser.add_argument("--problem", type=Path)
    parser.add_argument("--profile", default=None)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--fp32-matmul", default="tf32", choices=["tf32", "ieee"])
    parser.add_argument("--shape", default=None, help="one shape's overrides as JSON (multi-shape problems)")
    args = parser.parse_args(argv)
    if args.batch:
        batch(json.load(sys.stdin))
        return 0
    if args.problem is None:
        parser.error("--problem or --batch is required")
    shape = json.loads(args.shape) if args.shape else None
    print(json.dumps(count(args.problem, args.profile, args.precision, fp32_matmul=args.fp32_matmul,
                           shape=shape).to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
