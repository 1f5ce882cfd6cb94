"""How to evaluate: ``EvalOptions``, validated before anything runs."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from kbv.files import cache_dir
from kbv.problems import Problem, resolve_profile
from kbv.protocol import (DEFAULT_SPEEDUP_BOUND, GPU_TIMING_CPUS, PRESETS, PROTOCOLS, STANDARD_TOLERANCES,
                          TOLERANCES)

DEVICES = ("auto", "cpu", "cuda")


class OptionsError(ValueError):
    """An option that cannot work, found before anything runs (the CLI shows it as a one-line error)."""


@dataclass
class EvalOptions:
    """How to evaluate. ``profile='auto'`` uses the problems' ``small`` size profile on the CPU and their default
    sizes on a GPU; ``None`` or ``'default'`` always uses the default sizes."""

    device: str = "auto"
    protocol: str = "both"
    precision: str = "fp32"
    timeout: float = 180.0
    build_timeout: float = 600.0
    trials: int = 3
    profile: str | None = "auto"
    cache_dir: Path = field(default_factory=cache_dir)
    timing_pairs: int | None = None  # fresh process pairs for timing (default: kbv.protocol.TIMING_RULES)
    gpu_share: int = 1  # pairs in flight per GPU: their correctness stages overlap, timing is exclusive (kbv.eval.gate)
    speedup_bound: float = DEFAULT_SPEEDUP_BOUND  # speedups above this are flagged speedup_above_bound
    sandbox: str = field(default_factory=lambda: os.environ.get("KBV_SANDBOX", "auto"))  # auto (when root) | off
    require_custom_kernels: bool = False  # fallback / partial_fallback make a correct kernel "rejected"
    strict_precision: bool = False  # low_precision makes a correct kernel "rejected"
    standard_tolerance: str = "v0"  # KernelBench's standard check: v0 (1e-2) or current (1e-4 fp32, 1e-2 bf16)
    protect: list[str] = field(default_factory=list)  # folders candidate workers see read-only (the results folder)
    reuse_reference_timing: bool = False  # opt in: reuse cached reference times (short re-measure, not interleaved)
    threads: int | None = None  # torch threads in workers; default 1 on the CPU (timings immune to other load)
    build_jobs: int | None = None
    keep_scratch: bool = False
    preset: str | None = None  # a named rule set (kbv.protocol.PRESETS); it sets the fields it names
    # large CUDA outputs reach the judge as VMM descriptors (kbv.worker.handoff); KBV_CUDA_HANDOFF=0 turns it off
    cuda_handoff: bool = field(default_factory=lambda: os.environ.get("KBV_CUDA_HANDOFF", "1") != "0")
    # correctness inputs lent by the judge in a shared buffer it reads back itself (kbv.worker.lending); on CUDA they
    # need cuda_handoff; KBV_LEND_INPUTS=0 turns lending off (each worker draws its own inputs, checked by itself)
    lend_inputs: bool = field(default_factory=lambda: os.environ.get("KBV_LEND_INPUTS", "1") != "0")
    # both roles' timed inputs lent by a third process, the lender (kbv.eval.lent_timing): None (KBV_LEND_TIMED unset)
    # for the device's default (LEND_TIMED_DEFAULT: the CPU lends, a GPU not until measured there); KBV_LEND_TIMED=1
    # or 0 lends always or never
    lend_timed: bool | None = field(default_factory=lambda: {"1": True, "0": False}.get(
        os.environ.get("KBV_LEND_TIMED", ""), None))
    # every forward of every timing command recorded (kbv.worker.kernel_record): None (KBV_RECORD_TIMED unset) for the
    # device's default (RECORD_TIMED_DEFAULT), KBV_RECORD_TIMED=1 or 0 always or never
    record_timed: bool | None = field(default_factory=lambda: {"1": True, "0": False}.get(
        os.environ.get("KBV_RECORD_TIMED", ""), None))
    # the idle timing worker's processes stopped while the other role's worker is timed (kbv.sandbox.freeze);
    # KBV_FREEZE_IDLE=0 leaves them running
    freeze_idle: bool = field(default_factory=lambda: os.environ.get("KBV_FREEZE_IDLE", "1") != "0")
    # each pair's reference timed once more after the candidate's processes are gone (kbv.eval.performance's clean
    # command, ``reference_slowed``): None (KBV_CLEAN_REFERENCE unset) for the device's default
    # (CLEAN_REFERENCE_DEFAULT), KBV_CLEAN_REFERENCE=1 or 0 always or never
    clean_reference: bool | None = field(default_factory=lambda: {"1": True, "0": False}.get(
        os.environ.get("KBV_CLEAN_REFERENCE", ""), None))
    # the parent samples every worker's CPU time from outside (kbv.sandbox.sampler: library use the candidate cannot
    # hide in the calls it can tell apart); KBV_SAMPLE_WORKERS=0 turns it off
    sample_workers: bool = field(default_factory=lambda: os.environ.get("KBV_SAMPLE_WORKERS", "1") != "0")
    # the timing stage's workers start ahead, in threads: every pair's while the correctness stage runs, idle with no
    # candidate code until their pair is due (kbv.eval.performance.start_early); KBV_START_AHEAD=0 starts each worker
    # when its pair is due
    start_ahead: bool = field(default_factory=lambda: os.environ.get("KBV_START_AHEAD", "1") != "0")
    # how many pairs not yet begun keep correctness workers started ahead on one GPU (kbv.eval.lookahead), at most
    # --gpu-share's: None (KBV_LOOKAHEAD_DEPTH unset) for LOOKAHEAD_DEPTH
    lookahead_depth: int | None = field(default_factory=lambda: int(os.environ["KBV_LOOKAHEAD_DEPTH"])
                                        if os.environ.get("KBV_LOOKAHEAD_DEPTH", "").isdigit() else None)
    # on a GPU both roles' timing workers pinned by the parent to the same N CPUs of their GPU's own, every other
    # worker to the rest (GPU_TIMING_CPUS; KBV_GPU_TIMING_CPUS=N, 0 leaves them all unpinned)
    gpu_timing_cpus: int = field(default_factory=lambda: int(os.environ.get("KBV_GPU_TIMING_CPUS", "")
                                                             or GPU_TIMING_CPUS))
    # a precompiled torch/extension.h for load_inline builds (kbv.eval.pch): auto (built for PCH_MIN_BUILDS builds
    # in one run, then offered to every build), on (built for one), off (neither built nor offered); KBV_PCH sets it
    pch: str = field(default_factory=lambda: os.environ.get("KBV_PCH", "auto"))
    # where those headers are offered, a CUDA source's torch/extension.h reads torch/types.h (kbv.eval.pch; a build
    # that fails with it is made again without); KBV_DEVICE_HEADER=0 reads torch/extension.h itself
    device_header: bool = field(default_factory=lambda: os.environ.get("KBV_DEVICE_HEADER", "1") != "0")

    def __post_init__(self) -> None:
        self.cache_dir = Path(self.cache_dir)  # a str from Python callers works as from the command line
        if self.preset is not None:
            if self.preset not in PRESETS:
                raise OptionsError(f"--preset must be one of {', '.join(sorted(PRESETS))} (got {self.preset!r})")
            for name, value in PRESETS[self.preset].items():
                setattr(self, name, value)

    def resolved_profile(self, device: str, problem: Problem) -> str | None:
        return resolve_profile(self.profile, device, problem)

    def resolved_threads(self, device: str) -> int | None:
        return self.threads if self.threads is not None else (1 if device == "cpu" else None)

    @property
    def baselines(self) -> tuple[str, ...]:
        return tuple(PROTOCOLS[self.protocol])

    @property
    def standard_tolerance_value(self) -> float:
        return STANDARD_TOLERANCES[self.standard_tolerance][self.precision]

    def validate(self) -> None:
        """Raise ``OptionsError`` naming the first option that cannot work."""
        if self.device not in DEVICES and not str(self.device).startswith("cuda:"):
            raise OptionsError(f"--device must be one of {', '.join(DEVICES)} (got {self.device!r})")
        if self.protocol not in PROTOCOLS:
            raise OptionsError(f"--protocol must be one of {', '.join(sorted(PROTOCOLS))} (got {self.protocol!r})")
        if self.precision not in TOLERANCES:
            raise OptionsError(f"--precision must be one of {', '.join(sorted(TOLERANCES))} (got {self.precision!r})")
        if self.standard_tolerance not in STANDARD_TOLERANCES:
            raise OptionsError(f"--standard-tolerance must be one of {', '.join(STANDARD_TOLERANCES)} "
                               f"(got {self.standard_tolerance!r})")
        if not isinstance(self.trials, int) or self.trials < 1:
            raise OptionsError(f"--trials must be at least 1 (got {self.trials!r})")
        if not self.timeout > 0:
            raise OptionsError(f"--timeout must be a positive number of seconds (got {self.timeout!r})")
        if not self.build_timeout > 0:
            raise OptionsError(f"--build-timeout must be a positive number of seconds (got {self.build_timeout!r})")
        if self.timing_pairs is not None and (not isinstance(self.timing_pairs, int) or self.timing_pairs < 1):
            raise OptionsError(f"--timing-pairs must be at least 1 (got {self.timing_pairs!r})")
        if not isinstance(self.gpu_share, int) or self.gpu_share < 1:
            raise OptionsError(f"--gpu-share must be at least 1 (got {self.gpu_share!r})")
        if not self.speedup_bound > 0:
            raise OptionsError(f"--speedup-bound must be positive (got {self.speedup_bound!r})")
        if self.pch not in ("auto", "on", "off"):
            raise OptionsError(f"KBV_PCH / pch must be 'auto', 'on' or 'off' (got {self.pch!r})")
        if self.sandbox not in ("auto", "off"):
            raise OptionsError(f"KBV_SANDBOX / sandbox must be 'auto' or 'off' (got {self.sandbox!r})")
        if self.profile is not None and not isinstance(self.profile, str):
            raise OptionsError(f"--profile must be a name (got {self.profile!r})")
        if self.profile is not None and not self.profile.strip():
            raise OptionsError("--profile must be auto, default or a profile name (got an empty name)")
        for flag, seconds in (("--timeout", self.timeout), ("--build-timeout", self.build_timeout)):
            if not math.isfinite(seconds):
                raise OptionsError(f"{flag} must be a finite number of seconds (got {seconds!r})")
        for name, value in (("--threads", self.threads), ("build_jobs", self.build_jobs)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise OptionsError(f"{name} must be at least 1 (got {value!r})")
