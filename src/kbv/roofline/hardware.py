"""Hardware ceilings for the roofline: datasheet peaks per precision, measured ceilings, and calibration.

Every peak is **dense** (no 2:4 sparsity) and per GPU. NVIDIA's datasheets print the tensor-core figures with
sparsity (marked ``*``); the dense value is half of it. Precision classes (the keys of ``Ceilings.flops``):

- ``fp32``: FP32 on the CUDA cores (SIMT, non-tensor). Pointwise, reduction, norm and softmax work counts here, and
  so do fp32 matmuls when TF32 is off (cuBLAS runs them on the CUDA cores).
- ``tf32``: TF32 tensor cores (fp32 matmuls and convolutions with TF32 allowed, as kbv's verified baseline runs).
- ``bf16`` / ``fp16``: tensor cores with fp32 accumulation.
- ``fp8``: FP8 tensor cores (absent on parts without them, e.g. A100).

Bandwidth is the DRAM (HBM/GDDR) peak in bytes/s. Measured ceilings (``calibrate``) are what a large matmul per
precision and a large device-to-device copy (bytes read + bytes written) achieve; they are saved as JSON under the
kbv cache folder and preferred by ``ceilings_for`` when present.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kbv.files import write_atomic

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")
SOURCES = ("datasheet", "measured", "placeholder")

T = 1e12  # TFLOP/s -> FLOP/s
TB = 1e12  # TB/s -> B/s


@dataclass(frozen=True)
class Ceilings:
    """Peak throughputs of one device: ``flops[precision]`` in FLOP/s, ``bandwidth`` in B/s.

    ``source`` is ``datasheet`` (vendor numbers), ``measured`` (``calibrate``) or ``placeholder`` (the CPU entry:
    not a datasheet, replace it with a measurement). ``filled`` lists precisions a measured entry took from the
    datasheet because calibration did not measure them (e.g. fp8).
    """

    name: str
    flops: dict[str, float]
    bandwidth: float
    source: str = "datasheet"
    citation: str = ""
    filled: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, not {self.source!r}")
        if not (self.bandwidth > 0 and math.isfinite(self.bandwidth)):
            raise ValueError(f"{self.name}: bandwidth must be positive and finite")
        for key, value in self.flops.items():
            if key not in PRECISIONS:
                raise ValueError(f"{self.name}: unknown precision {key!r} (known: {PRECISIONS})")
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{self.name}: peak for {key} must be positive and finite")

    def peak(self, precision: str) -> float:
        try:
            return self.flops[precision]
        except KeyError:
            raise KeyError(f"{self.name} has no {precision} ceiling (has: {', '.join(self.flops)})") from None

    def ridge(self, precision: str) -> float:
        """Arithmetic intensity (FLOP/byte) where ``precision``'s compute roof meets the bandwidth roof."""
        return self.peak(precision) / self.bandwidth

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["filled"] = list(self.filled)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Ceilings":
        return cls(name=data["name"], flops={k: float(v) for k, v in data["flops"].items()},
                   bandwidth=float(data["bandwidth"]), source=data.get("source", "measured"),
                   citation=data.get("citation", ""), filled=tuple(data.get("filled", ())),
                   details=dict(data.get("details", {})))


# ---------------------------------------------------------------------------------------------------------------
# Datasheet registry. Dense values (the datasheets' sparse "*" tensor figures halved). ``patterns`` match the names
# torch.cuda.get_device_name() / nvidia-smi print, after normalisation (lower case, "nvidia" dropped, "-" and "_"
# as spaces); the registry key itself always matches.

@dataclass(frozen=True)
class _Entry:
    ceilings: Ceilings
    patterns: tuple[str, ...]


_REGISTRY: dict[str, _Entry] = {}


def _register(name: str, patterns: tuple[str, ...], flops: dict[str, float], bandwidth: float, citation: str,
              source: str = "datasheet") -> None:
    _REGISTRY[name] = _Entry(Ceilings(name, flops, bandwidth, source, citation), patterns)


# NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column (https://www.nvidia.com/en-us/data-center/h100/):
# FP32 67 TFLOPS; TF32 989*, BF16 1,979*, FP16 1,979*, FP8 3,958* TFLOPS (* sparse, halved here; the exact dense
# values from 528 tensor cores at 1,830 MHz are 494.7 / 989.4 / 989.4 / 1,978.9); HBM3 3.35 TB/s.
# torch/nvidia-smi name: "NVIDIA H100 80GB HBM3" (the PCIe card, "H100 PCIe", and "H100 NVL" differ: not matched).
_register("H100 SXM", (r"^h100 sxm", r"^h100 80gb hbm3$", r"^h100 hbm3"),
          {"fp32": 66.9 * T, "tf32": 494.7 * T, "bf16": 989.4 * T, "fp16": 989.4 * T, "fp8": 1978.9 * T},
          3.35 * TB, "NVIDIA H100 datasheet, SXM column (sparse tensor figures halved)")

# NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column (https://www.nvidia.com/en-us/data-center/h200/): the same
# GH100 compute as H100 SXM (FP32 67, TF32 989*, BF16/FP16 1,979*, FP8 3,958* TFLOPS) with 141 GB HBM3e at
# 4.8 TB/s. torch/nvidia-smi name: "NVIDIA H200" ("H200 NVL", the 600 W PCIe card, is not matched).
_register("H200 SXM", (r"^h200$", r"^h200 sxm", r"^h200 141gb"),
          {"fp32": 66.9 * T, "tf32": 494.7 * T, "bf16": 989.4 * T, "fp16": 989.4 * T, "fp8": 1978.9 * T},
          4.8 * TB, "NVIDIA H200 datasheet, SXM column (sparse tensor figures halved)")

# NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column (https://www.nvidia.com/en-us/data-center/a100/):
# FP32 19.5 TFLOPS; TF32 156 (312*), BF16 312 (624*), FP16 312 (624*) TFLOPS; no FP8; HBM2e 2,039 GB/s.
# torch name: "NVIDIA A100-SXM4-80GB" (the 40GB SXM part, 1,555 GB/s, and the PCIe cards are not matched).
_register("A100 SXM 80GB", (r"^a100 sxm4? 80gb",),
          {"fp32": 19.5 * T, "tf32": 156.0 * T, "bf16": 312.0 * T, "fp16": 312.0 * T},
          2.039 * TB, "NVIDIA A100 datasheet, 80GB SXM column (dense values as printed)")

# NVIDIA L40S datasheet (https://www.nvidia.com/en-us/data-center/l40s/): FP32 91.6 TFLOPS; TF32 183 (366*),
# BF16 362.05 (733*), FP16 362.05 (733*), FP8 733 (1,466*) TFLOPS; GDDR6 864 GB/s. torch name: "NVIDIA L40S".
_register("L40S", (r"^l40s",),
          {"fp32": 91.6 * T, "tf32": 183.0 * T, "bf16": 362.05 * T, "fp16": 362.05 * T, "fp8": 733.0 * T},
          0.864 * TB, "NVIDIA L40S datasheet (sparse tensor figures halved)")

# NVIDIA HGX B200 / DGX B200 datasheets (https://www.nvidia.com/en-us/data-center/hgx/), per GPU of the 8-GPU
# board (1,000 W): FP32 75 TFLOPS (600/8); TF32 2.25*, BF16/FP16 4.5*, FP8 9* PFLOPS per GPU (18/36/72 PF* for 8);
# HBM3e 8 TB/s (64 TB/s for 8; a later HGX page lists 62 TB/s, i.e. 7.7 TB/s per GPU). torch name: "NVIDIA B200".
_register("B200", (r"^b200",),
          {"fp32": 75.0 * T, "tf32": 1125.0 * T, "bf16": 2250.0 * T, "fp16": 2250.0 * T, "fp8": 4500.0 * T},
          8.0 * TB, "NVIDIA HGX/DGX B200 datasheet, per GPU (sparse tensor figures halved)")

# CPU: a PLACEHOLDER, not a datasheet: about one modern x86 core with AVX2 FMA (2 x 8 fp32 FMA per cycle at
# ~3 GHz, ~96 GFLOP/s, taken as 50) and ~10 GB/s of DRAM bandwidth per core (kbv's CPU workers are single-threaded).
# The CPU has no TF32 or low-precision tensor units: every class gets the fp32 figure. Replace it with a measurement:
# save_measured(calibrate("cpu"), cache_dir).
_register("cpu", (r"^cpu",),
          {"fp32": 50e9, "tf32": 50e9, "bf16": 50e9, "fp16": 50e9},
          10e9, "placeholder for one CPU core (not a datasheet): calibrate to replace", source="placeholder")

DEVICES: tuple[str, ...] = tuple(_REGISTRY)


def _normalise(name: str) -> str:
    text = re.sub(r"[-_]", " ", name.strip().lower())
    text = re.sub(r"^nvidia\s+", "", text)
    text = re.sub(r"\s+(tensor core gpu|gpu)$", "", text)
    return re.sub(r"\s+", " ", text).strip()


def canonical_name(name: str) -> str | None:
    """The registry name for a device name (``"NVIDIA H200"`` -> ``"H200 SXM"``), or None when it is unknown."""
    norm = _normalise(name)
    for key, entry in _REGISTRY.items():
        if norm == _normalise(key) or any(re.search(p, norm) for p in entry.patterns):
            return key
    return None


def lookup(name: str) -> Ceilings:
    """Datasheet ceilings for a registry name or a torch/nvidia-smi device name; KeyError when unknown."""
    key = canonical_name(name)
    if key is None:
        raise KeyError(f"no datasheet ceilings for device {name!r} (known: {', '.join(DEVICES)}); "
                       "measure them with kbv.roofline.hardware.calibrate and save_measured")
    return _REGISTRY[key].ceilings


# ---------------------------------------------------------------------------------------------------------------
# Measured ceilings (JSON under the cache folder)

MEASURED_FILE = "ceilings.json"


def measured_path(cache_dir: str | Path) -> Path:
    return Path(cache_dir) / MEASURED_FILE


def _key(name: str) -> str:
    return canonical_name(name) or name.strip()


def _read(cache_dir: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(measured_path(cache_dir).read_text())
    except (OSError, ValueError):
        return {}
    devices = data.get("devices") if isinstance(data, dict) else None
    return devices if isinstance(devices, dict) else {}


def load_measured(name: str, cache_dir: str | Path) -> Ceilings | None:
    """The measured ceilings saved for a device (matched like ``lookup``), or None."""
    entry = _read(cache_dir).get(_key(name))
    if entry is None:
        return None
    try:
        return Ceilings.from_json(entry)
    except (KeyError, TypeError, ValueError):
        return None


def save_measured(ceilings: Ceilings, cache_dir: str | Path) -> Path:
    """Save (or replace) a device's measured ceilings; the file keeps other devices' entries. Returns the path."""
    if ceilings.source != "measured":
        raise ValueError("only measured ceilings are saved (source must be 'measured')")
    devices = _read(cache_dir)
    key = _key(ceilings.name)
    devices[key] = replace(ceilings, name=key).to_json()
    return write_atomic(measured_path(cache_dir), json.dumps({"version": 1, "devices": devices}, indent=2,
                                                             sort_keys=True))


def ceilings_for(name: str, cache_dir: str | Path | None = None, prefer_measured: bool = True) -> Ceilings:
    """Ceilings for a device: measured ones saved under ``cache_dir`` when present (precisions calibration did not
    measure are taken from the datasheet and listed in ``filled``), else the datasheet's. ``source`` says which."""
    datasheet: Ceilings | None
    try:
        datasheet = lookup(name)
    except KeyError:
        datasheet = None
    measured = load_measured(name, cache_dir) if (prefer_measured and cache_dir is not None) else None
    if measured is not None:
        if datasheet is None:
            return measured
        missing = tuple(p for p in datasheet.flops if p not in measured.flops)
        if not missing:
            return measured
        flops = dict(measured.flops) | {p: datasheet.flops[p] for p in missing}
        return replace(measured, flops=flops, filled=tuple(sorted(set(measured.filled) | set(missing))))
    if datasheet is None:
        raise KeyError(f"no measured or datasheet ceilings for device {name!r} (known: {', '.join(DEVICES)})")
    return datasheet


# ---------------------------------------------------------------------------------------------------------------
# Calibration

def _median_time_s(fn, device, repeats: int, warmup: int) -> tuple[float, list[float]]:
    import torch

    for _ in range(warmup):
        fn()
    times: list[float] = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
    else:
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times), times


class _MatmulPrecision:
    """Temporarily set ``torch.set_float32_matmul_precision`` ('highest': TF32 off; 'high': TF32 on)."""

    def __init__(self, value: str):
        self.value = value

    def __enter__(self) -> None:
        import torch

        self.saved = torch.get_float32_matmul_precision()
        self.saved_cuda = getattr(torch.backends.cuda.matmul, "fp32_precision", None)  # new-style, when present
        torch.set_float32_matmul_precision(self.value)  # also sets the new-style cuda.matmul control

    def __exit__(self, *exc: object) -> None:
        import torch

        torch.set_float32_matmul_precision(self.saved)
        if self.saved_cuda is not None:
            try:
                torch.backends.cuda.matmul.fp32_precision = self.saved_cuda
            except (RuntimeError, ValueError):
                pass


def calibrate(device: Any = "cuda", *, matmul_size: int | None = None, copy_bytes: int | None = None,
              repeats: int | None = None, warmup: int = 2) -> Ceilings:
    """Measure achievable ceilings on ``device`` with torch (median of ``repeats`` timed runs each).

    Compute: an n x n x n matmul per precision on random data (2 n^3 FLOPs each): on CUDA fp32 with TF32 off
    (the SIMT roof), tf32, bf16 and fp16 (n = 8192); on the CPU fp32 only (n = 1024, a few GFLOP), whose figure
    also stands for tf32 (a CPU has no TF32). Bandwidth: a device-to-device ``copy_`` of ``copy_bytes`` (1 GiB on
    CUDA, 128 MiB on the CPU), counting bytes read plus bytes written. Timed with CUDA events on a GPU and
    ``time.perf_counter`` on the CPU; the CPU calibration takes well under 10 s (about 1 s on one core).
    """
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    cuda = dev.type == "cuda"
    n = matmul_size or (8192 if cuda else 1024)
    nbytes = copy_bytes or ((1 << 30) if cuda else (128 << 20))
    reps = repeats or (10 if cuda else 5)
    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    plan = ([("fp32", torch.float32, "highest"), ("tf32", torch.float32, "high"),
             ("bf16", torch.bfloat16, "high"), ("fp16", torch.float16, "high")] if cuda
            else [("fp32", torch.float32, "highest")])
    flops: dict[str, float] = {}
    details: dict[str, Any] = {"device": str(dev), "device_name": name, "torch": torch.__version__,
                               "matmul_size": n, "copy_bytes": nbytes, "repeats": reps,
                               "threads": torch.get_num_threads(), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                               "runs_s": {}}
    gen = torch.Generator(device=dev).manual_seed(0)
    for key, dtype, matmul_precision in plan:
        a = torch.randn(n, n, device=dev, dtype=torch.float32, generator=gen).to(dtype)
        b = torch.randn(n, n, device=dev, dtype=torch.float32, generator=gen).to(dtype)
        c = torch.empty(n, n, device=dev, dtype=dtype)
        with _MatmulPrecision(matmul_precision):
            median, runs = _median_time_s(lambda: torch.mm(a, b, out=c), dev, reps, warmup)  # noqa: F821 (bound in the loop)
        flops[key] = 2.0 * n ** 3 / median
        details["runs_s"][key] = runs
        del a, b, c
    if not cuda:
        flops["tf32"] = flops["fp32"]
        details["note"] = "CPU: fp32 matmul measured; tf32 set to it (no TF32 on a CPU); bf16/fp16 not measured"
    src = torch.empty(nbytes // 4, device=dev, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    median, runs = _median_time_s(lambda: dst.copy_(src), dev, reps, warmup)  # noqa: F821 (bound above)
    bandwidth = 2.0 * src.numel() * src.element_size() / median
    details["runs_s"]["copy"] = runs
    del src, dst
    label = canonical_name(name) or name
    return Ceilings(label, flops, bandwidth, "measured",
                    f"kbv.roofline.hardware.calibrate on {name}: median of {reps} runs (matmul n={n}, copy {nbytes} B)",
                    details=details)
