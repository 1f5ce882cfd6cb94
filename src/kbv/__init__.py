"""kbv: verified evaluation of GPU kernels written by language models (KernelBench-compatible)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbv._version import __version__

if TYPE_CHECKING:
    from kbv.eval import EvalOptions, evaluate
    from kbv.records import Record

__all__ = ["EvalOptions", "Record", "evaluate", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("evaluate", "EvalOptions"):
        from kbv import eval as engine

        return getattr(engine, name)
    if name == "Record":
        from kbv.records import Record

        return Record
    raise AttributeError(name)
