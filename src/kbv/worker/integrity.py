"""Noticing a candidate that changes the worker's environment: patched functions, changed numeric flags.

A snapshot is taken when the worker starts, before any candidate code exists; after every command the worker
compares the present state with it and reports what differs, as data. The parent turns a non-empty report into the
flag ``tamper`` (verdict ``rejected`` for an otherwise correct kernel). This is telemetry from a process the
candidate controls, so it catches the common patches (torch's comparison and timing functions, time.*, tensor
methods, every function and class method of every kbv module loaded in the worker, TF32 flags) but not a candidate that also rewrites this check; the verdict's
real safeguards are that outputs are judged in the reference worker and the parent.
"""

from __future__ import annotations

import os
import sys
import time
import types
from typing import Any, Callable

import torch

from kbv.worker import backends

_TORCH_FUNCTIONS = ("allclose", "isclose", "equal", "manual_seed", "rand", "randn", "randint", "empty", "zeros",
                    "set_float32_matmul_precision", "get_float32_matmul_precision", "no_grad")
_TENSOR_METHODS = ("detach", "to", "cpu", "clone", "contiguous", "numpy", "equal", "view", "reshape", "copy_",
                   "untyped_storage", "data_ptr", "stride", "is_floating_point", "__eq__", "__sub__", "abs")
_TIME_FUNCTIONS = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns")


def _kbv_modules() -> list[types.ModuleType]:
    """Every kbv module loaded in this process (the snapshot is taken before any candidate code exists)."""
    return [m for name, m in sorted(sys.modules.items())
            if isinstance(m, types.ModuleType) and (name == "kbv" or name.startswith("kbv."))]


def _watched() -> dict[str, Callable[[], Any]]:
    getters: dict[str, Callable[[], Any]] = {}
    for name in _TORCH_FUNCTIONS:
        getters[f"torch.{name}"] = lambda n=name: getattr(torch, n)
    for name in _TENSOR_METHODS:
        getters[f"torch.Tensor.{name}"] = lambda n=name: getattr(torch.Tensor, n)
    for name in _TIME_FUNCTIONS:
        getters[f"time.{name}"] = lambda n=name: getattr(time, n)
    getters["torch.testing.assert_close"] = lambda: torch.testing.assert_close
    getters["torch.nn.Module.__call__"] = lambda: torch.nn.Module.__call__
    getters["torch.cuda.Event"] = lambda: torch.cuda.Event
    getters["torch.cuda.synchronize"] = lambda: torch.cuda.synchronize
    getters["torch.cuda.Event.record"] = lambda: torch.cuda.Event.record
    getters["torch.cuda.Event.elapsed_time"] = lambda: torch.cuda.Event.elapsed_time
    for module in _kbv_modules():
        for attr, value in vars(module).items():
            # every callable the module holds: its own functions and classes, and the references it captured
            # (time.perf_counter_ns as timer._perf_counter_ns, unbound tensor methods in wire, ...)
            if callable(value) and not isinstance(value, types.ModuleType) and not attr.startswith("__"):
                getters[f"{module.__name__}.{attr}"] = lambda m=module, a=attr: getattr(m, a)
    problem = sys.modules.get("kbv_problem")  # loaded (trusted) before the snapshot; the candidate must not edit it
    if problem is not None:
        for attr, value in vars(problem).items():
            if not attr.startswith("__") and not isinstance(value, types.ModuleType):
                getters[f"problem.{attr}"] = lambda a=attr: getattr(problem, a)
    for module in _kbv_modules():
        for cls_name, cls in vars(module).items():
            if isinstance(cls, type) and cls.__module__ == module.__name__:
                for attr, value in vars(cls).items():
                    if isinstance(value, types.FunctionType):
                        getters[f"{module.__name__}.{cls_name}.{attr}"] = lambda c=cls, a=attr: getattr(c, a)
    return getters


def _identity(value: Any) -> Any:
    """Plain values (a problem's shape constants) compare by value, everything else by identity."""
    if isinstance(value, (int, float, str, bool, type(None))):
        return ("value", value)
    if isinstance(value, (tuple, list)) and all(isinstance(v, (int, float, str, bool)) for v in value):
        return ("value", tuple(value))
    return ("id", id(value))


# torch rewraps these itself when torch._dynamo is first imported (which the fallback recorder or a candidate's
# legitimate imports may trigger): they are compared through their __wrapped__ chain, but only through wrappers whose
# code lives inside torch's own package. A candidate's functools.wraps around torch.manual_seed (or torch.allclose,
# which is never unwrapped) is still a change. kbv seeds through a captured reference anyway
# (kbv.worker.loading.seed_everything), so such a wrapper sees no seed; the report is for the record.
UNWRAPPED = frozenset({"torch.manual_seed"})
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _torch_wrapper(value: Any) -> bool:
    code = getattr(value, "__code__", None)
    return code is not None and os.path.abspath(code.co_filename).startswith(_TORCH_DIR)


def _unwrap(value: Any) -> Any:
    for _ in range(8):
        inner = getattr(value, "__wrapped__", None)
        if inner is None or not _torch_wrapper(value):
            break
        value = inner
    return value


class Integrity:
    """The snapshot of one worker, and the comparison against it."""

    def __init__(self) -> None:
        self._getters = _watched()
        self._identity = {name: self._current(name, get) for name, get in self._getters.items()}
        self.expected_flags = backends.read_flags()
        self.noted: list[str] = []  # changes the worker saw itself (an allocator poison turned off)

    def note(self, change: str) -> None:
        if change not in self.noted:
            self.noted.append(change)

    @staticmethod
    def _current(name: str, get: Callable[[], Any]) -> Any:
        value = get()
        return _identity(_unwrap(value) if name in UNWRAPPED else value)

    def flags_set(self, flags: dict[str, Any]) -> None:
        """The worker itself changed the flags (a baseline): they are the new expectation."""
        self.expected_flags = dict(flags)

    def changes(self) -> list[str]:
        changed = []
        for name, get in self._getters.items():
            try:
                if self._current(name, get) != self._identity[name]:
                    changed.append(name)
            except Exception:
                changed.append(name)
        now = backends.read_flags()
        changed += [f"flag {k}: {self.expected_flags.get(k)!r} -> {v!r}" for k, v in now.items()
                    if self.expected_flags.get(k) != v]
        return changed + self.noted
