"""Library-fallback detection: does the candidate's forward do its work, or does PyTorch or a vendor library?

A candidate can pass every correctness check because the "kernel" is ``torch.relu``, ``F.linear``, an ATen call
from C++, cuBLAS or cuDNN (the "correctness illusion"; hack catalogue F1-F5 and C16). Two routes gather evidence,
and ``classify`` turns it into a verdict:

**Dispatch route** (``profile_call`` / ``dispatch_profile``, run in the candidate's worker on one forward). A
``TorchDispatchMode`` records every operator that reaches PyTorch's dispatcher, by overload packet
(``aten.relu``), and each is classified with the tables below. At the same time a ``sys.setprofile`` hook counts
calls into the candidate's *own* code: functions of its compiled extension modules (pybind11 functions are not
dispatcher ops, so the mode never sees them), Triton launches (``JITFunction.run``, or
``InterpretedFunction.run`` under ``TRITON_INTERPRET=1``) and operators the candidate registered itself (a
``torch.library`` op in a namespace of its own). What was found on torch 2.13 / Triton 3.9 (CPU), and relied on:

- A ``load_inline`` C++ function is invisible to the mode, but ATen calls inside it go through the dispatcher and
  are seen: a body ``return at::relu(x);`` (or ``torch::relu``) shows up as ``aten.relu``; ``torch::empty_like``
  as ``aten.empty_like``; ``x.contiguous()`` on a contiguous tensor is no op at all. The per-backend entry points
  ``at::cpu::mm`` / ``at::native::*`` bypass the dispatcher and are *invisible* (``at::cpu::mm`` dispatched
  nothing; ``at::cpu::relu`` dispatched ``aten.clamp_min``, its implementation): the symbol route covers them.
- The Triton interpreter (``TRITON_INTERPRET=1``) computes with numpy; around a launch it moves the arguments'
  storages with ``aten.empty``, ``aten.new_empty``, ``aten.set_`` and ``aten.copy_`` only (and a host-side
  ``torch.promote_types`` in the candidate shows up as ``aten.promote_types``). All of these are in the
  non-compute table, so nothing the interpreter does counts as library compute and no call-stack inspection is
  needed. (Attributing ops by the Python stack was considered and rejected: a candidate can run code whose frames
  claim to be Triton's, e.g. ``exec`` with Triton's globals, so a stack rule would be a hole, not a safeguard.)
- An operator the candidate registers (``torch.library.custom_op``) is seen as one op of its namespace, and the
  mode does not see what runs inside it (the mode is switched off while its handler runs): wrapping
  ``torch.relu`` in a custom op would hide it. So for every op outside PyTorch's own namespaces the mode
  re-enters itself and redispatches below the Python key: the aten ops inside are recorded too.

**Profiler cross-check** (``hidden_ops``, inside ``profile_call`` on the CPU). The mode stack is per thread and
the recorded code can switch it off (``torch.utils._python_dispatch._disable_current_modes()``), so the same call
also runs under a CPU ``torch.profiler`` with ``profile_all_threads``, which sees every operator reaching the
dispatcher on any thread, modes on or off (verified on torch 2.13, CPU: a helper thread's ``torch.relu`` and one
under disabled modes both show up; plain ``torch.profiler`` without ``profile_all_threads`` misses the thread).
An operator the mode handled has a ``PythonDispatchMode`` range below it; those ranges are matched against the
recorder's own counts, so a mode the candidate pushes itself does not pass for kbv's. Compute operators without a
matched range (outermost only: ``aten::relu`` hiding ``aten::clamp_min`` is one) are ``hidden_ops`` and count as
library work like the mode's. kbv's own code runs no operator inside the profiled window. On CUDA the caller's
profiler (the GPU route, which sees both by kernel) is already running and the cross-check steps aside.

**Symbol route** (``extension_symbols``, runnable from the trusted parent on the candidate's build folders). Every
shared object under the candidate's ``TORCH_EXTENSIONS_DIR`` / ``TRITON_CACHE_DIR`` (and any other object file
named) is read with ``nm -D --undefined-only -C``; the imported symbols that are library compute entry points are
reported. On this build ``at::relu(x)`` / ``torch::relu(x)`` compile to an import of
``at::_ops::relu::call(at::Tensor const&)`` and ``at::cpu::mm(a, b)`` to ``at::cpu::mm(at::Tensor const&,
at::Tensor const&)``. This sees calls that bypass the dispatcher and libraries called from C++ (cuBLAS, cuDNN,
BLAS, oneDNN); it cannot see header-only libraries compiled into the object (CUTLASS, CUB, Eigen), nor say how much
work an import does.

**Limits.** The evidence is counts, not time: one call of an own kernel weighs as much as one library GEMM (on a
GPU the profiler's per-kernel device time is the better share; see the catalogue's F1), and dummy own calls lower
the share (they can turn ``fallback`` into ``partial_fallback``, never into no flag). The dispatch route runs in
the candidate's process, so it is telemetry, not proof: a candidate can notice the mode
(``torch._C._len_torch_dispatch_stack()``) and behave differently while profiled (judge the profiled call's
outputs like a correctness trial, so at least the profiled path must be correct); library ops run with the modes
switched off or on another thread are seen by the profiler cross-check only, which the candidate could also
notice or stop (a call that stops the profiler counts as one library op; ops run under a dispatch mode of the
candidate's own are counted as hidden). The symbol route reads files and cannot be dodged from Python. Code
called through ``ctypes`` (numpy's BLAS included) and kernels generated by ``torch.compile`` are not attributed
to the candidate.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import subprocess
import sys
import sysconfig
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# captured when the worker imports this module (in the fork server, before any candidate code exists)
_setprofile = sys.setprofile
_getprofile = sys.getprofile
try:  # the CPU profiler's entry points (see ``hidden_ops``), captured for the same reason
    from torch._C import _autograd as _torch_autograd_c, _profiler as _torch_profiler_c

    _PROFILER: dict[str, Any] | None = {
        "available": torch.autograd.kineto_available, "enabled": _torch_autograd_c._profiler_enabled,
        "prepare": _torch_autograd_c._prepare_profiler, "enable": _torch_autograd_c._enable_profiler,
        "disable": _torch_autograd_c._disable_profiler, "config": _torch_profiler_c.ProfilerConfig,
        "kineto": _torch_profiler_c.ProfilerState.KINETO, "cpu": _torch_profiler_c.ProfilerActivity.CPU,
        "experimental": _torch_profiler_c._ExperimentalConfig, "torch_op": _torch_profiler_c._EventType.TorchOp,
        "user_scope": _torch_profiler_c.RecordScope.USER_SCOPE,
        "range": getattr(_torch_profiler_c, "_RecordFunctionFast", None),
    }
except (ImportError, AttributeError):  # another torch: the profiler cross-check reports itself unavailable
    _PROFILER = None

# ---------------------------------------------------------------------------------------------------------------
# Operator tables (shared by both routes). Names are ATen operator names without namespace or overload
# ("relu", "add", "_softmax"). An operator not in either table counts as compute: an ambiguous op is taken to be
# library work, so a table that lags behind PyTorch errs towards reporting a fallback, never towards hiding one.
# ``op_kind`` matches the longest prefix of a name at "_" boundaries, so "add_Tensor", "relu_", "mm_out",
# "empty_memory_format" and "structured_addmm_out_cpu" find "add", "relu", "mm", "empty" and "addmm".

#: Operators that compute the problem's answer: the work a custom kernel is supposed to do. Listed for the
#: record (an op outside both tables counts as compute anyway) and for the symbol route, where an exported
#: ``at::X`` / ``at::Tensor::X`` / ``torch::X`` counts only if X is listed here (those namespaces also hold
#: threading, printing and quantizer helpers).
COMPUTE_OPS: frozenset[str] = frozenset({
    # GEMM, convolution, attention
    "mm", "matmul", "addmm", "_addmm_activation", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "linear",
    "einsum", "tensordot", "bilinear", "_scaled_mm", "_int_mm", "outer", "addr",
    "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "mkldnn_convolution", "_slow_conv2d_forward", "slow_conv3d_forward",
    "slow_conv_transpose2d", "thnn_conv2d", "cudnn_convolution", "miopen_convolution",
    "scaled_dot_product_attention", "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "_flash_attention_forward", "_efficient_attention_forward",
    # normalisation, softmax
    "_softmax", "_safe_softmax", "softmax", "_log_softmax", "log_softmax", "native_layer_norm", "layer_norm",
    "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "batch_norm",
    "native_group_norm", "group_norm", "instance_norm", "_fused_rms_norm", "rms_norm", "_weight_norm",
    # activations and elementwise math
    "relu", "relu6", "leaky_relu", "gelu", "silu", "mish", "elu", "selu", "celu", "glu", "hardtanh",
    "hardsigmoid", "hardswish", "softplus", "softshrink", "hardshrink", "threshold", "prelu", "_prelu_kernel",
    "sigmoid", "log_sigmoid", "log_sigmoid_forward", "tanh", "exp", "exp2", "expm1", "log", "log2", "log10",
    "log1p", "add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow",
    "sqrt", "rsqrt", "reciprocal", "neg", "abs", "sign", "sgn", "clamp", "clamp_min", "clamp_max", "clip",
    "where", "maximum", "minimum", "fmax", "fmin", "erf", "erfc", "erfinv", "sin", "cos", "tan", "asin",
    "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "floor", "ceil", "round", "trunc",
    "frac", "lerp", "addcmul", "addcdiv", "square", "hypot", "logit", "xlogy", "nan_to_num", "masked_fill",
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "bitwise_and",
    "bitwise_or", "bitwise_xor", "bitwise_not", "isnan", "isinf", "isfinite",
    # reductions and scans
    "sum", "mean", "amax", "amin", "max", "min", "aminmax", "argmax", "argmin", "var", "std", "var_mean",
    "std_mean", "norm", "linalg_vector_norm", "linalg_norm", "frobenius_norm", "prod", "cumsum", "cumprod",
    "cummax", "cummin", "logsumexp", "logcumsumexp", "all", "any", "count_nonzero", "nansum", "nanmean",
    "median", "mode", "sort", "topk", "kthvalue",
    # pooling, losses, indexing work
    "max_pool1d", "max_pool2d", "max_pool2d_with_indices", "max_pool3d", "max_pool3d_with_indices",
    "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "_adaptive_avg_pool2d",
    "adaptive_avg_pool3d", "adaptive_max_pool2d", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "nll_loss", "nll_loss_forward", "nll_loss2d_forward", "cross_entropy_loss", "kl_div", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "embedding", "embedding_bag", "_embedding_bag", "index_select", "gather",
    "scatter", "scatter_add", "scatter_reduce", "index_add", "index_put", "_index_put_impl", "index",
    "_unsafe_index", "take", "masked_select", "masked_scatter", "one_hot", "dropout", "native_dropout",
    "bernoulli", "tril", "triu", "upsample_nearest2d", "upsample_bilinear2d", "grid_sampler_2d",
})

#: Operators that only allocate, describe or move data: views and reshapes, transposes, allocation and fills,
#: copies and dtype/device conversion, slicing, concatenation and padding, metadata and scalar reads. Honest
#: custom kernels use these around their launches (``torch.empty_like``, ``x.contiguous()``, ``.view``), and the
#: Triton interpreter uses empty/new_empty/set_/copy_ to stage a launch's arguments.
NON_COMPUTE_OPS: frozenset[str] = frozenset({
    # allocation and fills
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
    "scalar_tensor", "arange", "fill", "zero", "resize", "resize_as", "_resize_output", "set",
    "lift", "lift_fresh", "lift_fresh_copy", "alias", "detach", "_has_compatible_shallow_copy_type",
    # copies and conversion
    "copy", "_copy_from", "_copy_from_and_resize", "clone", "contiguous", "to", "_to_copy", "type_as",
    "_local_scalar_dense", "item", "record_stream", "pin_memory", "_pin_memory",
    # views, reshapes, transposes, slicing
    "view", "_unsafe_view", "view_as", "view_as_real", "view_as_complex", "reshape", "_reshape_alias",
    "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze", "permute", "transpose", "t", "numpy_T", "mT",
    "mH", "adjoint", "movedim", "moveaxis", "swapaxes", "swapdims", "expand", "expand_as", "broadcast_to",
    "slice", "select", "narrow", "split", "split_with_sizes", "unsafe_split", "chunk", "unbind", "as_strided",
    "diagonal", "unfold", "_conj", "conj", "resolve_conj", "resolve_neg", "_neg_view",
    # assembling outputs (data movement, no arithmetic)
    "cat", "concat", "concatenate", "stack", "constant_pad_nd",
    # metadata
    "promote_types", "result_type", "can_cast", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "size", "stride", "dim", "is_same_size", "is_contiguous", "is_nonzero", "_nested_tensor_size",
})

#: Operator namespaces that are PyTorch's own libraries: an op from one of them is library work (classified with
#: the tables). An op from any other namespace was registered by the candidate (``torch.library``): a call of its
#: own code, whose inside the mode re-enters to record.
LIBRARY_NAMESPACES: frozenset[str] = frozenset({
    "aten", "prims", "quantized", "_quantized", "quantized_decomposed", "mkldnn", "mkl", "onednn", "fbgemm",
    "xnnpack", "_c10d_functional", "c10d", "c10d_functional", "_dtensor", "inductor", "profiler", "debugprims",
    "torchvision", "torchaudio", "torchao", "_test",
})


@functools.lru_cache(maxsize=4096)
def op_kind(name: str) -> str:
    """``"compute"``, ``"non_compute"`` or ``"unknown"`` for an operator name ("aten.relu", "aten::add_Tensor",
    "relu_", "mm_out_cpu"). ``unknown`` is counted as compute by callers of the dispatch route."""
    parts = [p for p in re.split(r"::|\.", name) if p]
    # "aten.relu.default" / "aten::add_Tensor" -> the op's name; a bare name ("relu_") stays as it is
    bare = parts[1] if len(parts) >= 2 else (parts[0] if parts else "")
    for prefix in ("structured_", "ufunc_"):
        if bare.startswith(prefix):
            bare = bare[len(prefix):]
    parts = bare.split("_")
    for end in range(len(parts), 0, -1):
        stem = "_".join(parts[:end])
        for cand in (stem, stem.rstrip("_")):
            if cand in NON_COMPUTE_OPS:
                return "non_compute"
            if cand in COMPUTE_OPS:
                return "compute"
    return "unknown"


def is_compute(name: str) -> bool:
    """The dispatch route's rule: compute, or unknown (ambiguous counts as library)."""
    return op_kind(name) != "non_compute"


# ---------------------------------------------------------------------------------------------------------------
# Dispatch route.


def _tensor_keyset(args: Any, kwargs: Any) -> Any:
    tensors = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    if not tensors:
        return None
    ks = torch._C._dispatch_keys(tensors[0])
    for t in tensors[1:]:
        ks = ks | torch._C._dispatch_keys(t)
    return ks & torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.Python)


class _Recorder(TorchDispatchMode):
    """Counts every operator that reaches the dispatcher; re-enters the ops the candidate registered."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.custom_ops: dict[str, dict[str, int]] = {}
        self.compute_seen = 0  # running count of compute ops: attributes them to an enclosing call
        self.own_seen = 0  # running count of own-code calls (extension functions, Triton launches), from the hook
        self.handled: Counter[str] = Counter()  # every op handled, by the profiler's name for it ("aten::relu")

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        namespace = getattr(func, "namespace", "aten")
        self.handled[f"{namespace}::{func.overloadpacket.__name__}"] += 1
        if namespace in LIBRARY_NAMESPACES:
            name = str(func.overloadpacket)
            self.ops[name] += 1
            if is_compute(name):
                self.compute_seen += 1
            return func(*args, **kwargs)
        # An op the candidate registered: count it, then run it with this mode active again, below the Python key,
        # so that library ops inside it are recorded (otherwise a custom op wrapping torch.relu hides it). A call
        # inside which nothing observable ran (no library compute, no own launch) is opaque: its own C++ code.
        name = f"{namespace}::{func.overloadpacket.__name__}"
        entry = self.custom_ops.setdefault(name, {"calls": 0, "opaque": 0})
        entry["calls"] += 1
        before = (self.compute_seen, self.own_seen)
        keyset = _tensor_keyset(args, kwargs)
        try:
            if keyset is None:
                return func(*args, **kwargs)
            with self:
                return func.redispatch(keyset, *args, **kwargs)
        finally:
            if (self.compute_seen, self.own_seen) == before:
                entry["opaque"] += 1


def _triton_launch_codes() -> frozenset[int]:
    """Identities of the code objects of Triton's launch entry points (``JITFunction.run``, and
    ``InterpretedFunction.run`` under ``TRITON_INTERPRET=1``), where Triton is imported; never imports it.
    Matched by identity: code objects compare equal by content, and a look-alike is not Triton's."""
    codes: set[int] = set()
    for module, cls in (("triton.runtime.jit", "JITFunction"), ("triton.runtime.interpreter", "InterpretedFunction")):
        run = getattr(getattr(sys.modules.get(module), cls, None), "run", None)
        code = getattr(run, "__code__", None)
        if code is not None:
            codes.add(id(code))
    return frozenset(codes)


def _kernel_name(kernel: Any) -> str:
    fn = getattr(kernel, "fn", None)
    return str(getattr(fn, "__name__", None) or getattr(kernel, "__name__", None) or "?")


def _installation_dirs() -> list[str]:
    """Where Python and its installed packages live (extension modules there are not the candidate's)."""
    import site

    dirs = [sys.prefix, sys.base_prefix, sys.exec_prefix, sysconfig.get_paths().get("purelib", ""),
            sysconfig.get_paths().get("platlib", "")]
    try:
        dirs += list(site.getsitepackages()) + [site.getusersitepackages()]
    except AttributeError:  # some embedded interpreters lack these
        pass
    return dirs


def _is_extension_file(file: Any) -> bool:
    return isinstance(file, str) and (file.endswith((".so", ".pyd")) or ".so." in file)


def runtime_dirs() -> list[str]:
    """Folders of code that PyTorch's and Triton's own runtimes generate and load: Triton's cache (its launcher
    module ``cuda_utils``; a launch is counted at ``JITFunction.run`` instead) and Inductor's. Modules from there are
    never the candidate's own code (``torch.compile`` output is not attributed to the candidate)."""
    import tempfile

    dirs = [os.environ.get("TRITON_CACHE_DIR", ""), os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""),
            os.path.join(os.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton")]
    try:
        dirs.append(os.path.join(tempfile.gettempdir(), "torchinductor_" + os.environ.get("USER", "")))
    except Exception:
        pass
    return [os.path.realpath(d) for d in dirs if d]


def _under(path: str, dirs: Iterable[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip(os.sep) + os.sep) for d in dirs)


def candidate_modules(roots: Iterable[str | os.PathLike[str]] = (),
                      exclude: Iterable[str | os.PathLike[str]] | None = None) -> dict[str, str]:
    """The candidate's compiled extension modules, ``{module name: file}``: every shared object under ``roots``
    (its ``TORCH_EXTENSIONS_DIR``; a module's name is its file's name up to the first dot, as Python's import
    requires), and every compiled module this process has loaded from outside the Python installation, except
    those under ``exclude`` (default ``runtime_dirs()``). ``load_inline`` does not register its module in
    ``sys.modules``, so loaded modules are looked for among all live module objects."""
    import gc
    from types import ModuleType

    skip = [os.path.realpath(d) for d in (runtime_dirs() if exclude is None else exclude)]
    found: dict[str, str] = {}
    for path in shared_objects(list(roots)):
        if not _under(path, skip):
            found.setdefault(os.path.basename(path).split(".", 1)[0], path)
    install = [os.path.realpath(p) for p in _installation_dirs() if p]
    modules = [m for m in list(sys.modules.values()) if type(m) is ModuleType]
    modules += [o for o in gc.get_objects() if type(o) is ModuleType]  # type(), not isinstance: no __class__ lookups
    for module in modules:
        file = module.__dict__.get("__file__")
        if not _is_extension_file(file):
            continue
        real = os.path.realpath(file)
        if not _under(real, install) and not _under(real, skip) and "torchinductor_" not in real:
            found.setdefault(str(module.__dict__.get("__name__")), real)
    return found


# ---------------------------------------------------------------------------------------------------------------
# Profiler cross-check (CPU). The dispatch mode is per thread and can be switched off by the code it records;
# ``torch.profiler`` with ``profile_all_threads`` sees every operator that reaches the dispatcher on any thread,
# modes on or off (verified on torch 2.13, CPU). Whenever a dispatch mode handles an operator, PyTorch's Python
# fallback kernel records a ``PythonDispatchMode`` range as a child of the operator's own range (and the operator
# the mode's handler calls runs inside it: ``aten::relu > PythonDispatchMode > aten::relu > aten::clamp_min``). So
# an operator the recorder saw is one with such a range below it; everything else the profiler saw was hidden.

#: The profiler's name for the range in which a TorchDispatchMode handles an operator.
MODE_RANGE = "PythonDispatchMode"
#: kbv's own range around the recorded call (on the recorder's thread): which thread the forward ran on.
CALL_RANGE = "kbv_fallback_call"


def _library_op(name: str) -> bool:
    namespace, sep, _ = name.partition("::")
    return bool(sep) and namespace in LIBRARY_NAMESPACES


def _start_profiler() -> tuple[bool, dict[str, Any]]:
    """Start a CPU profiler over every thread; (started, status)."""
    if _PROFILER is None:
        return False, {"status": "unavailable", "reason": "this torch lacks the profiler entry points"}
    try:
        if _PROFILER["enabled"]():  # on CUDA the caller's profiler (the GPU route) is already running
            return False, {"status": "skipped", "reason": "another profiler is active"}
        if not _PROFILER["available"]():
            return False, {"status": "unavailable", "reason": "kineto is not available"}
        config = _PROFILER["config"](_PROFILER["kineto"], False, False, False, False, False,
                                     _PROFILER["experimental"](profile_all_threads=True))
        activities = {_PROFILER["cpu"]}
        _PROFILER["prepare"](config, activities)
        _PROFILER["enable"](config, activities)
    except Exception as exc:  # never fail the trial for want of telemetry
        return False, {"status": "error", "reason": f"start: {type(exc).__name__}: {exc}"[:300]}
    return True, {"status": "ok"}


def _stop_profiler(started: bool, status: dict[str, Any], handled: Counter[str], ranged: bool
                   ) -> tuple[dict[str, int], dict[str, Any]]:
    """Stop the profiler ``_start_profiler`` started; (hidden ops, status with what the profiler saw). ``ranged``:
    the call ran inside ``CALL_RANGE``, whose event is missing when the call stopped or replaced the profiler (an
    all-threads profiler is not in ``_profiler_enabled``'s thread-local state, so that cannot tell)."""
    if not started:
        return {}, status
    try:
        result = _PROFILER["disable"]()
        tree = result.experimental_event_tree()
    except Exception as exc:
        return {}, {"status": "error", "reason": f"stop: {type(exc).__name__}: {exc}"[:300]}
    ops: list[Any] = []
    stack = list(tree)
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.tag == _PROFILER["torch_op"]:
            ops.append(event)
    if ranged and not any(e.name == CALL_RANGE for e in ops):
        return {}, {"status": "stopped", "reason": "the profiler lost the call's own range: the call stopped or "
                                                   "replaced it"}
    hidden, found = hidden_ops(ops, handled)
    return hidden, {"status": "ok", **found}


def hidden_ops(events: Iterable[Any], handled: Counter[str] | dict[str, int]) -> tuple[dict[str, int], dict[str, Any]]:
    """The compute operators the profiler saw that the dispatch recorder did not, ``{"aten::relu": count}``.

    ``events``: the profiler's operator events (``_ProfilerEvent`` of ``experimental_event_tree``: ``name``,
    ``parent``, ``children``, ``start_tid``, ``start_time_ns``, ``typed``); ``handled``: how many times the recorder
    handled each operator, by the profiler's name for it. Each ``PythonDispatchMode`` range is matched to the
    operator it sits under, first come first served, while the recorder's count for that name lasts (a mode the
    candidate pushed itself gets no match; a user annotation is never a match). An operator is seen when a matched
    range lies below it (it, or a composite around it: ``aten::linear`` around a seen ``aten::mm``), or when it runs
    inside the handling of a seen library operator (``aten::clamp_min`` inside ``aten::relu``); inside an operator
    the candidate registered, only what the recorder saw in turn is seen. Hidden: every other library compute
    operator (by the tables, unknown counting as compute) with no hidden compute operator around it, so nesting
    is counted once (``aten::relu`` hiding ``aten::clamp_min`` is one op, as the recorder counts it)."""
    events = list(events)
    budget = Counter(handled)
    user_scope = _PROFILER["user_scope"] if _PROFILER else None

    def annotation(event: Any) -> bool:
        return getattr(event.typed[1], "scope", None) == user_scope if event.typed else False

    covered: set[int] = set()
    ranges = sorted((e for e in events if e.name == MODE_RANGE and not annotation(e)),
                    key=lambda e: (e.start_time_ns, e.id))
    matched = 0
    for scope in ranges:
        op = scope.parent
        if op is None or op.name == MODE_RANGE or annotation(op) or budget[op.name] <= 0:
            continue
        budget[op.name] -= 1
        matched += 1
        up = op
        while up is not None:
            covered.add(id(up))
            up = up.parent
        if _library_op(op.name):
            below = list(scope.children)
            while below:
                event = below.pop()
                covered.add(id(event))
                below.extend(event.children)

    def hidden_compute(event: Any) -> bool:
        return (id(event) not in covered and _library_op(event.name) and not annotation(event)
                and is_compute(event.name))

    call_threads = {e.start_tid for e in events if e.name == CALL_RANGE}
    hidden: Counter[str] = Counter()
    elsewhere = 0
    for event in events:
        if not hidden_compute(event):
            continue
        up = event.parent
        while up is not None and not hidden_compute(up):
            up = up.parent
        if up is None:
            hidden[event.name] += 1
            elsewhere += event.start_tid not in call_threads
    return dict(hidden), {"events": len(events), "threads": len({e.start_tid for e in events}),
                          "mode_ranges": len(ranges), "mode_ranges_matched": matched,
                          "hidden_on_other_threads": elsewhere if call_threads else None}


def profile_call(fn: Callable[[], Any], *, own_modules: dict[str, str] | Iterable[str] | None = None
                 ) -> tuple[Any, dict[str, Any]]:
    """Run ``fn()`` under the dispatch recorder and the own-code call counter; return (its result, the profile).

    ``own_modules``: the candidate's extension modules, ``{name: file}`` (or names); default
    ``candidate_modules()`` with this process's ``TORCH_EXTENSIONS_DIR`` as root.
    The profile: ``aten_ops`` ({"aten.relu": count}, every op of PyTorch's namespaces), ``compute_ops`` and
    ``non_compute_ops`` (its split by the tables), ``own_calls`` ({"extension:mod.fn" / "triton:kernel" /
    "custom_op:ns::op": count}), ``extension_calls`` ({module: {"file", "calls", "with_compute_ops"}}: how many
    calls into each extension module dispatched a compute op while running), ``custom_ops`` ({"ns::op": {"calls",
    "opaque"}}: calls of ops the candidate registered, and those inside which nothing observable ran),
    ``hidden_ops`` ({"aten::relu": count}: compute ops a CPU ``torch.profiler`` over every thread saw during the
    call and the recorder did not, e.g. on another thread or with the dispatch modes switched off; see
    ``hidden_ops``) and ``profiler`` (``status``: ok, or skipped where another profiler already runs (the GPU
    route's), stopped (the call stopped it), unavailable or error, with ``reason``; when ok, how many op events
    and threads it saw, ``mode_ranges`` / ``mode_ranges_matched`` and ``hidden_on_other_threads``).
    Everything in it is plain data (str/int), ready for the wire.
    """
    if own_modules is None:
        own_modules = candidate_modules([os.environ["TORCH_EXTENSIONS_DIR"]] if os.environ.get("TORCH_EXTENSIONS_DIR")
                                        else [])
    files = dict(own_modules) if isinstance(own_modules, dict) else {m: "" for m in own_modules}
    own_names = frozenset(files)
    recorder = _Recorder()
    own_calls: Counter[str] = Counter()
    ext_calls: dict[str, dict[str, Any]] = {}
    stack: list[tuple[Any, str, int]] = []
    launch_codes = _triton_launch_codes()

    def module_of(func: Any) -> str | None:
        mod = getattr(func, "__module__", None)
        if isinstance(mod, str):
            return mod
        owner = getattr(func, "__self__", None)
        if owner is None:
            return None
        if type(owner).__name__ == "module":
            return getattr(owner, "__name__", None)
        mod = getattr(type(owner), "__module__", None)  # a method of a class the extension defines
        return mod if isinstance(mod, str) else None

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            mod = module_of(arg)
            if mod in own_names:
                own_calls[f"extension:{mod}.{getattr(arg, '__name__', '?')}"] += 1
                recorder.own_seen += 1
                entry = ext_calls.setdefault(mod, {"file": files.get(mod, ""), "calls": 0, "with_compute_ops": 0})
                entry["calls"] += 1
                stack.append((arg, mod, recorder.compute_seen))
        elif event in ("c_return", "c_exception"):
            if stack and stack[-1][0] is arg:
                _, mod, before = stack.pop()
                if recorder.compute_seen > before:
                    ext_calls[mod]["with_compute_ops"] += 1
        elif event == "call" and id(frame.f_code) in launch_codes:
            own_calls[f"triton:{_kernel_name(frame.f_locals.get('self'))}"] += 1
            recorder.own_seen += 1

    started, profiler = _start_profiler()
    call_range = _PROFILER["range"] if started and _PROFILER and _PROFILER["range"] else None
    try:
        previous = _getprofile()
        _setprofile(hook)
        try:
            if call_range is not None:
                with call_range(CALL_RANGE), recorder:
                    result = fn()
            else:
                with recorder:
                    result = fn()
        finally:
            _setprofile(previous)
    finally:
        hidden, profiler = _stop_profiler(started, profiler, recorder.handled, call_range is not None)
    for name, entry in recorder.custom_ops.items():
        own_calls[f"custom_op:{name}"] += entry["calls"]
    ops = dict(recorder.ops)
    profile = {
        "aten_ops": ops,
        "compute_ops": {k: v for k, v in ops.items() if is_compute(k)},
        "non_compute_ops": {k: v for k, v in ops.items() if not is_compute(k)},
        "own_calls": dict(own_calls),
        "extension_calls": ext_calls,
        "custom_ops": recorder.custom_ops,
        "hidden_ops": hidden,
        "profiler": profiler,
    }
    return result, profile


def dispatch_profile(fn: Callable[[], Any], **kwargs: Any) -> dict[str, Any]:
    """``profile_call`` without the result: ``{"aten_ops", "compute_ops", "non_compute_ops", "own_calls",
    "extension_calls", "custom_ops"}``."""
    return profile_call(fn, **kwargs)[1]


# ---------------------------------------------------------------------------------------------------------------
# Symbol route. A symbol is the demangled, qualified name of an import, without its parameter list
# ("at::_ops::relu::call", "at::cpu::mm", "cublasSgemm_v2").

#: C-level vendor libraries, by symbol prefix (undecorated C names). Anything imported with one of these prefixes
#: is library compute (their service calls, e.g. ``cublasCreate_v2``, come with compute calls in practice and are
#: ambiguous at worst).
LIBRARY_PREFIXES: dict[str, tuple[str, ...]] = {
    "cublas": ("cublas",),  # cuBLAS and cuBLASLt
    "cudnn": ("cudnn",),
    "cufft": ("cufft",),
    "cusparse": ("cusparse",),
    "cusolver": ("cusolver",),
    "curand": ("curandGenerate",),
    "blas": ("cblas_", "LAPACKE_", "openblas_"),
    "mkl": ("mkl_", "MKL_"),
    "onednn": ("dnnl_", "dnnl::", "mkldnn_", "mkldnn::", "ideep::"),
    "fbgemm": ("fbgemm::",),
    "aten-blas": ("at::native::cpublas::", "at::cuda::blas::", "at::blas::"),
    "aten-solver": ("at::cuda::solver::", "at::native::lapack"),
    "aten-jit": ("at::cuda::jit::",),
}
#: Fortran BLAS/LAPACK names (``sgemm_``, ``dgemv_``, ...).
BLAS_SYMBOL = re.compile(r"^[sdczh](gemm|gemv|gemm3m|symm|symv|syrk|syr2k|trsm|trmm|trsv|trmv|axpy|dot|dotu|dotc|"
                         r"scal|ger|geru|nrm2|asum|getrf|getrs|potrf|potrs|gesv|gesdd|geqrf|syevd)_?$")

#: ATen namespaces of per-backend and composite entry points: ``at::cpu::mm`` calls the CPU kernel directly,
#: bypassing the dispatcher (so the dispatch route never sees it). Names in them are operator names, classified
#: with the operator tables (unknown counts as compute).
ATEN_DIRECT_NAMESPACES: frozenset[str] = frozenset({
    "native", "cpu", "cuda", "mps", "xpu", "compositeexplicitautograd", "compositeimplicitautograd",
    "compositeexplicitautogradnonfunctional", "compositeimplicitautogradnestedtensor",
})
#: Names in those namespaces that are runtime services, not operators (devices, streams, threads, allocator).
#: Besides these, any camelCase name (``getCurrentCUDAStream``, ``getDeviceProperties``) and any nested namespace
#: other than the compute ones above (``at::cuda::detail::``, ``at::cuda::CUDAStream::``) is not compute.
ATEN_RUNTIME_NAMES: frozenset[str] = frozenset({
    "device_count", "current_device", "set_device", "device_synchronize", "stream_synchronize", "warning_state",
    "is_available", "getNumGPUs", "check_device", "get_device", "exchange_device", "maybe_exchange_device",
    "get_num_threads", "set_num_threads", "init_num_threads", "get_thread_num", "in_parallel_region",
    "empty_cpu", "empty_cuda", "empty_strided_cpu", "empty_strided_cuda", "empty_meta", "resize_output",
    "is_pinned", "_pin_memory",
})


#: Evidence that an object carries device code of its own (kernels compiled from the candidate's source): imports of
#: the CUDA/HIP launch and registration entry points that ``<<<...>>>`` launches and fatbinary registration compile
#: to, or a fatbinary section in the object itself (``readelf -S``). A CPU extension has no such evidence: its own
#: loops cannot be told apart from its library calls by what it imports.
OWN_CODE_IMPORTS: frozenset[str] = frozenset({
    "__cudaRegisterFunction", "__cudaRegisterFatBinary", "__cudaPushCallConfiguration", "cudaLaunchKernel",
    "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cuLaunchKernel", "cuLaunchKernelEx",
    "__hipRegisterFunction", "__hipRegisterFatBinary", "__hipPushCallConfiguration", "hipLaunchKernel",
    "hipModuleLaunchKernel",
})
DEVICE_CODE_SECTIONS: tuple[str, ...] = (".nv_fatbin", "__nv_relfatbin", ".nvFatBinSegment", ".hip_fatbin")


def _qualified_name(demangled: str) -> str:
    """``float* at::TensorBase::data_ptr<float>() const`` -> ``at::TensorBase::data_ptr<float>``."""
    name = demangled.split("@", 1)[0].strip()
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and not name.startswith("(anonymous"):
            cut = i
            break
    head = name[:cut]
    # drop a return type: the last space-separated token at template depth 0
    depth, start = 0, 0
    for i, ch in enumerate(head):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == " " and depth == 0:
            start = i + 1
    return head[start:]


def _strip_templates(name: str) -> str:
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


@functools.lru_cache(maxsize=65536)
def symbol_library(qualified: str) -> str | None:
    """The library a (qualified, demangled) imported symbol is a compute entry point of, or None."""
    for library, prefixes in LIBRARY_PREFIXES.items():
        if qualified.startswith(prefixes):
            return library
    if BLAS_SYMBOL.match(qualified):
        return "blas"
    parts = _strip_templates(qualified).split("::")
    if len(parts) < 2 or parts[0] not in ("at", "torch"):
        return None
    if parts[0] == "at" and parts[1] == "_ops" and len(parts) >= 4:
        # at::_ops::<op>_<overload>::call / ::redispatch: the dispatcher entry of an operator
        return "aten" if parts[-1] in ("call", "redispatch") and is_compute(parts[2]) else None
    if parts[0] == "at" and parts[1] in ATEN_DIRECT_NAMESPACES and len(parts) >= 3:
        if parts[1] == "meta":
            return None
        if len(parts) > 3:  # a nested namespace or class: compute only for structured kernels' impl
            if parts[2].startswith("structured_") and is_compute(parts[2]):
                return "aten-direct"
            return None
        name = parts[2]
        if name in ATEN_RUNTIME_NAMES or name != name.lower():  # runtime services, camelCase helpers
            return None
        return "aten-direct" if is_compute(name) else None
    if parts[0] == "at" and (len(parts) == 2 or parts[1] in ("Tensor", "TensorBase")):
        # at::X and Tensor methods: these namespaces also hold helpers, so only listed compute ops count
        return "aten" if op_kind(parts[-1]) == "compute" else None
    if parts[0] == "torch" and len(parts) >= 3 and parts[1] == "nn":
        # the C++ frontend's modules (torch::nn::LinearImpl::forward) and functionals run ATen compute
        if parts[-1] in ("forward", "forward_with_indices"):
            return "torch-nn"
        return "torch-nn" if parts[2] == "functional" and op_kind(parts[-1]) == "compute" else None
    if parts[0] == "torch" and len(parts) == 2:
        return "aten" if op_kind(parts[1]) == "compute" else None
    return None


def _undefined_symbols(path: str, nm: str = "nm") -> list[str]:
    out = subprocess.run([nm, "-D", "--undefined-only", "-C", path], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    names = []
    for line in out.splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and len(parts[0]) == 1:
            names.append(parts[1])
    return names


def _device_sections(path: str, readelf: str = "readelf") -> list[str]:
    out = subprocess.run([readelf, "-S", "-W", path], capture_output=True, text=True, timeout=120, check=True).stdout
    return sorted({name for name in DEVICE_CODE_SECTIONS if re.search(r"\s" + re.escape(name) + r"\s", out)})


def _is_elf(path: Path) -> bool:
    """A regular file that starts with ELF's magic (never opens a FIFO or device a worker might name)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def shared_objects(build_root: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[str]:
    """Every ELF shared object (``*.so``, ``*.so.*``) under the given folder(s), real paths, sorted."""
    roots = [build_root] if isinstance(build_root, (str, os.PathLike)) else list(build_root)
    found: set[str] = set()
    for root in roots:
        root = Path(root)
        if root.is_file():
            candidates: Iterable[Path] = [root]
        elif root.is_dir():
            candidates = (p for p in root.rglob("*") if p.name.endswith(".so") or ".so." in p.name)
        else:
            continue
        for p in candidates:
            if p.is_file() and _is_elf(p):
                found.add(os.path.realpath(p))
    return sorted(found)


def extension_symbols(build_root: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
                      objects: Iterable[str] = ()) -> dict[str, Any]:
    """The library compute entry points the candidate's compiled objects import.

    ``build_root``: a folder or several (the candidate's ``TORCH_EXTENSIONS_DIR`` and ``TRITON_CACHE_DIR``), every
    shared object below is read; ``objects``: more object files (e.g. what the worker saw loaded from outside the
    Python installation). Returns ``{"libraries": [...], "symbols": [qualified names], "objects": [paths],
    "per_object": {path: [library compute symbols]}, "own_code": {path: [evidence of own device code]},
    "errors": [...]}``.
    """
    paths = shared_objects(build_root)
    paths = sorted(set(paths) | {os.path.realpath(o) for o in objects if _is_elf(Path(o))})
    libraries: set[str] = set()
    symbols: set[str] = set()
    per_object: dict[str, list[str]] = {}
    own_code: dict[str, list[str]] = {}
    errors: list[str] = []
    for path in paths:
        try:
            names = _undefined_symbols(path)
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"{path}: {type(exc).__name__}: {exc}"[:500])
            continue
        hits, evidence = set(), set()
        for raw in names:
            qualified = _qualified_name(raw)
            library = symbol_library(qualified)
            if library:
                libraries.add(library)
                hits.add(qualified)
            elif qualified in OWN_CODE_IMPORTS:
                evidence.add(qualified)
        try:
            evidence |= {f"section {name}" for name in _device_sections(path)}
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"{path}: readelf: {type(exc).__name__}: {exc}"[:500])
        per_object[path] = sorted(hits)
        own_code[path] = sorted(evidence)
        symbols |= hits
    return {"libraries": sorted(libraries), "symbols": sorted(symbols), "objects": paths,
            "per_object": per_object, "own_code": own_code, "errors": errors}


# ---------------------------------------------------------------------------------------------------------------
# The verdict.

#: Thresholds on the library share (library units / all units, see ``classify``): at or above "fallback" the
#: forward is a fallback (its work is library code); above "partial_fallback" and below "fallback" it is a partial
#: fallback (own kernels and library compute both). 0.9 leaves room for one library op beside nine own launches
#: before "partial" becomes "fallback"; "partial_fallback" at 0 means any library compute beside own kernels is
#: reported.
FALLBACK_THRESHOLDS: dict[str, float] = {"fallback": 0.9, "partial_fallback": 0.0}
#: ``hidden_ops``' entry for a call that stopped the profiler (one library unit: what it hid cannot be known).
PROFILER_STOPPED = "<profiler stopped by the call>"


def share_flags(share: float | None, thresholds: dict[str, float]) -> list[str]:
    """``fallback`` at or above the fallback threshold, ``partial_fallback`` above the partial one, else none."""
    if share is None:
        return []
    if share >= thresholds["fallback"]:
        return ["fallback"]
    return ["partial_fallback"] if share > thresholds["partial_fallback"] else []


def classify(profile: dict[str, Any], symbols: dict[str, Any] | None = None,
             thresholds: dict[str, float] | None = None) -> dict[str, Any]:
    """A fallback verdict from both routes (trusted side: recomputes every classification from raw names).

    Units of work, counted over one forward:

    - library units: each compute (or unknown) operator the dispatcher saw, and each the CPU profiler saw that the
      dispatch mode did not (``hidden_ops``, listed in ``compute_ops`` as ``hidden:aten::relu``; a call that
      stopped the profiler counts as one); each call into an extension module
      whose object imports library compute symbols and that dispatched no compute op while running (opaque
      library work: ``at::cpu::mm``, cuBLAS); and one unit per object that imports library compute symbols but
      whose module was never seen called (an entry point the dispatch route could not attribute, e.g. a
      ``TORCH_LIBRARY`` op calling ``at::cpu::mm``, or a fallback branch);
    - own units: Triton launches, opaque calls of the candidate's registered ops (inside which no library compute
      and no other own call ran), and calls into extension modules whose object imports no library compute
      symbol. A call into an extension that imports library compute counts as library, and also as own only when
      its object shows device code of its own (``OWN_CODE_IMPORTS`` / ``DEVICE_CODE_SECTIONS``: a CUDA extension
      with its own kernels beside cuBLAS is partial); a CPU extension's own loops cannot be told apart from its
      library calls, and ambiguous counts as library.

    ``library_share`` = library / (library + own), ``None`` when neither ran (``no_work_observed`` is then true
    unless some object imports library compute: a forward of views only, or one whose work hid from both routes).
    Flags: ``fallback`` when the share is at least ``thresholds["fallback"]`` (a forward with library compute and no
    own kernel has share 1), ``partial_fallback`` when above ``thresholds["partial_fallback"]`` and below that.
    """
    thresholds = {**FALLBACK_THRESHOLDS, **(thresholds or {})}
    symbols = symbols or {}
    aten_ops = {str(k): int(v) for k, v in (profile.get("aten_ops") or {}).items()}
    hidden = {str(k): int(v) for k, v in (profile.get("hidden_ops") or {}).items() if is_compute(str(k))}
    if (profile.get("profiler") or {}).get("status") == "stopped":
        hidden[PROFILER_STOPPED] = 1  # the call stopped the profiler: what it hid is unknown, counted as one op
    compute_ops = {k: v for k, v in aten_ops.items() if is_compute(k)} | {f"hidden:{k}": v for k, v in hidden.items()}
    per_object: dict[str, list[str]] = {}
    for path, names in (symbols.get("per_object") or {}).items():
        hits = sorted({n for n in names if symbol_library(_qualified_name(n))})
        if hits:
            per_object[os.path.realpath(path)] = hits
    library_objects = set(per_object)
    own_code_objects = {os.path.realpath(p) for p, evidence in (symbols.get("own_code") or {}).items() if evidence}

    own_units = 0
    library_units = sum(compute_ops.values())
    opaque_calls = 0
    backed_modules, mixed_modules, called_objects = [], [], set()
    for key, count in (profile.get("own_calls") or {}).items():
        if key.startswith("triton:"):
            own_units += int(count)
    for entry in (profile.get("custom_ops") or {}).values():
        own_units += int(entry.get("opaque", 0))
    for module, entry in (profile.get("extension_calls") or {}).items():
        file = os.path.realpath(entry.get("file") or "") if entry.get("file") else ""
        calls, with_compute = int(entry.get("calls", 0)), int(entry.get("with_compute_ops", 0))
        called_objects.add(file)
        if file in library_objects:
            backed_modules.append(module)
            opaque_calls += max(0, calls - with_compute)
            if file in own_code_objects:  # its own device kernels beside library compute
                mixed_modules.append(module)
                own_units += calls
        else:
            own_units += calls
    unattributed = sorted(library_objects - called_objects)
    library_units += opaque_calls + len(unattributed)

    total = library_units + own_units
    share = library_units / total if total else None
    flags = share_flags(share, thresholds)
    libraries = sorted(set(symbols.get("libraries") or []) | ({"aten"} if compute_ops else set()))
    return {
        "library_share": share,
        "library_units": library_units,
        "own_units": own_units,
        "compute_ops": compute_ops,
        "hidden_ops": hidden,
        "opaque_library_calls": opaque_calls,
        "library_backed_modules": sorted(backed_modules),
        "mixed_modules": sorted(mixed_modules),
        "unattributed_objects": unattributed,
        "library_symbols": sorted({s for names in per_object.values() for s in names}),
        "libraries": libraries,
        "own_calls": dict(profile.get("own_calls") or {}),
        "no_work_observed": total == 0 and not per_object,
        "thresholds": thresholds,
        "flags": flags,
    }


# ---------------------------------------------------------------------------------------------------------------
# The GPU route: every kernel of one profiled forward, by device time.
#
# ``torch.profiler`` links each device kernel to the innermost frontend event active on the launching thread
# (``FunctionEvent.kernels``): a kernel launched while an ATen op runs (cuBLAS inside ``aten::mm``, also when a C++
# extension calls ``at::mm``) belongs to that op; one launched from a pybind11 function or a Triton launcher belongs
# to the surrounding ``record_function`` range, or to nothing. A kernel is the candidate's only when no ATen op
# launched it *and* its name is defined in the candidate's own binaries or is a Triton kernel compiled into the
# candidate's own cache; Inductor's generated kernels (``triton_*``) and anything else count as library. Kernels of
# non-compute ATen ops (copies, fills, allocation) and memcpy/memset are data movement, left out of the share.

FORWARD_RANGE = "kbv_candidate_forward"
_DATA_MOVEMENT = ("Memcpy", "Memset", "memcpy", "memset")


def gpu_kernel_events(prof: Any) -> list[dict[str, Any]]:
    """Worker side: every device event of a finished ``torch.profiler.profile``, with its launcher (the name of the
    frontend event it is linked to, or None). Plain data for the wire."""
    from torch.autograd import DeviceType

    linked: Counter[tuple[str, int]] = Counter()
    out: list[dict[str, Any]] = []
    events = list(prof.events())
    for fe in events:
        if fe.device_type == DeviceType.CPU:
            for k in getattr(fe, "kernels", []) or []:
                us = float(k.duration)
                out.append({"name": str(k.name), "us": us, "launcher": str(fe.name)})
                linked[(str(k.name), round(us * 1000))] += 1
    for fe in events:
        if fe.device_type != DeviceType.CPU:
            if getattr(fe, "is_user_annotation", False) or fe.name == FORWARD_RANGE:
                continue  # the GPU-side mirror of a record_function range (seen on the H200), not a kernel
            us = float(fe.time_range.end - fe.time_range.start)
            key = (str(fe.name), round(us * 1000))
            if linked[key]:
                linked[key] -= 1
                continue
            out.append({"name": str(fe.name), "us": us, "launcher": None})
    return out


def kernel_key(name: str) -> str:
    """A kernel or symbol name reduced to its qualified name with template arguments (no return type, no
    parameters), so a profiler kernel name and ``nm -C`` output compare equal."""
    return _qualified_name(name.strip())


def own_kernel_names(build_roots: Iterable[str | os.PathLike[str]]) -> dict[str, Any]:
    """Parent side: names the candidate itself compiled: symbols defined in its shared objects (``nm -C
    --defined-only``, falling back to the dynamic table) and kernel names in its Triton cache's metadata."""
    import json

    roots = [Path(r) for r in build_roots if r and Path(r).is_dir()]
    defined: set[str] = set()
    triton: set[str] = set()
    errors: list[str] = []
    for path in shared_objects([str(r) for r in roots]):
        for args in (["nm", "-C", "--defined-only", path], ["nm", "-D", "-C", "--defined-only", path]):
            try:
                text = subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout
            except (OSError, subprocess.SubprocessError) as exc:
                errors.append(f"{path}: {type(exc).__name__}"[:300])
                continue
            for line in text.splitlines():
                parts = line.strip().split(None, 2)
                if len(parts) == 3 and parts[1] in "TtWw":
                    defined.add(kernel_key(parts[2]))
            if defined:
                break
    for root in roots:
        for meta in root.rglob("*.json"):
            try:
                data = json.loads(meta.read_text())
            except (OSError, ValueError):
                continue
            name = data.get("name") if isinstance(data, dict) else None
            if isinstance(name, str) and name:
                triton.add(name)
    return {"defined": sorted(defined), "triton": sorted(triton), "errors": errors}


def classify_gpu(kernels: list[dict[str, Any]], own: dict[str, Any],
                 thresholds: dict[str, float] | None = None) -> dict[str, Any]:
    """Trusted side: each kernel as own, library or data movement; shares by device time; flags as ``classify``."""
    thresholds = {**FALLBACK_THRESHOLDS, **(thresholds or {})}
    defined = set(own.get("defined") or [])
    triton = {n for n in own.get("triton") or [] if not n.startswith("triton_")}  # triton_*: Inductor's naming
    totals = {"own": 0.0, "library": 0.0, "data": 0.0}
    per_kernel: dict[tuple[str, str], dict[str, Any]] = {}
    for k in kernels:
        name, us, launcher = str(k.get("name", "")), float(k.get("us", 0.0)), k.get("launcher")
        if name == FORWARD_RANGE:
            continue  # a range, not a kernel
        aten = isinstance(launcher, str) and launcher.startswith("aten::")
        if name.startswith(_DATA_MOVEMENT) or (aten and not is_compute(launcher.replace("::", ".", 1))):
            kind = "data"
        elif aten:
            kind = "library"
        elif kernel_key(name) in defined or name in triton or kernel_key(name) in triton:
            kind = "own"
        else:
            kind = "library"  # a vendor kernel called without ATen, Inductor's, or a name we cannot place
        totals[kind] += us
        entry = per_kernel.setdefault((name, kind), {"name": name[:200], "class": kind, "launcher": launcher,
                                                     "calls": 0, "us": 0.0})
        entry["calls"] += 1
        entry["us"] += us
    compute = totals["own"] + totals["library"]
    share = totals["library"] / compute if compute > 0 else None
    flags = share_flags(share, thresholds)
    ranked = sorted(per_kernel.values(), key=lambda e: -e["us"])
    return {"library_share_time": share, "own_us": totals["own"], "library_us": totals["library"],
            "data_movement_us": totals["data"], "kernels": ranked[:40],
            "library_kernels": sorted({e["name"] for e in ranked if e["class"] == "library"})[:40],
            "thresholds": thresholds, "flags": flags}
