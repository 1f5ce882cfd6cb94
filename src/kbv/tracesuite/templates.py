"""Source generation for trace-derived problems: one aten operator overload, or one module kind, over several shapes.

An entry's **shape** is every integer it carries: tensor shapes and strides, int and int-list arguments, integer
module parameters and integer extra arguments. Everything else is its **signature**: the operator overload or
module kind, dtypes and ranks, float / bool / string / None / dtype arguments, list structure. Entries with one
signature become one problem; its module-level constants are the first shape, ``KBV_SHAPES`` lists every visible
shape as a full override dict (``KBV_SHAPES[0]`` repeats the constants), integer arguments reach ``Model`` through
``get_init_inputs()`` and tensors through ``get_inputs()`` in argument order.

A :class:`Layout` is one entry laid out this way; entries whose layouts share ``signature`` also share the
generated code and differ only in ``values``. Generated files carry no provenance (no model, recipe, trace or
kernel names): that lives in the suite's ``evaluator/`` folder.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch


class Unreproducible(ValueError):
    """A trace entry kbv cannot turn into a problem (the message is the reason reported)."""


# ---------------------------------------------------------------------------------------------------------------
# Tensors and dtypes

SHORT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64", "int64": "i64",
                "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "b8",
                "float8_e4m3fn": "fp8e4m3", "float8_e5m2": "fp8e5m2"}


def dtype_name(name: str) -> str:
    """A torch dtype name (``bfloat16``) from a trace's spelling (``bfloat16`` or ``torch.bfloat16``)."""
    name = str(name).removeprefix("torch.")
    if not isinstance(getattr(torch, name, None), torch.dtype):
        raise Unreproducible(f"unknown dtype {name!r}")
    return name


def _is_float(dtype: str) -> bool:
    return getattr(torch, dtype).is_floating_point


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str
    stride: tuple[int, ...] | None  # None: contiguous

    @staticmethod
    def parse(obj: Any) -> "TensorSpec":
        """``{"tensor": {shape, dtype, stride}}`` or the inner dict itself."""
        spec = obj.get("tensor", obj) if isinstance(obj, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("shape"), list):
            raise Unreproducible(f"not a tensor spec: {obj!r}")
        shape = tuple(int(n) for n in spec["shape"])
        stride = spec.get("stride")
        stride = tuple(int(s) for s in stride) if isinstance(stride, list) else None
        if stride is not None and len(stride) != len(shape):
            raise Unreproducible("tensor stride and shape differ in rank")
        if stride is not None and stride == contiguous_stride(shape):
            stride = None
        return TensorSpec(shape, dtype_name(spec.get("dtype", "float32")), stride)


def contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def is_tensor_arg(obj: Any) -> bool:
    return isinstance(obj, dict) and "tensor" in obj


def py_literal(value: Any) -> str:
    """Python source for a JSON value (floats that are not finite spelled ``float('inf')``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, list):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {py_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


# ---------------------------------------------------------------------------------------------------------------
# Layouts


@dataclass
class InputSlot:
    name: str  # forward parameter and constant prefix (``in0`` -> in0_shape, in0_stride)
    dtype: str
    fill: str  # normal | positive | mask | values | index | scalar (a non-tensor forward argument)
    bound: str | None = None  # index inputs: source of the exclusive upper bound


@dataclass
class Layout:
    """One trace entry laid out as a problem: shared code (by ``signature``) and this entry's shape ``values``."""

    signature: tuple[Any, ...]
    title: str  # neutral file-name stem without the id (``Mm_bf16``)
    summary: str  # one line for the problem's docstring
    model_source: str
    inputs: list[InputSlot]
    init_exprs: list[str]  # get_init_inputs() items: constant names or literals
    values: dict[str, Any]  # module constants of this entry's shape
    skip: dict[str, str] = field(default_factory=dict)  # KBV_SKIP
    needs_dtype: str | None = None  # DTYPE constant (module problems)


# ---------------------------------------------------------------------------------------------------------------
# Operators

#: ops whose inputs outside the domain give NaN (first argument drawn positive; D4 would flip the sign)
POSITIVE_DOMAIN = {"log", "log2", "log10", "sqrt", "rsqrt", "pow"}
#: the distributions that put negative values into a positive-domain input (skipped for those ops)
NEGATIVE_DISTRIBUTIONS = ("D4", "D5", "D6")
#: (op, argument position) drawn positive, no D4 skip: a divisor drawn near zero makes outliers
POSITIVE_ARGS = {("div", 1), ("reciprocal", 0)}
#: ops where an integer tensor holds values, not indices or lengths (drawn from [0, 16))
INT_VALUE_OPS = {"add", "sub", "mul", "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or",
                 "bitwise_xor", "bitwise_not", "logical_and", "logical_or", "logical_not", "sum", "cumsum", "max",
                 "min", "maximum", "minimum", "clone", "_to_copy", "copy", "where", "masked_fill", "neg", "abs",
                 "argmax", "argmin", "sort", "topk", "cat", "stack", "clamp", "clamp_min", "clamp_max", "any",
                 "all", "fill", "zeros_like", "ones_like", "full_like", "mean", "prod", "amax", "amin"}
#: index arguments: op -> {argument path: (source tensor position, dim or ("arg", position holding the dim))}
#: (reads, and writes that accumulate, so repeated indices are deterministic up to summation order)
INDEX_RULES: dict[str, dict[tuple[Any, ...], tuple[int, Any]]] = {
    "embedding": {(1,): (0, 0)},
    "index_select": {(2,): (0, ("arg", 1))},
    "gather": {(2,): (0, ("arg", 1))},
    "index_add": {(2,): (0, ("arg", 1))},
    "scatter_add": {(2,): (0, ("arg", 1))},
}
#: ops whose first output is the result and the others are saved for a backward pass
FIRST_OUTPUT_ONLY = {"native_layer_norm", "native_group_norm", "native_batch_norm", "_native_batch_norm_legit",
                     "_native_batch_norm_legit_no_training", "_fused_rms_norm", "_scaled_dot_product_flash_attention",
                     "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                     "_scaled_dot_product_flash_attention_for_cpu", "_flash_attention_forward",
                     "_efficient_attention_forward"}
#: outputs are uninitialised memory
UNINITIALISED = {"empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty"}
#: views whose schema carries no alias annotation
UNANNOTATED_VIEWS = {"_unsafe_view"}


def parse_op_name(op: str, overload: str | None) -> tuple[str, str, str]:
    """``("aten::mm", "default")`` -> ``("aten", "mm", "default")`` (``aten::add.Tensor`` is read too)."""
    namespace, _, rest = op.partition("::")
    if not rest:
        namespace, rest = "aten", namespace
    name, _, dotted = rest.partition(".")
    return namespace, name, overload or dotted or "default"


def resolve_op(namespace: str, name: str, overload: str) -> Any:
    if namespace != "aten":
        raise Unreproducible(f"{namespace}::{name} is not an aten operator (it needs its own library)")
    try:
        return getattr(getattr(torch.ops.aten, name), overload)
    except (AttributeError, RuntimeError):
        raise Unreproducible(f"aten::{name}.{overload} does not exist in torch {torch.__version__}") from None


def kernel_note(op: str, overload: str | None) -> dict[str, Any]:
    """Where this torch build has a kernel for the op (``cpu``), and whether its name makes it CPU-only
    (``..._for_cpu``, from a trace taken on the CPU: such a problem cannot run on a GPU)."""
    _, name, overload = parse_op_name(op, overload)
    qualname = f"aten::{name}" + (f".{overload}" if overload != "default" else "")
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    try:
        cpu = any(has(qualname, k) for k in ("CPU", "CompositeImplicitAutograd", "CompositeExplicitAutograd"))
    except RuntimeError:
        cpu = False
    return {"cpu_kernel": cpu, "cpu_only": name.endswith("_for_cpu")}


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.strip("_").split("_") if p) or "Op"


class _OpWalker:
    """Renders an op call's argument tree into source, collecting tensor inputs and integer constants."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.inputs: list[InputSlot] = []
        self.values: dict[str, Any] = {}
        self.init_names: list[str] = []
        self.by_path: dict[tuple[Any, ...], str] = {}
        self.skip: dict[str, str] = {}

    def render(self, value: Any, path: tuple[Any, ...]) -> tuple[str, Any]:
        """(source expression, signature) of one argument."""
        if is_tensor_arg(value):
            return self._tensor(TensorSpec.parse(value), path)
        if isinstance(value, bool):
            return repr(value), ("b", value)
        if isinstance(value, int):
            return self._constant(value, path), ("i",)
        if isinstance(value, float):
            return py_literal(value), ("f", value)
        if value is None:
            return "None", ("none",)
        if isinstance(value, str):
            if path[-1] == "device":
                raise Unreproducible("a device given as a string")
            if value.startswith("torch."):
                return f"torch.{dtype_name(value)}", ("dtype", dtype_name(value))
            return repr(value), ("s", value)
        if isinstance(value, list):
            if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                return self._constant(list(value), path), ("ints", len(value))
            parts = [self.render(v, path + (j,)) for j, v in enumerate(value)]
            return "[" + ", ".join(p[0] for p in parts) + "]", ("list", tuple(p[1] for p in parts))
        if isinstance(value, dict) and len(value) == 1:
            key, inner = next(iter(value.items()))
            if key == "float":  # a non-finite float
                number = float(inner)
                return py_literal(number), ("f", str(number))
            if key in ("dtype", "layout", "memory_format"):
                name = dtype_name(inner) if key == "dtype" else str(inner).removeprefix("torch.")
                if not hasattr(torch, name):
                    raise Unreproducible(f"unknown {key} {name!r}")
                return f"torch.{name}", (key, name)
            if key == "device":  # the trace maps devices to the one it ran on: the inputs' device
                if not self.inputs:
                    raise Unreproducible("a device argument before any tensor argument")
                return f"{self.inputs[0].name}.device", ("device",)
        raise Unreproducible(f"unsupported argument encoding {value!r}")

    def _constant(self, value: Any, path: tuple[Any, ...]) -> str:
        head, *rest = path
        name = (f"arg{head}" if isinstance(head, int) else f"kw_{head}") + "".join(f"_{p}" for p in rest)
        self.values[name] = value
        self.init_names.append(name)
        self.by_path[path] = name
        return f"self.{name}"

    def _tensor(self, spec: TensorSpec, path: tuple[Any, ...]) -> tuple[str, Any]:
        name = f"in{len(self.inputs)}"
        if any(n < 0 for n in spec.shape) or (spec.stride and any(s < 0 for s in spec.stride)):
            raise Unreproducible("negative sizes or strides")
        self.values[f"{name}_shape"] = list(spec.shape)
        self.values[f"{name}_stride"] = list(spec.stride) if spec.stride is not None else None
        self.by_path[path] = name
        slot = InputSlot(name, spec.dtype, self._fill(spec, path))
        if slot.fill == "index":
            slot.bound = self._bound(path)
        self.inputs.append(slot)
        return name, ("T", spec.dtype, len(spec.shape))

    def _fill(self, spec: TensorSpec, path: tuple[Any, ...]) -> str:
        dtype = getattr(torch, spec.dtype)
        if dtype.is_complex:
            raise Unreproducible("complex tensors")
        if dtype.is_floating_point:
            if self.base in POSITIVE_DOMAIN and path == (0,):
                for name in NEGATIVE_DISTRIBUTIONS:
                    self.skip[name] = f"{self.base} is defined for positive inputs only"
                return "positive"
            return "positive" if (self.base, path[0]) in POSITIVE_ARGS else "normal"
        if dtype == torch.bool:
            return "mask"
        if self._index_rule(path) is not None:
            return "index"
        if self.base in INT_VALUE_OPS:
            return "values"
        raise Unreproducible(f"integer tensor argument of {self.base} (indices or lengths: values cannot be "
                             "generated safely)")

    def _index_rule(self, path: tuple[Any, ...]) -> tuple[int, Any] | None:
        if self.base == "index" and len(path) == 2 and path[0] == 1:
            return 0, path[1]
        return INDEX_RULES.get(self.base, {}).get(path)

    def _bound(self, path: tuple[Any, ...]) -> str:
        source, dim = self._index_rule(path)  # type: ignore[misc]
        tensor = self.by_path.get((source,))
        if tensor is None:
            raise Unreproducible("index argument before the tensor it indexes")
        if isinstance(dim, tuple):
            dim_name = self.by_path.get((dim[1],))
            if dim_name is None:
                raise Unreproducible("index dimension is not an integer argument")
            return f"{tensor}_shape[{dim_name}]"
        return f"{tensor}_shape[{dim}]"


def op_layout(op: str, overload: str | None, args: list[Any], kwargs: dict[str, Any] | None) -> Layout:
    """Lay out one recorded aten call (raises :class:`Unreproducible` with the reason)."""
    namespace, name, overload = parse_op_name(op, overload)
    packet = resolve_op(namespace, name, overload)
    schema = packet._schema
    base = name.rstrip("_")
    if torch.Tag.nondeterministic_seeded in packet.tags and not _no_dropout(schema, args, kwargs or {}):
        raise Unreproducible(f"{name} is random")
    if base in UNINITIALISED:
        raise Unreproducible(f"{name} returns uninitialised memory")
    returns = list(schema.returns)
    if base in UNANNOTATED_VIEWS or returns and all(r.alias_info is not None and not r.alias_info.is_write
                                                    for r in returns):
        raise Unreproducible(f"{name} is a view (no kernel)")
    if any(a.kwarg_only and a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
        raise Unreproducible(f"{name}.{overload} writes into an out= argument")
    walker = _OpWalker(base)
    rendered = [walker.render(a, (i,)) for i, a in enumerate(args)]
    rendered_kw = {k: walker.render(v, (k,)) for k, v in (kwargs or {}).items()}
    if not walker.inputs:
        raise Unreproducible(f"{name} has no tensor inputs (a creation op)")
    written = [walker.by_path.get((i,)) for i, a in enumerate(schema.arguments[:len(args)])
               if a.alias_info is not None and a.alias_info.is_write]
    if any(w is None or not w.startswith("in") for w in written):
        raise Unreproducible(f"{name} writes into an argument that is not a single tensor")
    ret = _return_expr(base, returns, written)
    call = ", ".join([r[0] for r in rendered] + [f"{k}={r[0]}" for k, r in rendered_kw.items()])
    dtype = walker.inputs[0].dtype
    title = _camel(base) + ("Inplace" if name.endswith("_") else "")
    title += (f"_{overload}" if overload != "default" else "") + f"_{SHORT_DTYPES.get(dtype, dtype)}"
    signature = ("op", name, overload, tuple(r[1] for r in rendered),
                 tuple(sorted((k, r[1]) for k, r in rendered_kw.items())))
    params = "".join(f", {n}" for n in walker.init_names)
    lines = ["class Model(nn.Module):",
             f'    """aten.{name}.{overload}{" (on a copy of its written input)" if written else ""}."""',
             "",
             f"    def __init__(self{params}) -> None:",
             "        super().__init__()"]
    lines += [f"        self.{n} = {n}" for n in walker.init_names]
    lines += ["", f"    def forward(self, {', '.join(s.name for s in walker.inputs)}):"]
    lines += [f"        {w} = {w}.clone()" for w in written]
    lines += [f"        out = torch.ops.aten.{name}.{overload}({call})", f"        return {ret}"]
    return Layout(signature=signature, title=title, summary=f"aten.{name}.{overload} on {dtype} tensors",
                  model_source="\n".join(lines) + "\n", inputs=walker.inputs, init_exprs=walker.init_names,
                  values=walker.values, skip=walker.skip)


def _no_dropout(schema: Any, args: list[Any], kwargs: dict[str, Any]) -> bool:
    """A random-tagged op that is deterministic as called: its ``dropout_p`` is 0 (attention at inference)."""
    for i, a in enumerate(schema.arguments):
        if a.name == "dropout_p":
            value = args[i] if i < len(args) else kwargs.get("dropout_p", a.default_value)
            return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0
    return False


def _return_expr(base: str, returns: list[Any], written: list[str | None]) -> str:
    types = [str(r.type) for r in returns]
    if not types:
        if written:
            return written[0] if len(written) == 1 else "(" + ", ".join(map(str, written)) + ",)"
        raise Unreproducible(f"{base} returns nothing")
    if types == ["Tensor"]:
        return "out"
    if types == ["Tensor[]"]:
        return "tuple(out)"
    tensors = [i for i, t in enumerate(types) if t == "Tensor"]
    if not tensors:
        raise Unreproducible(f"{base} returns no tensor ({', '.join(types)})")
    if base in FIRST_OUTPUT_ONLY and tensors[0] == 0:
        return "out[0]"
    if len(tensors) == 1:
        return f"out[{tensors[0]}]"
    return "(" + ", ".join(f"out[{i}]" for i in tensors) + ")"


# ---------------------------------------------------------------------------------------------------------------
# Modules (the kinds and parameters are a contract with `kbv trace`)

_RMSNORM = '''
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
'''

_LAYERNORM = '''
class Model(nn.Module):
    """LayerNorm over the last dimension with weight and bias."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.hidden_size, self.eps = hidden_size, eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size, dtype=DTYPE))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden_size, dtype=DTYPE))

    def forward(self, x):
        return F.layer_norm(x, (self.hidden_size,), self.weight, self.bias, self.eps)
'''

_ROTARY = '''
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
'''

_ATTENTION = '''
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
'''

_GATED_MLP = '''
class Model(nn.Module):
    """Gated MLP without biases: down(act(gate(x)) * up(x))."""

    def __init__(self, hidden_size: int, intermediate_size: int, activation: str) -> None:
        super().__init__()
        self.activation = activation
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False, dtype=DTYPE)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False, dtype=DTYPE)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False, dtype=DTYPE)

    def forward(self, x):
        return self.down_proj(_activate(self.gate_proj(x), self.activation) * self.up_proj(x))
'''

_MLP = '''
class Model(nn.Module):
    """MLP with biases: fc2(act(fc1(x)))."""

    def __init__(self, hidden_size: int, intermediate_size: int, activation: str) -> None:
        super().__init__()
        self.activation = activation
        self.fc1 = nn.Linear(hidden_size, intermediate_size, dtype=DTYPE)
        self.fc2 = nn.Linear(intermediate_size, hidden_size, dtype=DTYPE)

    def forward(self, x):
        return self.fc2(_activate(self.fc1(x), self.activation))
'''

_MOE = '''
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
'''

_ACTIVATE = '''
def _activate(x, activation):
    if activation == "silu":
        return F.silu(x)
    if activation == "gelu":
        return F.gelu(x)
    if activation in ("gelu_tanh", "gelu_pytorch_tanh"):
        return F.gelu(x, approximate="tanh")
    raise ValueError(activation)
'''


@dataclass(frozen=True)
class ModuleKind:
    title: str
    params: tuple[str, ...]  # constructor order
    tensors: tuple[str, ...]  # forward tensor parameters
    extras: tuple[tuple[str, int], ...]  # forward non-tensor (int) parameters and their defaults
    source: str
    activations: tuple[str, ...] = ()


MODULE_KINDS: dict[str, ModuleKind] = {
    "rmsnorm": ModuleKind("RMSNorm", ("hidden_size", "eps"), ("x",), (), _RMSNORM),
    "layernorm": ModuleKind("LayerNorm", ("hidden_size", "eps"), ("x",), (), _LAYERNORM),
    "rotary": ModuleKind("Rotary", ("head_dim", "theta"), ("q", "k"), (("start_pos", 0),), _ROTARY),
    "attention": ModuleKind("Attention", ("n_heads", "n_kv_heads", "head_dim", "causal"), ("q", "k", "v"), (),
                            _ATTENTION),
    "gated_mlp": ModuleKind("GatedMLP", ("hidden_size", "intermediate_size", "activation"), ("x",), (),
                            _GATED_MLP + _ACTIVATE, ("silu", "gelu", "gelu_tanh", "gelu_pytorch_tanh")),
    "mlp": ModuleKind("MLP", ("hidden_size", "intermediate_size", "activation"), ("x",), (), _MLP + _ACTIVATE,
                      ("gelu", "gelu_tanh", "gelu_pytorch_tanh", "silu")),
    "moe": ModuleKind("MoE", ("hidden_size", "intermediate_size", "n_experts", "top_k", "norm_topk_prob"), ("x",),
                      (), _MOE),
}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def module_layout(kind: str, params: dict[str, Any], inputs: list[Any], extra_args: dict[str, Any] | None
                  ) -> Layout:
    """Lay out one recorded module call (raises :class:`Unreproducible` with the reason)."""
    spec = MODULE_KINDS.get(kind)
    if spec is None:
        raise Unreproducible(f"unknown module kind {kind!r}")
    missing = [p for p in spec.params if p not in params]
    unknown = sorted(set(params) - set(spec.params))
    if missing or unknown:
        raise Unreproducible(f"{kind}: parameters missing {missing} / unexpected {unknown}")
    if spec.activations and params["activation"] not in spec.activations:
        raise Unreproducible(f"{kind}: unsupported activation {params['activation']!r}")
    if len(inputs) != len(spec.tensors):
        raise Unreproducible(f"{kind} takes {len(spec.tensors)} tensor inputs, the trace has {len(inputs)}")
    values: dict[str, Any] = {}
    signature: list[Any] = ["module", kind]
    for name in spec.params:
        value = params[name]
        if _is_int(value):
            values[name] = value
        elif isinstance(value, (float, bool, str)) or value is None:
            signature.append((name, value))
        else:
            raise Unreproducible(f"{kind}: parameter {name} is not a number, bool or string")
    slots = []
    for name, raw in zip(spec.tensors, inputs):
        t = TensorSpec.parse(raw)
        if not _is_float(t.dtype):
            raise Unreproducible(f"{kind}: input {name} is {t.dtype}, not floating point")
        values[f"{name}_shape"] = list(t.shape)
        values[f"{name}_stride"] = list(t.stride) if t.stride is not None else None
        slots.append(InputSlot(name, t.dtype, "normal"))
        signature.append(("T", t.dtype, len(t.shape)))
    extra = dict(extra_args or {})
    for name, default in spec.extras:
        value = extra.pop(name, default)
        if not _is_int(value):
            raise Unreproducible(f"{kind}: extra argument {name} is not an integer")
        values[name] = value
        slots.append(InputSlot(name, "int64", "scalar"))
    if extra:
        raise Unreproducible(f"{kind}: unexpected extra arguments {sorted(extra)}")
    dtype = slots[0].dtype
    init = [p if _is_int(params[p]) else py_literal(params[p]) for p in spec.params]
    return Layout(signature=tuple(signature), title=f"{spec.title}_{SHORT_DTYPES.get(dtype, dtype)}",
                  summary=f"{spec.title} on {dtype} inputs", model_source=spec.source.lstrip("\n"), inputs=slots,
                  init_exprs=init, values=values, needs_dtype=dtype)


# ---------------------------------------------------------------------------------------------------------------
# Files

_HELPERS = '''
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
'''


def _input_expr(slot: InputSlot) -> str:
    if slot.fill == "scalar":
        return slot.name
    args = f"{slot.name}_shape, {slot.name}_stride, torch.{slot.dtype}"
    if slot.fill == "normal":
        return f"_randn({args})"
    if slot.fill == "positive":
        return f"_positive({args})"
    if slot.fill == "mask":
        return f"_mask({args})"
    if slot.fill == "values":
        return f"_randint({args}, 16)"
    return f"_randint({args}, {slot.bound})"


def render_problem(layout: Layout, shapes: list[dict[str, Any]]) -> str:
    """The problem file: ``layout``'s code, the first of ``shapes`` as module constants, all of them in
    ``KBV_SHAPES``."""
    if not shapes:
        raise ValueError("a problem needs at least one shape")
    first = shapes[0]
    lines = [f'"""{layout.summary}, over {len(shapes)} shape{"s" if len(shapes) != 1 else ""} '
             '(KBV_SHAPES; the module constants are the first)."""', "",
             "import torch", "import torch.nn as nn", "import torch.nn.functional as F", ""]
    if layout.needs_dtype:
        lines += [f"DTYPE = torch.{layout.needs_dtype}", ""]
    lines += ["", layout.model_source.rstrip("\n"), "", ""]
    lines += [f"{name} = {py_literal(value)}" for name, value in first.items()]
    lines += ["", "", "def get_inputs():",
              "    return [" + ", ".join(_input_expr(s) for s in layout.inputs) + "]", "", "",
              "def get_init_inputs():", "    return [" + ", ".join(layout.init_exprs) + "]", "", ""]
    lines.append("KBV_SHAPES = [")
    lines += [f"    {py_literal(shape)}," for shape in shapes]
    lines.append("]")
    if layout.skip:
        lines.append(f"KBV_SKIP = {py_literal(layout.skip)}")
    lines += ["", _HELPERS.strip("\n"), ""]
    return "\n".join(lines)
