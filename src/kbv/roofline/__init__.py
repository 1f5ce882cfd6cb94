"""Roofline bounds for kbv problems: FLOPs by precision class, minimum bytes, and the time no kernel can beat.

    T_roofline = max( sum_p FLOPs_p / peak_p ,  bytes / bandwidth ),   attainment S = T_roofline / T_measured

**FLOPs** are counted over one forward of the reference (``count``, in a fresh process running ``kbv.worker.flops``), on the ``meta`` device where it works (no
memory is allocated, so default sizes of several GB cost nothing), else on the CPU (see ``count``):

- *Tensor FLOPs* come from ``torch.utils.flop_counter.FlopCounterMode`` (matmul, conv, attention; 2 FLOPs per
  multiply-add; conv and addmm biases are not in its formulas). kbv adds formulas for ``mv``, ``addmv``, ``dot``,
  ``vdot`` and ``addbmm`` (2 FLOPs per multiply-add). Each op's FLOPs go to the precision class of its inputs:
  fp32 -> ``tf32`` (kbv's verified baseline runs fp32 matmuls with TF32, and both baselines run cuDNN convolutions
  with TF32; ``fp32_matmul="ieee"`` sends fp32 *matmuls* to ``fp32``, the SIMT roof, as the standard baseline runs
  them), bf16 -> ``bf16``, fp16 -> ``fp16``, float8 -> ``fp8``.
- *Attention* (``F.scaled_dot_product_attention``) is counted semantically with FlopCounterMode's own SDPA formula
  (two batched matmuls) times the share of (query, key) pairs a causal mask keeps (``is_causal=True``; top-left
  aligned, as torch defines it), plus 6 SIMT FLOPs per kept score (scale 1, softmax 5); the ops torch runs inside
  it (a materialised mask, full-size matmuls) are not counted again. An explicit ``attn_mask`` is counted in full
  (its contents are data).
- *SIMT FLOPs* (class ``fp32``, whatever the dtype) come from a per-element cost table (``SIMT_COSTS``) applied to
  every other aten op of the forward through a ``TorchDispatchMode``: a cost per output element (``out``) or per
  element of the first tensor input (``in``). Arithmetic, comparisons and selects are 1 (``exp``, ``log``,
  ``sqrt``, ``rsqrt`` too), ``sigmoid``/``tanh``/``erf`` 4, ``silu`` 5, ``gelu`` 8; reductions (``sum``, ``amax``,
  ``argmax``, ...) 1 per input element (``mean`` 1 more per output element); ``softmax``/``log_softmax`` 5 per
  element; ``layer_norm``, ``group_norm`` and training-mode ``batch_norm`` 8 per element (eval-mode batch norm 4);
  pooling one per window element per output. The bias of ``addmm``/``baddbmm``/``addmv`` and of a convolution with
  a bias is 1 SIMT FLOP per output element. Views, copies, casts, concatenation, indexing and creation ops are 0
  (``ZERO_COST``); any other op is costed 0 and listed in ``Counts.uncounted``.

**Bytes** are the minimum any implementation must move: each unique input tensor, parameter/buffer and output
tensor read or written once at its dtype's size (tensors de-duplicated by storage, offset, shape, stride and dtype,
so an output that *is* an input counts once). Intermediates are free (a perfect fusion).

**Regime**: ``memory`` when the intensity (total FLOPs / bytes) is below the ridge point of the *dominant*
precision (the class with the largest FLOPs_p / peak_p), else ``compute``. ``launch_bound`` is set when
``t_roofline_ms < LAUNCH_BOUND_MS`` (0.01 ms = 10 us): a single CUDA kernel launch plus kbv's device-wide
synchronize costs several microseconds on an H100/H200, so below 10 us the roofline is not attainable and
attainment mostly measures launch overhead. An attainment above 1 (faster than the bound) means the count is wrong
or the kernel skips work: it is flagged ``above_roofline``, never reported as a win.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from kbv.roofline.hardware import Ceilings, ceilings_for

from kbv import files, proc
from kbv.counts import Counts
from kbv.files import write_atomic
from kbv.protocol import COUNT_RULES_VERSION

LAUNCH_BOUND_MS = 0.01  # t_roofline below 10 us: launch-overhead bound (see the module docstring)
ABOVE_ROOFLINE = 1.0  # attainment above this is flagged above_roofline


class RooflineError(RuntimeError):
    """A problem that could not be counted or bounded."""


# ---------------------------------------------------------------------------------------------------------------
# Roofline

def _median(summary: Any) -> float | None:
    value = summary.get("median") if isinstance(summary, dict) else summary
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None


@dataclass
class Roofline:
    """The roofline bound of a problem's counts on a device's ceilings."""

    counts: Counts
    ceilings: Ceilings
    launch_threshold_ms: float = LAUNCH_BOUND_MS

    def __post_init__(self) -> None:
        for cls in self.counts.flops:
            self.ceilings.peak(cls)  # KeyError naming the missing ceiling

    @property
    def flops(self) -> dict[str, int]:
        return dict(self.counts.flops)

    @property
    def bytes(self) -> int:
        return self.counts.bytes

    @property
    def total_flops(self) -> int:
        return self.counts.total_flops

    @property
    def intensity(self) -> float:
        """FLOP per byte (total FLOPs of every class over the minimum bytes)."""
        return self.total_flops / self.bytes if self.bytes else math.inf

    @property
    def compute_ms(self) -> dict[str, float]:
        return {cls: 1e3 * f / self.ceilings.peak(cls) for cls, f in self.counts.flops.items()}

    @property
    def t_compute_ms(self) -> float:
        return sum(self.compute_ms.values())

    @property
    def t_memory_ms(self) -> float:
        return 1e3 * self.bytes / self.ceilings.bandwidth

    @property
    def t_roofline_ms(self) -> float:
        return max(self.t_compute_ms, self.t_memory_ms)

    @property
    def dominant_precision(self) -> str | None:
        """The class with the largest FLOPs_p / peak_p (None without FLOPs)."""
        times = self.compute_ms
        return max(times, key=lambda p: times[p]) if times else None

    @property
    def ridge(self) -> float | None:
        dom = self.dominant_precision
        return self.ceilings.ridge(dom) if dom else None

    @property
    def regime(self) -> str:
        ridge = self.ridge
        return "memory" if ridge is None or self.intensity < ridge else "compute"

    @property
    def launch_bound(self) -> bool:
        return self.t_roofline_ms < self.launch_threshold_ms

    def attainment(self, t_measured_ms: float | None) -> float | None:
        """S = t_roofline / t_measured (None for a missing or non-positive time). S > 1 is flagged
        (``above_roofline``): a counting bug or a kernel that skips work."""
        t = _median(t_measured_ms)
        return self.t_roofline_ms / t if t is not None else None

    @staticmethod
    def above_roofline(attainment: float | None) -> bool:
        return attainment is not None and attainment > ABOVE_ROOFLINE

    def to_json(self) -> dict[str, Any]:
        c = self.counts
        return {
            "flops": self.flops, "bytes": self.bytes, "intensity": self.intensity, "regime": self.regime,
            "t_roofline_ms": self.t_roofline_ms,
            "ceilings": {k: v for k, v in self.ceilings.to_json().items() if k != "details"},
            "t_compute_ms": self.t_compute_ms, "t_memory_ms": self.t_memory_ms,
            "dominant_precision": self.dominant_precision, "ridge": self.ridge, "launch_bound": self.launch_bound,
            "counted": {"device": c.device, "profile": c.profile, "precision": c.precision,
                        "fp32_matmul": c.fp32_matmul, "fallback": c.fallback, "uncounted": c.uncounted,
                        "bytes_breakdown": c.bytes_breakdown, "intermediate_bytes": c.intermediate_bytes,
                        "notes": c.notes, "rules_version": c.rules_version},
        }

    def record_section(self, timing_ms: dict[str, Any]) -> dict[str, Any]:
        """The ``roofline`` section of a kbv record, from the record's ``timing_ms``: the bound plus the attainment
        of the candidate (its verified median; its standard one where only the standard baseline was timed) and of
        both reference baselines; ``above_roofline`` lists those with S > 1."""
        cand_key = next((k for k in ("candidate_verified", "candidate_standard") if _median(timing_ms.get(k))), None)
        times = {"candidate": timing_ms.get(cand_key) if cand_key else None,
                 "reference_verified": timing_ms.get("reference_verified"),
                 "reference_standard": timing_ms.get("reference_standard")}
        attainment = {name: self.attainment(t) for name, t in times.items()}
        section = self.to_json()
        section["attainment"] = attainment
        section["candidate_timing"] = cand_key.split("_", 1)[1] if cand_key else None
        section["above_roofline"] = sorted(n for n, s in attainment.items() if self.above_roofline(s))
        return section



# ---------------------------------------------------------------------------------------------------------------
# Counting outside the calling process, with a cache (for the trusted parent, which never imports problem code)

def counts_key(problem_path: str | Path, profile: str | None, precision: str, fp32_matmul: str = "tf32",
               shape: dict[str, Any] | None = None) -> str:
    source = Path(problem_path).read_bytes()
    material = json.dumps({"source": hashlib.sha256(source).hexdigest(), "profile": profile, "shape": shape,
                           "precision": precision, "fp32_matmul": fp32_matmul, "torch": torch.__version__,
                           "rules": COUNT_RULES_VERSION}, sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()


def count_isolated(problem_path: str | Path, profile: str | None = None, precision: str = "fp32", *,
                   fp32_matmul: str = "tf32", timeout: float = 300.0, shape: dict[str, Any] | None = None) -> Counts:
    """Counts of one forward in a fresh Python process (``python -m kbv.worker.flops``), killed after ``timeout``
    s (this process never imports problem code)."""
    cmd = [sys.executable, "-m", "kbv.worker.flops", "--problem", str(problem_path), "--precision", precision,
           "--fp32-matmul", fp32_matmul]
    if profile not in (None, "default"):
        cmd += ["--profile", str(profile)]
    if shape:
        cmd += ["--shape", json.dumps(shape)]
    done = proc.run(cmd, timeout, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    if done.timed_out:
        raise RooflineError(f"counting {problem_path} took more than {timeout:g} s")
    if done.returncode != 0:
        raise RooflineError(f"counting {problem_path} failed: {done.stderr.strip()[-2000:]}")
    return Counts.from_json(json.loads(done.stdout))


def counts_cached(problem_path: str | Path, profile: str | None, precision: str, cache_dir: str | Path, *,
                  fp32_matmul: str = "tf32", timeout: float = 300.0,
                  shape: dict[str, Any] | None = None) -> Counts:
    """Counts from ``<cache_dir>/roofline/<key>.json`` (key: the problem's source hash, profile, precision, fp32
    matmul class, torch version and ``COUNT_RULES_VERSION``), counted in a fresh process and saved on a miss."""
    profile = None if profile in (None, "default") else profile
    path = Path(cache_dir) / "roofline" / f"{counts_key(problem_path, profile, precision, fp32_matmul, shape)}.json"
    counts = cached_counts(problem_path, profile, precision, cache_dir, fp32_matmul=fp32_matmul, shape=shape)
    if counts is not None:
        return counts
    counts = count_isolated(problem_path, profile, precision, fp32_matmul=fp32_matmul, timeout=timeout, shape=shape)
    write_atomic(path, json.dumps(counts.to_json()))
    return counts


def cached_counts(problem_path: str | Path, profile: str | None, precision: str, cache_dir: str | Path, *,
                  fp32_matmul: str = "tf32", shape: dict[str, Any] | None = None) -> Counts | None:
    """The counts already in ``<cache_dir>/roofline`` (see ``counts_cached``), or None (nothing is counted; an
    unreadable problem file or cache entry is None too)."""
    profile = None if profile in (None, "default") else profile
    try:
        key = counts_key(problem_path, profile, precision, fp32_matmul, shape)
        return Counts.from_json(json.loads((Path(cache_dir) / "roofline" / f"{key}.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def precount(jobs: Sequence[tuple[str | Path, str | None, str, dict[str, Any] | None]], cache_dir: str | Path, *,
             fp32_matmul: str = "tf32", timeout_per_job: float = 60.0) -> int:
    """Fill the counts cache for ``(problem_path, profile, precision, shape)`` jobs not in it yet, in one fresh
    process for all of them (``python -m kbv.worker.flops --batch``: a process per problem pays ~3 s of start-up
    each). A job that fails or is not reached in time is left out: ``counts_cached`` counts it alone later and
    reports its error there. Returns how many were counted."""
    todo: dict[Path, dict[str, Any]] = {}
    for problem_path, profile, precision, shape in jobs:
        profile = None if profile in (None, "default") else profile
        path = Path(cache_dir) / "roofline" / f"{counts_key(problem_path, profile, precision, fp32_matmul, shape)}.json"
        if not path.exists():
            todo[path] = {"problem": str(problem_path), "profile": profile, "precision": precision,
                          "fp32_matmul": fp32_matmul, "shape": shape}
    if not todo:
        return 0
    done = proc.run([sys.executable, "-m", "kbv.worker.flops", "--batch"], 30.0 + timeout_per_job * len(todo),
                    env=dict(os.environ, CUDA_VISIBLE_DEVICES=""), stdin=json.dumps(list(todo.values())).encode())
    counted = 0
    for path, line in zip(todo, done.stdout.splitlines()):
        try:
            result = json.loads(line)
            counts = Counts.from_json(result["counts"])
        except (ValueError, KeyError, TypeError):
            continue  # an error line, or a torn last line
        write_atomic(path, json.dumps(counts.to_json()))
        counted += 1
    return counted


# ---------------------------------------------------------------------------------------------------------------
# python -m kbv.roofline

def _format_row(name: str, roof: Roofline) -> str:
    return (f"{name:36s} {roof.total_flops / 1e9:12.3f} {roof.bytes / 1e6:11.2f} {roof.intensity:10.2f} "
            f"{roof.regime:8s} {roof.t_roofline_ms:12.5f}{'  launch-bound' if roof.launch_bound else ''}"
            f"{'  [' + roof.counts.fallback + ']' if roof.counts.fallback else ''}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kbv.roofline", description=__doc__.split("\n")[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--problem", type=Path, help="a problem file")
    target.add_argument("--problems", type=Path, help="a suite folder (level*/ subfolders)")
    parser.add_argument("--device", default="H200 SXM", help="registry or torch/nvidia-smi device name")
    parser.add_argument("--profile", default=None, help="size profile (default: the default sizes)")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--fp32-matmul", default="tf32", choices=["tf32", "ieee"])
    parser.add_argument("--cache-dir", type=Path, default=None, help="where measured ceilings are saved")
    parser.add_argument("--datasheet", action="store_true", help="ignore measured ceilings")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    cache_dir = args.cache_dir
    if cache_dir is None:
        cache_dir = files.cache_dir()
    ceilings = ceilings_for(args.device, cache_dir, prefer_measured=not args.datasheet)
    if args.problem is not None:
        paths = [args.problem]
    else:
        from kbv.problems import discover

        paths = [p.path for p in discover(args.problems)]
    results = {}
    for path in paths:
        counts = count_isolated(path, args.profile, args.precision, fp32_matmul=args.fp32_matmul)
        results[path] = Roofline(counts, ceilings)
    if args.json:
        data = {str(p): r.to_json() for p, r in results.items()}
        print(json.dumps(next(iter(data.values())) if args.problem is not None else data, indent=2))
        return 0
    print(f"ceilings: {ceilings.name} ({ceilings.source})")
    print(f"{'problem':36s} {'GFLOP':>12s} {'MB':>11s} {'FLOP/B':>10s} {'regime':8s} {'t_roof_ms':>12s}")
    for path, roof in results.items():
        print(_format_row(f"{path.parent.name}/{path.stem}", roof))
    return 0


if __name__ == "__main__":
    sys.exit(main())
