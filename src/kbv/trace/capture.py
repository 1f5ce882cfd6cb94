"""Capture a ``kbv.trace/1`` file: time per aten op and per marked module, split by phase, with exact signatures.

Three passes over the workload's steps, all eager under ``torch.no_grad`` (not ``inference_mode``, under which a
dispatch mode sees composite ops such as ``aten::linear`` before they decompose; under ``no_grad`` it sees the ops
that run: ``aten::mm``/``addmm``, ``aten::native_layer_norm``, the chosen SDPA backend):

1. **warm-up**, untimed;
2. **time pass** under ``torch.profiler`` (``record_shapes``), each step in ``record_function(phase)`` and each
   call of a module with ``kbv_kind`` in ``record_function("kbv_module:<kind>:<call index>")``. An event's *own*
   time is, on CUDA, the duration of the kernels launched directly by it (``FunctionEvent.kernels``) and, on the
   CPU, its self CPU time (an estimate). Each op call the dispatch pass can see (a *dispatch-level* call: the
   outermost op on its path whose name a ``TorchDispatchMode`` saw) gets the own time of its whole subtree, so no
   time is counted twice and nested ops (``aten::copy_`` inside ``aten::_to_copy``) are part of the call that a
   problem can replay. Op events above the dispatch level (composite wrappers such as ``aten::linear`` and
   ``aten::matmul``: no kernels of their own on CUDA, some CPU overhead) keep their own time under their own name;
   on CUDA, kernels launched outside any op go to ``<no aten op>``. A module's time is the own time of every event
   inside its range (nested modules each count it: a ``moe`` includes its experts' ``gated_mlp`` time).
3. **signature pass** under a ``TorchDispatchMode``: exact args and kwargs of every op call. Calls are joined to
   the timed calls by (op, tensor shapes, tensor dtypes, phase), the k-th of a key to the k-th (both passes run
   the same program). A key whose call counts differ between passes keeps its signature only if it has a single
   one; otherwise, and for ops the mode never saw, ``args`` is null (time only: unreproducible).
"""

from __future__ import annotations

import copy
import datetime as _dt
import inspect
import json
import math
import platform
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils._python_dispatch import TorchDispatchMode

SCHEMA = "kbv.trace/1"
MODULE_PREFIX = "kbv_module:"
NO_OP = "<no aten op>"

# How torch.profiler names tensor dtypes (c10 type names); anything else in input_dtypes is not a tensor.
PROFILER_DTYPES = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "long int": "int64", "long": "int64", "long long": "int64", "int": "int32", "short int": "int16",
    "short": "int16", "signed char": "int8", "unsigned char": "uint8", "bool": "bool",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128", "c10::complex<c10::Half>": "complex32",
    "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2",
    "c10::Float8_e4m3fnuz": "float8_e4m3fnuz", "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
}
WRAPPED_NUMBER = {bool: "bool", int: "int64", float: "float64", complex: "complex128"}


@dataclass
class Workload:
    """A model and its ordered steps: ``(phase, zero-arg callable doing one forward)``; ``config`` is recorded."""

    model: nn.Module
    steps: list[tuple[str, Callable[[], Any]]]
    config: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------------------
# Encoding values as JSON


class Unencodable(TypeError):
    """An argument with no JSON form: the call stays time-only."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tensor_spec(t: torch.Tensor, with_range: bool = False) -> dict[str, Any]:
    """``{shape, dtype, stride}``; with ``with_range``, integer tensors also get ``range: [min, max]``."""
    spec: dict[str, Any] = {"shape": list(t.shape), "dtype": dtype_name(t.dtype), "stride": list(t.stride())}
    if with_range and t.numel() and not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool:
        try:
            spec["range"] = [int(t.min()), int(t.max())]
        except (RuntimeError, NotImplementedError):  # a layout or dtype without min/max: no range
            pass
    return spec


def _float(x: float) -> Any:
    return x if math.isfinite(x) else {"float": repr(x)}


def encode(value: Any, with_range: bool = False) -> Any:
    """JSON form of an op argument: tensors as ``{"tensor": spec}``; numbers, strings, None as themselves (non-finite
    floats as ``{"float": "inf"}``); lists as lists; ``{"dtype"|"device"|"layout"|"memory_format": name}``."""
    if isinstance(value, torch.Tensor):
        return {"tensor": tensor_spec(value, with_range)}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, complex):
        return {"complex": [_float(value.real), _float(value.imag)]}
    if isinstance(value, (list, tuple)):
        return [encode(v, with_range) for v in value]
    if isinstance(value, torch.dtype):
        return {"dtype": dtype_name(value)}
    if isinstance(value, torch.device):
        return {"device": value.type}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    raise Unencodable(f"no JSON form for {type(value).__name__}")


def _random_tensor(spec: dict[str, Any], device: str) -> torch.Tensor:
    shape, stride, dtype = spec["shape"], spec["stride"], getattr(torch, spec["dtype"])
    size = 1 + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else 0
    if dtype.is_floating_point or dtype.is_complex:
        base = torch.randn(size, device=device).to(dtype)
    elif dtype == torch.bool:
        base = torch.rand(size, device=device) < 0.5
    else:
        low, high = spec.get("range", [0, 0])
        base = torch.randint(low, high + 1, (size,), device=device, dtype=dtype)
    return base.as_strided(shape, stride)


def materialize(value: Any, device: str = "cpu") -> Any:
    """Inverse of ``encode``: random tensors with the recorded shape, dtype and stride (integer tensors drawn
    within the recorded ``range``), devices mapped to ``device``."""
    if isinstance(value, list):
        return [materialize(v, device) for v in value]
    if isinstance(value, dict):
        if "tensor" in value:
            return _random_tensor(value["tensor"], device)
        if "float" in value:
            return float(value["float"])
        if "complex" in value:
            return complex(*(materialize(v) for v in value["complex"]))
        if "dtype" in value:
            return getattr(torch, value["dtype"])
        if "device" in value:
            return torch.device(device)
        if "layout" in value:
            return getattr(torch, value["layout"])
        if "memory_format" in value:
            return getattr(torch, value["memory_format"])
        raise ValueError(f"not an encoded value: {value!r}")
    return value


def materialize_call(args: list[Any], kwargs: dict[str, Any] | None, device: str = "cpu"
                     ) -> tuple[list[Any], dict[str, Any]]:
    """A recorded op entry's ``args`` and ``kwargs`` as call arguments (see ``materialize``)."""
    return materialize(args, device), {k: materialize(v, device) for k, v in (kwargs or {}).items()}


def resolve_op(op: str, overload: str) -> Any:
    """``("aten::mm", "default")`` -> ``torch.ops.aten.mm.default``."""
    namespace, name = op.split("::", 1)
    return getattr(getattr(getattr(torch.ops, namespace), name), overload)


# ---------------------------------------------------------------------------------------------------------------
# Join keys


Key = tuple[Any, ...]


def dispatch_key(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Key:
    """Tensor shapes and dtypes in schema order, as the profiler records them (a Python number passed for a
    ``Tensor`` argument is a wrapped 0-dim tensor; a tensor list is the marker ``TensorList``)."""
    out: list[Any] = []
    for i, arg in enumerate(func._schema.arguments):
        value = kwargs.get(arg.name) if arg.kwarg_only or i >= len(args) else args[i]
        kind = str(arg.type)
        if isinstance(value, torch.Tensor):
            out.append((tuple(value.shape), dtype_name(value.dtype)))
        elif kind in ("Tensor", "Optional[Tensor]") and type(value) in WRAPPED_NUMBER:
            out.append(((), WRAPPED_NUMBER[type(value)]))
        elif kind == "List[Tensor]":
            out.append("TensorList")
    return tuple(out)


def profiler_key(event: Any) -> Key:
    """The same key from a profiler event's ``input_shapes`` and ``input_dtypes``."""
    out: list[Any] = []
    for shape, dtype in zip(event.input_shapes or [], _event_dtypes(event)):
        if dtype == "TensorList":
            out.append("TensorList")
        elif dtype in PROFILER_DTYPES:
            out.append((tuple(shape), PROFILER_DTYPES[dtype]))
    return tuple(out)


def _event_dtypes(event: Any) -> list[str]:
    return list(getattr(event, "input_dtypes", None) or getattr(event, "input_types", None) or [])


def _profiler_inputs(event: Any) -> list[dict[str, Any]]:
    strides = getattr(event, "structured_input_strides", None) or []
    specs = []
    for i, (shape, dtype) in enumerate(zip(event.input_shapes or [], _event_dtypes(event))):
        if dtype in PROFILER_DTYPES:
            spec: dict[str, Any] = {"shape": list(shape), "dtype": PROFILER_DTYPES[dtype]}
            if i < len(strides) and isinstance(strides[i], list) and len(strides[i]) == len(shape):
                spec["stride"] = list(strides[i])
            specs.append(spec)
    return specs


# ---------------------------------------------------------------------------------------------------------------
# The signature pass


@dataclass
class Signature:
    """One op call as the dispatch mode saw it."""

    op: str
    overload: str
    key: Key
    args: Any  # encoded, or None when some argument has no JSON form
    kwargs: Any
    inputs: list[dict[str, Any]]


class SignatureMode(TorchDispatchMode):
    """Records every op call (outside the ``profiler`` namespace) per phase, with exact encoded args."""

    def __init__(self) -> None:
        super().__init__()
        self.phase: str | None = None
        self.calls: dict[str, list[Signature]] = defaultdict(list)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (torch's signature)
        kwargs = kwargs or {}
        if self.phase is not None and func.namespace != "profiler":
            tensors = [t for v in (*args, *kwargs.values()) for t in (v if isinstance(v, (list, tuple)) else [v])
                       if isinstance(t, torch.Tensor)]
            try:
                enc_args, enc_kwargs = encode(list(args), True), {k: encode(v, True) for k, v in kwargs.items()}
            except Unencodable:
                enc_args = enc_kwargs = None
            self.calls[self.phase].append(Signature(
                func._schema.name, func._overloadname,
                dispatch_key(func, args, kwargs), enc_args, enc_kwargs, [tensor_spec(t) for t in tensors]))
        return func(*args, **kwargs)


# ---------------------------------------------------------------------------------------------------------------
# Module hooks


class ModuleRecorder:
    """Pre/post forward hooks on every module with ``kbv_kind``: inputs, non-tensor args, params, a profiler range."""

    def __init__(self, model: nn.Module) -> None:
        self.phase: str | None = None
        self.annotate = True
        self.calls: list[dict[str, Any]] = []
        self._stack: list[tuple[int, Any]] = []
        self._handles = []
        self._signatures: dict[type, inspect.Signature] = {}
        for module in model.modules():
            if getattr(type(module), "kbv_kind", None) and callable(getattr(module, "kbv_params", None)):
                self._handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True))
                self._handles.append(module.register_forward_hook(self._post, with_kwargs=True, always_call=True))

    def _pre(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        cls = type(module)
        if cls not in self._signatures:
            self._signatures[cls] = inspect.signature(module.forward)
        bound = self._signatures[cls].bind(*args, **kwargs)
        inputs, extra = [], {}
        for name, value in bound.arguments.items():
            if isinstance(value, torch.Tensor):
                inputs.append(tensor_spec(value))
            else:
                try:
                    extra[name] = encode(value)
                except Unencodable:
                    extra[name] = {"repr": repr(value)}
        index = len(self.calls)
        self.calls.append({"kind": cls.kbv_kind, "phase": self.phase, "inputs": inputs, "extra_args": extra})
        rf = record_function(f"{MODULE_PREFIX}{cls.kbv_kind}:{index}") if self.annotate else None
        if rf is not None:
            rf.__enter__()
        self._stack.append((index, rf))

    def _post(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        index, rf = self._stack.pop()
        if rf is not None:
            rf.__exit__(None, None, None)
        self.calls[index]["params"] = module.kbv_params()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


# ---------------------------------------------------------------------------------------------------------------
# Attribution over the profiler's event tree


@dataclass
class TimedCall:
    """A dispatch-level op call (or an op above that level, or kernels outside ops) with its attributed time."""

    name: str
    overload: str | None
    key: Key
    inputs: list[dict[str, Any]]
    phase: str
    dispatch_level: bool
    time_us: float = 0.0


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _run_steps(workload: Workload, on_phase: Callable[[str | None], None], annotate: bool) -> None:
    for phase, step in workload.steps:
        on_phase(phase)
        if annotate:
            with record_function(phase):
                step()
        else:
            step()
    on_phase(None)


def attribute(events: Any, phases: set[str], dispatch_names: set[str], device_time: bool
              ) -> tuple[dict[str, list[TimedCall]], dict[int, float]]:
    """Timed calls per phase (in time order) and module call index -> time, from the profiler's event tree."""
    calls: dict[str, list[TimedCall]] = defaultdict(list)
    module_time: dict[int, float] = defaultdict(float)
    cpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU and not e.is_async]
    roots = sorted((e for e in cpu if e.cpu_parent is None), key=lambda e: e.time_range.start)

    def visit(e: Any, phase: str | None, top: TimedCall | None, modules: tuple[int, ...]) -> None:
        name = e.name
        annotation = bool(getattr(e, "is_user_annotation", False)) or name in phases or name.startswith(MODULE_PREFIX)
        if annotation and name in phases:
            phase = name
        elif annotation and name.startswith(MODULE_PREFIX):
            modules = modules + (int(name.rsplit(":", 1)[1]),)
        is_op = not annotation and "::" in name and not name.startswith("profiler::")
        own = (sum(k.duration for k in e.kernels) if device_time else (e.self_cpu_time_total if is_op else 0.0))
        if phase is not None:
            target = top
            if is_op and top is None:
                level = name in dispatch_names
                target = TimedCall(name, e.overload_name or None, profiler_key(e), _profiler_inputs(e), phase, level)
                calls[phase].append(target)
                if level:
                    top = target
            elif not is_op and top is None and own:
                target = TimedCall(NO_OP, None, (), [], phase, False)
                calls[phase].append(target)
            if target is not None:
                target.time_us += own
            for m in modules:
                module_time[m] += own
        for child in sorted(e.cpu_children, key=lambda c: c.time_range.start):
            visit(child, phase, top, modules)

    for root in roots:
        visit(root, None, None, ())
    return calls, module_time


def join(timed: list[TimedCall], signatures: list[Signature]) -> list[tuple[TimedCall, Signature | None]]:
    """Pair dispatch-level timed calls with signatures by (op, key), in order (see the module docstring)."""
    by_key: dict[tuple[str, Key], list[Signature]] = defaultdict(list)
    for s in signatures:
        by_key[(s.op, s.key)].append(s)
    timed_by_key: dict[tuple[str, Key], list[TimedCall]] = defaultdict(list)
    for t in timed:
        if t.dispatch_level:
            timed_by_key[(t.name, t.key)].append(t)
    paired: dict[int, Signature] = {}
    for k, group in timed_by_key.items():
        sigs = by_key.get(k, [])
        if len(sigs) == len(group):
            paired.update({id(t): s for t, s in zip(group, sigs)})
        elif sigs and len({_sig_id(s) for s in sigs}) == 1:
            paired.update({id(t): sigs[0] for t in group})
    # Where the profiler recorded no shapes for an op (seen with torch 2.11 on CUDA: empty input_shapes), pair
    # that op's calls by order instead: both passes run the same steps, so the k-th call of an op in a phase is
    # the same call in both, provided both saw the op equally often (otherwise those calls stay unreproducible).
    by_name: dict[str, list[Signature]] = defaultdict(list)
    for s in signatures:
        by_name[s.op].append(s)
    timed_by_name: dict[str, list[TimedCall]] = defaultdict(list)
    for t in timed:
        if t.dispatch_level:
            timed_by_name[t.name].append(t)
    for name, group in timed_by_name.items():
        if any(id(t) in paired for t in group) or any(t.key for t in group):
            continue
        sigs = by_name.get(name, [])
        if len(sigs) == len(group):
            paired.update({id(t): s for t, s in zip(group, sigs)})
    return [(t, paired.get(id(t))) for t in timed]


def _sig_id(s: Signature) -> str:
    return json.dumps(_without_ranges([s.overload, s.args, s.kwargs]), sort_keys=True)


def _without_ranges(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_ranges(v) for k, v in value.items() if k != "range"}
    if isinstance(value, list):
        return [_without_ranges(v) for v in value]
    return value


def _merge_ranges(into: Any, other: Any) -> None:
    """Widen every integer tensor's ``range`` in ``into`` to cover the same tensor's range in ``other``."""
    if isinstance(into, dict) and isinstance(other, dict):
        if "range" in into and "range" in other:
            into["range"] = [min(into["range"][0], other["range"][0]), max(into["range"][1], other["range"][1])]
        for k, v in into.items():
            if k != "range" and k in other:
                _merge_ranges(v, other[k])
    elif isinstance(into, list) and isinstance(other, list):
        for a, b in zip(into, other):
            _merge_ranges(a, b)


def _ops_table(pairs: list[tuple[TimedCall, Signature | None]]) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for t, s in pairs:
        if s is not None and s.args is not None:
            entry = {"op": s.op, "overload": s.overload, "args": s.args, "kwargs": s.kwargs, "inputs": s.inputs}
        else:
            entry = {"op": t.name, "overload": s.overload if s else t.overload, "args": None, "kwargs": None,
                     "inputs": s.inputs if s else t.inputs}
        ident = json.dumps(_without_ranges(entry), sort_keys=True)
        if ident in rows:
            _merge_ranges(rows[ident], entry)
        row = rows.setdefault(ident, {**copy.deepcopy(entry), "calls": 0, "time_us": 0.0})
        row["calls"] += 1
        row["time_us"] += t.time_us
    return sorted(rows.values(), key=lambda r: (-r["time_us"], -r["calls"], r["op"]))


def _modules_table(recorded: list[dict[str, Any]], module_time: dict[int, float], phase: str
                   ) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for index, call in enumerate(recorded):
        if call["phase"] != phase:
            continue
        entry = {k: call[k] for k in ("kind", "params", "inputs", "extra_args")}
        row = rows.setdefault(json.dumps(entry, sort_keys=True), {**entry, "calls": 0, "time_us": 0.0})
        row["calls"] += 1
        row["time_us"] += module_time.get(index, 0.0)
    return sorted(rows.values(), key=lambda r: (-r["time_us"], -r["calls"], r["kind"]))


# ---------------------------------------------------------------------------------------------------------------
# The capture


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _model_dtype(model: nn.Module) -> str:
    counts: dict[torch.dtype, int] = defaultdict(int)
    for p in model.parameters():
        if p.is_floating_point():
            counts[p.dtype] += p.numel()
    return dtype_name(max(counts, key=counts.__getitem__)) if counts else "unknown"


def capture(workload: Workload, recipe: str, size: str, device: str) -> dict[str, Any]:
    """Warm up, time under the profiler, record signatures; return the ``kbv.trace/1`` document."""
    cuda = device.startswith("cuda")
    phases = {phase for phase, _ in workload.steps}
    recorder = ModuleRecorder(workload.model)
    mode = SignatureMode()
    try:
        with torch.no_grad():
            recorder.annotate = False
            _run_steps(workload, lambda p: setattr(recorder, "phase", None), annotate=False)  # warm-up
            _sync(device)
            recorder.calls.clear()
            recorder.annotate = True
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            with profile(activities=activities, record_shapes=True) as prof:
                _run_steps(workload, lambda p: setattr(recorder, "phase", p), annotate=True)
                _sync(device)
            module_calls = list(recorder.calls)
            recorder.annotate = False
            with mode:
                _run_steps(workload, lambda p: setattr(mode, "phase", p), annotate=False)
            _sync(device)
    finally:
        recorder.remove()
    dispatch_names = {s.op for calls in mode.calls.values() for s in calls}
    timed, module_time = attribute(prof.events(), phases, dispatch_names, device_time=cuda)
    steps_per_phase: dict[str, int] = defaultdict(int)
    for phase, _ in workload.steps:
        steps_per_phase[phase] += 1
    out_phases: dict[str, Any] = {}
    for phase in dict.fromkeys(p for p, _ in workload.steps):
        ops = _ops_table(join(timed.get(phase, []), mode.calls.get(phase, [])))
        out_phases[phase] = {"total_us": sum(r["time_us"] for r in ops), "steps": steps_per_phase[phase],
                             "ops": ops, "modules": _modules_table(module_calls, module_time, phase)}
    return {
        "schema": SCHEMA, "recipe": recipe, "size": size,
        "device": {"type": "cuda" if cuda else "cpu", "name": device_name(device)},
        "torch": torch.__version__, "time_source": "device" if cuda else "cpu",
        "dtype": _model_dtype(workload.model),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "workload": workload.config, "phases": out_phases,
    }
