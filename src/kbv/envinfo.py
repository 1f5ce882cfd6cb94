"""Facts about the machine, gathered by the parent without initialising CUDA in it."""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from typing import Any

import torch

from kbv._version import __version__ as kbv_version


def _nvidia_smi(query: str, gpu: int | None = None) -> list[list[str]]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    cmd = [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"]
    if gpu is not None:
        cmd += ["-i", str(gpu)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [[f.strip() for f in line.split(",")] for line in out.strip().splitlines() if line.strip()]


def cpu_count() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def gpu_indices() -> list[int]:
    """The GPUs this process may use, as indices for CUDA_VISIBLE_DEVICES (empty without CUDA)."""
    if not torch.cuda.is_available():
        return []
    return list(range(torch.cuda.device_count()))


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu, cuda or auto, not {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda asked for, but torch sees no CUDA device")
    return device


def gpu_clocks(gpu: int | None) -> dict[str, Any]:
    rows = _nvidia_smi("clocks.sm,clocks.mem,temperature.gpu,power.draw", gpu)
    if not rows or len(rows[0]) < 4:
        return {}
    sm, mem, temp, power = rows[0][:4]
    return {"sm_mhz": sm, "mem_mhz": mem, "temperature_c": temp, "power_w": power}


@functools.lru_cache(maxsize=8)
def gpu_identity(gpu: int | None) -> dict[str, Any]:
    rows = _nvidia_smi("name,driver_version,compute_cap", gpu)
    if not rows:
        return {}
    name, driver, cap = (rows[0] + ["", "", ""])[:3]
    return {"name": name, "driver": driver, "compute_capability": cap}


@functools.lru_cache(maxsize=None)
def gpu_memory_bytes(gpu: int | None) -> int | None:
    """A GPU's total memory, from nvidia-smi (None where it cannot be read)."""
    rows = _nvidia_smi("memory.total", gpu)
    try:
        return int(float(rows[0][0]) * 2**20) if rows else None
    except (ValueError, IndexError):
        return None


@functools.lru_cache(maxsize=1)
def compiler_version() -> str:
    for exe in ("c++", "g++", "gcc"):
        path = shutil.which(exe)
        if path:
            try:
                return subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout.split("\n")[0]
            except (subprocess.SubprocessError, OSError):
                continue
    return "none"


@functools.lru_cache(maxsize=1)
def nvcc_version() -> str:
    path = shutil.which("nvcc")
    if not path:
        return "none"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (subprocess.SubprocessError, OSError):
        return "unknown"
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def software() -> dict[str, Any]:
    return {
        "kbv": kbv_version,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def toolchain_id(device: str) -> str:
    """What a built extension depends on besides its source: part of the build-cache key."""
    parts = [torch.__version__, str(torch.version.cuda), platform.python_version(), platform.machine(),
             compiler_version(), device]
    if device == "cuda":
        parts.append(nvcc_version())
    return "|".join(parts)
