"""kbv: verified evaluation of GPU kernels written by language models (KernelBench-compatible)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from kbv.pipeline import EvalOptions, evaluate
    from kbv.records import Record

__all__ = ["EvalOptions", "Record", "evaluate", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("evaluate", "EvalOptions"):
        from kbv import pipeline

        return getattr(pipeline, name)
    if name == "Record":
        from kbv.records import Record

        return Record
    raise AttributeError(name)
