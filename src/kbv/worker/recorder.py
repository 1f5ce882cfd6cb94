"""Worker side of library-fallback detection: the dispatch recorder, the all-threads CPU profiler cross-check
and the GPU kernel list of one profiled forward (``profile_call``, ``gpu_kernel_events``). It gathers raw names and
counts; the trusted parent classifies them (``kbv.fallback``). See ``kbv.fallback`` for the method and its limits."""

from __future__ import annotations

import os
import sys
import sysconfig
from collections import Counter
from typing import Any, Callable, Iterable

import torch
import torch._dynamo  # noqa: F401  (the first profiled call imports it, 2-3 s; here it is paid once where workers
#                                    are forked from, before any candidate code and before the tamper snapshot)
from torch.utils._python_dispatch import TorchDispatchMode

from kbv.fallback.ops import FORWARD_RANGE, LIBRARY_NAMESPACES, SYSTEM_LIBRARY_DIRS, is_compute, shared_objects

# captured when the worker imports this module (in the fork server, before any candidate code exists)
_setprofile = sys.setprofile
_getprofile = sys.getprofile
try:  # the profiler's entry points (the CPU cross-check, ``hidden_ops``, and every timed forward's recording,
    # ``kbv.worker.kernel_record``), captured for the same reason
    from torch._C import _autograd as _torch_autograd_c, _profiler as _torch_profiler_c

    PROFILER: dict[str, Any] | None = {
        "available": torch.autograd.kineto_available, "enabled": _torch_autograd_c._profiler_enabled,
        "prepare": _torch_autograd_c._prepare_profiler, "enable": _torch_autograd_c._enable_profiler,
        "disable": _torch_autograd_c._disable_profiler, "toggle": _torch_autograd_c._toggle_collection_dynamic,
        "config": _torch_profiler_c.ProfilerConfig, "cuda": _torch_profiler_c.ProfilerActivity.CUDA,
        "kineto": _torch_profiler_c.ProfilerState.KINETO, "cpu": _torch_profiler_c.ProfilerActivity.CPU,
        "experimental": _torch_profiler_c._ExperimentalConfig, "torch_op": _torch_profiler_c._EventType.TorchOp,
        "user_scope": _torch_profiler_c.RecordScope.USER_SCOPE,
        "range": getattr(_torch_profiler_c, "_RecordFunctionFast", None),
    }
except (ImportError, AttributeError):  # another torch: the profiler cross-check reports itself unavailable
    PROFILER = None

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
    ``sys.modules``, so where a shared object mapped into this process (``mapped_extension_files``) is neither under
    ``roots``, nor a module of ``sys.modules``, nor the system's (``SYSTEM_LIBRARY_DIRS``), its module is looked for
    among all live module objects (a walk of some 50 ms with torch loaded, run again only once the mapped objects
    have changed)."""
    import gc
    from types import ModuleType

    skip = [os.path.realpath(d) for d in (runtime_dirs() if exclude is None else exclude)]
    install = [os.path.realpath(p) for p in _installation_dirs() if p]

    def own(real: str) -> bool:
        return not _under(real, install) and not _under(real, skip) and "torchinductor_" not in real

    found: dict[str, str] = {}
    for path in shared_objects(list(roots)):
        if not _under(path, skip):
            found.setdefault(os.path.basename(path).split(".", 1)[0], path)
    for m in list(sys.modules.values()):
        file = m.__dict__.get("__file__") if type(m) is ModuleType else None
        if _is_extension_file(file) and own(real := os.path.realpath(file)):
            found.setdefault(str(m.__dict__.get("__name__")), real)
    mapped = frozenset(mapped_extension_files())
    known = {os.path.realpath(p) for p in found.values()}
    system = [os.path.realpath(d) for d in SYSTEM_LIBRARY_DIRS]
    if not any(own(real) and real not in known and not _under(real, system)
               for real in (os.path.realpath(p.removesuffix(" (deleted)")) for p in mapped)):
        return found  # every compiled object mapped here is accounted for: no module of another is loaded
    if _LOADED.get("mapped") != mapped:
        files = [(str(o.__dict__.get("__name__")), os.path.realpath(o.__dict__["__file__"]))
                 for o in gc.get_objects()  # type(), not isinstance: no __class__ lookups
                 if type(o) is ModuleType and _is_extension_file(o.__dict__.get("__file__"))]
        _LOADED.update(mapped=mapped, files=files)
    for name, real in _LOADED["files"]:
        if own(real):
            found.setdefault(name, real)
    return found


# the compiled modules the last walk found ([(name, file)]) and the shared objects mapped when it ran
_LOADED: dict[str, Any] = {}


def mapped_extension_files() -> set[str]:
    """The shared objects mapped into this process now (``/proc/self/maps``): while they stay the same, no compiled
    module can have been loaded, and ``candidate_modules`` reuses its last walk over every object (some 50 ms with
    torch loaded)."""
    found: set[str] = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[5:]
                if path and _is_extension_file(path[0].removesuffix(" (deleted)")):
                    found.add(path[0])
    except OSError:
        return {"<unreadable>"}  # never a subset of a later reading: the walk runs again
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
    if PROFILER is None:
        return False, {"status": "unavailable", "reason": "this torch lacks the profiler entry points"}
    try:
        if PROFILER["enabled"]():  # on CUDA the caller's profiler (the GPU route) is already running
            return False, {"status": "skipped", "reason": "another profiler is active"}
        if not PROFILER["available"]():
            return False, {"status": "unavailable", "reason": "kineto is not available"}
        config = PROFILER["config"](PROFILER["kineto"], False, False, False, False, False,
                                     PROFILER["experimental"](profile_all_threads=True))
        activities = {PROFILER["cpu"]}
        PROFILER["prepare"](config, activities)
        PROFILER["enable"](config, activities)
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
        result = PROFILER["disable"]()
        tree = result.experimental_event_tree()
    except Exception as exc:
        return {}, {"status": "error", "reason": f"stop: {type(exc).__name__}: {exc}"[:300]}
    ops: list[Any] = []
    stack = list(tree)
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.tag == PROFILER["torch_op"]:
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
    user_scope = PROFILER["user_scope"] if PROFILER else None

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
    call_range = PROFILER["range"] if started and PROFILER and PROFILER["range"] else None
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


