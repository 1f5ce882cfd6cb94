"""Setting and reading the numeric flags a baseline fixes (legacy and new-style TF32 controls alike)."""

from __future__ import annotations

from typing import Any

import torch

from kbv.protocol import BASELINES


def apply_baseline(name: str) -> dict[str, Any]:
    """Set both the new-style per-backend ``fp32_precision`` controls and the legacy ones, then read them back.

    New-style first, legacy last: a legacy write keeps the new-style value consistent, whereas reading a legacy
    getter after a new-style write raises on recent torch.
    """
    b = BASELINES[name]
    backends = torch.backends
    if hasattr(backends.cuda.matmul, "fp32_precision"):
        backends.cuda.matmul.fp32_precision = b.matmul_fp32_precision
    if hasattr(backends.cudnn, "conv") and hasattr(backends.cudnn.conv, "fp32_precision"):
        backends.cudnn.conv.fp32_precision = b.cudnn_conv_fp32_precision
    torch.set_float32_matmul_precision(b.float32_matmul_precision)
    backends.cuda.matmul.allow_tf32 = b.float32_matmul_precision != "highest"
    backends.cudnn.allow_tf32 = b.cudnn_allow_tf32
    return read_flags()


def apply_strict() -> None:
    """IEEE float32 everywhere: TF32 off for matmuls and cuDNN (new-style and legacy controls), and no
    reduced-precision reductions in bf16 matmuls, for the reference's strict run of a trial judged again
    (``kbv.judge.recheck_with_noise``); ``restore_flags`` puts back what ``read_flags`` read before."""
    backends = torch.backends
    if hasattr(backends.cuda.matmul, "fp32_precision"):
        backends.cuda.matmul.fp32_precision = "ieee"
    if hasattr(backends.cudnn, "conv") and hasattr(backends.cudnn.conv, "fp32_precision"):
        backends.cudnn.conv.fp32_precision = "ieee"
    torch.set_float32_matmul_precision("highest")
    backends.cuda.matmul.allow_tf32 = False
    backends.cudnn.allow_tf32 = False
    backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False


def read_flags() -> dict[str, Any]:
    backends = torch.backends
    flags: dict[str, Any] = {}

    def read(key: str, getter: Any) -> None:
        try:
            flags[key] = getter()
        except Exception as exc:  # a mixed legacy/new-style state raises on read
            flags[key] = f"unreadable: {type(exc).__name__}"

    read("float32_matmul_precision", torch.get_float32_matmul_precision)
    read("cuda.matmul.allow_tf32", lambda: backends.cuda.matmul.allow_tf32)
    read("cudnn.allow_tf32", lambda: backends.cudnn.allow_tf32)
    read("cudnn.benchmark", lambda: backends.cudnn.benchmark)
    read("cudnn.deterministic", lambda: backends.cudnn.deterministic)
    read("cuda.matmul.fp32_precision", lambda: backends.cuda.matmul.fp32_precision)
    read("cudnn.conv.fp32_precision", lambda: backends.cudnn.conv.fp32_precision)
    read("cudnn.rnn.fp32_precision", lambda: backends.cudnn.rnn.fp32_precision)
    read("cuda.matmul.allow_bf16_reduced_precision_reduction",
         lambda: backends.cuda.matmul.allow_bf16_reduced_precision_reduction)
    return flags


def restore_flags(saved: dict[str, Any]) -> None:
    """Put back what ``read_flags`` returned: legacy controls first, then the new-style ones, which keep an unset
    ('none') value unset where a legacy write would have made it explicit."""
    backends = torch.backends
    if isinstance(saved.get("float32_matmul_precision"), str):
        torch.set_float32_matmul_precision(saved["float32_matmul_precision"])
    for key, target, attr in (("cuda.matmul.allow_tf32", backends.cuda.matmul, "allow_tf32"),
                              ("cudnn.allow_tf32", backends.cudnn, "allow_tf32"),
                              ("cuda.matmul.allow_bf16_reduced_precision_reduction", backends.cuda.matmul,
                               "allow_bf16_reduced_precision_reduction")):
        if isinstance(saved.get(key), bool):
            setattr(target, attr, saved[key])
    for key, target, attr in (("cuda.matmul.fp32_precision", backends.cuda.matmul, "fp32_precision"),
                              ("cudnn.conv.fp32_precision", getattr(backends.cudnn, "conv", None), "fp32_precision"),
                              ("cudnn.rnn.fp32_precision", getattr(backends.cudnn, "rnn", None), "fp32_precision")):
        value = saved.get(key)
        if target is not None and isinstance(value, str) and not value.startswith("unreadable"):
            setattr(target, attr, value)
