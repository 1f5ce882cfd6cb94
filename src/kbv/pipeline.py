"""One (problem, candidate) pair through the stages: compile -> correctness -> performance (with memory).

This is the trusted side. Each stage runs its candidate in a fresh worker process (``kbv.sandbox``); the reference
runs in other fresh workers that never import the candidate. Workers send raw data; verdicts and statistics are
decided here, with ``kbv.judge`` and ``kbv.stats``.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
import shutil
import statistics
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kbv import envinfo, judge, stats
from kbv.candidates import Candidate
from kbv.problems import Problem
from kbv.protocol import (
    BASELINES, BURST_DEVICE_BOUND, BURST_MAX_CALLS, BURST_MAX_WALL_SPEEDUP, BURST_MIN_CLAIM, BURST_TARGET_MS,
    DISTRIBUTIONS, MEMORY_SLACK_BYTES, PROTOCOLS, REFERENCE_REMEASURE_TRIALS, TIMING_ROUNDS,
    DEFAULT_SPEEDUP_BOUND, DEVICE_IN_USE_SLACK_BYTES, FALLBACK_FLAGS, GUARD_BYTES, POISON_BYTES, PRECISION_CHECK, PRECISION_FLAGS,
    REJECTING_FLAGS, TIMING_RULES, TOLERANCES, WALL_CLOCK_MARGIN, worst_verdict,
)
from kbv.records import Record
from kbv.refcache import ReferenceTimingCache, cache_key
from kbv.sandbox import confine
from kbv.sandbox.launch import Worker, WorkerFailure, WorkerSpec
from kbv.worker import fallback as fallback_check


SANDBOX_BUILD_ROOT = Path("/var/tmp/kbv-sandbox-build")


def default_cache_dir() -> Path:
    return Path(os.environ.get("KBV_CACHE_DIR", Path.home() / ".cache" / "kbv"))


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
    cache_dir: Path = field(default_factory=default_cache_dir)
    timing_pairs: int | None = None  # fresh process pairs for timing (default: kbv.protocol.TIMING_RULES)
    speedup_bound: float = DEFAULT_SPEEDUP_BOUND  # speedups above this are flagged speedup_above_bound
    sandbox: str = field(default_factory=lambda: os.environ.get("KBV_SANDBOX", "auto"))  # auto (when root) | off
    require_custom_kernels: bool = False  # fallback / partial_fallback make a correct kernel "rejected"
    strict_precision: bool = False  # low_precision makes a correct kernel "rejected"
    protect: list[str] = field(default_factory=list)  # folders candidate workers see read-only (the results folder)
    reuse_reference_timing: bool = False  # opt in: reuse cached reference times (short re-measure, not interleaved)
    threads: int | None = None  # torch threads in workers; default 1 on the CPU (timings immune to other load)
    build_jobs: int | None = None
    keep_scratch: bool = False

    def resolved_profile(self, device: str, problem: Problem) -> str | None:
        if self.profile == "auto":
            return "small" if device == "cpu" and "small" in problem.profiles else None
        return None if self.profile in (None, "default") else self.profile

    def resolved_threads(self, device: str) -> int | None:
        return self.threads if self.threads is not None else (1 if device == "cpu" else None)

    def validate(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {sorted(PROTOCOLS)}")
        if self.precision not in TOLERANCES:
            raise ValueError(f"precision must be one of {sorted(TOLERANCES)}")
        if self.trials < 1:
            raise ValueError("trials must be at least 1")


@dataclass
class CompileResult:
    """The compile stage's outcome for one candidate file (shared by every pair that uses the file)."""

    ok: bool
    verdict: str = ""
    error: dict[str, Any] | None = None
    seconds: float = 0.0
    problem_failed: bool = False  # the problem module itself did not load: not the candidate's fault


def build_dir(candidate: Candidate, device: str, cache_dir: Path) -> Path:
    """Per-candidate extension folder, named by a hash of the source and the toolchain: concurrent builds of
    different sources never collide, and a rebuild of the same source is a cache hit."""
    key = hashlib.sha256(f"{candidate.sha256}|{envinfo.toolchain_id(device)}".encode()).hexdigest()[:24]
    return cache_dir / "build" / key


def _candidate_env(candidate: Candidate, device: str, gpu: int | None, options: EvalOptions, work: Path) -> dict[str, str]:
    build = build_dir(candidate, device, options.cache_dir)
    env = {
        "TORCH_EXTENSIONS_DIR": str(build / "torch_extensions"),
        "TRITON_CACHE_DIR": str(build / "triton"),
        "TMPDIR": str(work),
        "MAX_JOBS": str(options.build_jobs or envinfo.cpu_count()),
    }
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        cap = envinfo.gpu_identity(gpu).get("compute_capability")
        if cap and "TORCH_CUDA_ARCH_LIST" not in os.environ:
            env["TORCH_CUDA_ARCH_LIST"] = cap
    return env


def candidate_spec(problem: Problem, candidate: Candidate, options: EvalOptions, device: str, gpu: int | None,
                   scratch: Path, stage: str, shape: dict[str, Any] | None = None) -> WorkerSpec:
    """A candidate worker's spec. When sandboxing, the candidate and problem files are copied into a private work
    folder owned by the sandbox user, and the build folder is handed to that user too."""
    work = scratch / f"{stage}-candidate"
    work.mkdir(parents=True, exist_ok=True)
    env = _candidate_env(candidate, device, gpu, options, work)
    candidate_path, problem_path, confine_spec = str(candidate.path), str(problem.path), None
    sandbox = confine.plan(options.sandbox, device)
    ids = sandbox.get("ids")
    if sandbox["requested"]:
        protected = [*confine.protected_code(), *options.protect]
        confine_spec = {"network": sandbox["network"], "pid": sandbox["pid"],
                        "ids": [ids[0], ids[1]] if ids else None,
                        "read_only": protected if sandbox["read_only"] else None}
    if ids is not None:
        src = work / "src"
        src.mkdir(exist_ok=True)
        candidate_path = str(shutil.copy2(candidate.path, src / candidate.path.name))
        problem_path = str(shutil.copy2(problem.path, src / problem.path.name))
        build = Path(env["TORCH_EXTENSIONS_DIR"]).parent
        if not confine.traversable(build.parent):  # e.g. a cache under /root: build somewhere the user can reach
            build = SANDBOX_BUILD_ROOT / build.name
            env["TORCH_EXTENSIONS_DIR"], env["TRITON_CACHE_DIR"] = str(build / "torch_extensions"), str(build / "triton")
        build.mkdir(parents=True, exist_ok=True)
        scratch.chmod(scratch.stat().st_mode | 0o001)  # the user may pass through the scratch folder, not list it
        confine.hand_over(work, ids)
        confine.hand_over(build, ids)
        env["HOME"] = str(work)
    return WorkerSpec(
        role="candidate", device=device, problem_path=problem_path, profile=options.resolved_profile(device, problem),
        precision=options.precision, mode=problem.mode, work_dir=work, log_path=scratch / f"{stage}-candidate.log",
        candidate_path=candidate_path, unscaled=problem.unscaled_inputs, env=env,
        threads=options.resolved_threads(device), confine=confine_spec, stage=stage, shape=shape,
    )


def _reference_env(device: str, gpu: int | None, work: Path) -> dict[str, str]:
    env = {"TMPDIR": str(work)}
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    return env


def _failure_dict(stage: str, failure: WorkerFailure) -> dict[str, Any]:
    return {"stage": stage, "kind": failure.kind, "message": failure.message, "log_tail": failure.log_tail[-2000:],
            "traceback": (failure.detail.get("traceback") or "")[-3000:]}


def _timing_summary(groups: list[list[float]]) -> dict[str, Any]:
    """Statistics of all trials pooled, plus each process's median (their spread is the between-process part)."""
    pooled = [t for g in groups for t in g]
    return stats.summarize(pooled) | {"process_medians": [stats.summarize(g)["median"] for g in groups if g],
                                      "rounds": TIMING_ROUNDS}


def _same_outputs(a: dict[str, Any], b: dict[str, Any]) -> tuple[bool, float | None]:
    """Whether two candidate replies hold the same output bits (NaN equal to NaN), and the largest difference."""
    import torch

    items_a, items_b = a.get("outputs", []), b.get("outputs", [])
    if len(items_a) != len(items_b):
        return False, None
    same, worst = True, 0.0
    for x, y in zip(items_a, items_b):
        tx, ty = x.get("tensor"), y.get("tensor")
        if not isinstance(tx, torch.Tensor) or not isinstance(ty, torch.Tensor):
            continue
        if tx.shape != ty.shape or tx.dtype != ty.dtype:
            return False, None
        if torch.equal(tx, ty):
            continue
        if tx.is_floating_point():
            both_nan = torch.isnan(tx) & torch.isnan(ty)
            if bool((both_nan | (tx == ty)).all()):
                continue
            diff = (tx.double() - ty.double()).abs().masked_fill(both_nan, 0.0)
            worst = max(worst, float(diff.nan_to_num(nan=float("inf")).max()))
        same = False
    return same, (None if same else worst)


def _as_float(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) else float("inf")


class _ReferenceFailed(Exception):
    def __init__(self, failure: WorkerFailure, stage: str):
        super().__init__(failure.message)
        self.failure = failure
        self.stage = stage


class PairEvaluation:
    """Runs the stages for one pair on one device and fills in its ``Record``."""

    def __init__(self, problem: Problem, candidate: Candidate, options: EvalOptions, device: str,
                 gpu: int | None = None, candidate_label: str | None = None, shape: dict[str, Any] | None = None):
        self.problem = problem
        self.shape = shape  # one shape's overrides of a multi-shape problem (None: the file's own constants)
        self.candidate = candidate
        self.options = options
        self.device = device
        self.gpu = gpu
        self.profile = options.resolved_profile(device, problem)
        self.scratch = Path(tempfile.mkdtemp(prefix="kbv-"))
        self.record = Record(
            problem=problem.key, level=problem.level, problem_id=problem.problem_id,
            problem_sha256=problem.source_sha256, candidate=candidate_label or str(candidate.path),
            candidate_sha256=candidate.sha256, sample=candidate.sample, verdict="", standard_verdict="",
        )
        self.ref_state: dict[str, Any] = {}
        self.init_seed = secrets.randbits(63)
        self.tamper: dict[str, set[str]] = {"candidate": set(), "reference": set()}
        self._trials_seen = 0

    # -- workers --------------------------------------------------------------------------------------------------

    def _spec(self, role: str, stage: str) -> WorkerSpec:
        if role == "candidate":
            return candidate_spec(self.problem, self.candidate, self.options, self.device, self.gpu, self.scratch,
                                  stage, self.shape)
        work = self.scratch / f"{stage}-{role}"
        work.mkdir(parents=True, exist_ok=True)
        return WorkerSpec(
            role=role, device=self.device, problem_path=str(self.problem.path), profile=self.profile,
            precision=self.options.precision, mode=self.problem.mode, work_dir=work,
            log_path=self.scratch / f"{stage}-{role}.log", unscaled=self.problem.unscaled_inputs,
            env=_reference_env(self.device, self.gpu, work), threads=self.options.resolved_threads(self.device),
            stage=stage, shape=self.shape,
        )

    # -- stages ---------------------------------------------------------------------------------------------------

    def run(self, compiled: CompileResult | None = None) -> Record:
        start = time.monotonic()
        self.record.env = self._env()
        try:
            self.record.stage = "compile"
            compiled = compiled or compile_candidate(self.problem, self.candidate, self.options, self.device,
                                                     self.gpu)
            self.record.wall_seconds["compile"] = round(compiled.seconds, 3)
            if not compiled.ok:
                self.record.verdict = self.record.standard_verdict = compiled.verdict
                self.record.error = compiled.error
                if compiled.problem_failed:
                    self.record.flags.append("reference_error")
                return self.record
            self.record.stage = "correctness"
            t0 = time.monotonic()
            self._correctness()
            self.record.wall_seconds["correctness"] = round(time.monotonic() - t0, 3)
            if self._should_time():
                self.record.stage = "performance"
                t0 = time.monotonic()
                self._performance()
                self.record.wall_seconds["performance"] = round(time.monotonic() - t0, 3)
                self._roofline()
            self._judge_integrity()
            if self.record.error is None:
                self.record.stage = "done"
        except _ReferenceFailed as exc:
            self.record.verdict = self.record.standard_verdict = "runtime_error"
            self.record.flags.append("reference_error")
            self.record.error = _failure_dict(exc.stage, exc.failure) | {"reference": True}
        except Exception as exc:  # a fault of kbv's own: record it rather than lose the run
            self.record.verdict = self.record.standard_verdict = "runtime_error"
            self.record.flags.append("harness_error")
            self.record.error = {"stage": self.record.stage, "kind": "harness",
                                 "message": f"{type(exc).__name__}: {exc}",
                                 "traceback": traceback.format_exc()[-3000:]}
        finally:
            self.record.wall_seconds["total"] = round(time.monotonic() - start, 3)
            self.record.flags = sorted(set(self.record.flags))
            if not self.options.keep_scratch:
                shutil.rmtree(self.scratch, ignore_errors=True)
        return self.record

    def _correctness(self) -> None:
        rec = self.record
        options = self.options
        budget = options.timeout
        spent = 0.0  # time charged to the candidate; waiting for the reference is not

        def cand_call(worker: Worker, msg: dict[str, Any]) -> dict[str, Any]:
            nonlocal spent
            t0 = time.monotonic()
            try:
                return worker.call(msg, t0 + max(0.0, budget - spent))
            finally:
                spent += time.monotonic() - t0

        def ref_call(worker: Worker, msg: dict[str, Any]) -> dict[str, Any]:
            try:
                return worker.call(msg, time.monotonic() + options.timeout)
            except WorkerFailure as failure:
                raise _ReferenceFailed(failure, "correctness") from None

        per_dist: dict[str, dict[str, Any]] = {}
        first_d1: tuple[int, dict[str, Any]] | None = None  # (seed, candidate reply) of the first D1 trial
        seeds: dict[str, list[int]] = {}
        std_results: list[bool] = []
        failure: WorkerFailure | None = None
        try:
            reference = Worker(self._spec("reference", "correctness"), time.monotonic() + options.timeout)
        except WorkerFailure as exc:
            raise _ReferenceFailed(exc, "correctness") from None
        with reference:
            setup = ref_call(reference, {"cmd": "setup", "init_seed": self.init_seed})
            self.ref_state = setup["state"]
            rec.shapes = setup.get("shapes", {})
            rec.env["device"] = setup.get("device", {}) | rec.env.get("device", {})
            try:
                t0 = time.monotonic()
                candidate = Worker(self._spec("candidate", "correctness"), t0 + budget)
                spent += time.monotonic() - t0
            except WorkerFailure as exc:
                failure = exc
            else:
                with candidate:
                    try:
                        matched = cand_call(candidate, {"cmd": "setup", "init_seed": self.init_seed,
                                                         "state": self.ref_state})
                        unmatched = {"candidate_only": matched["candidate_only"],
                                     "reference_only": matched["reference_only"]}
                        rec.correctness["unmatched"] = unmatched
                        if matched.get("started_threads"):  # alive before any forward: work can be handed to them
                            rec.flags.append("background_threads")
                            rec.correctness.setdefault("input_use", {})["started_threads"] = \
                                matched["started_threads"]
                        if unmatched["candidate_only"] or unmatched["reference_only"]:
                            rec.flags.append("unmatched_params")  # keep the seeded initialisation on both sides
                            rec.correctness["parameters_perturbed"] = []
                        else:  # every tensor matched: fresh noise on the parameters, copied to the candidate
                            perturbed = ref_call(reference, {"cmd": "perturb", "seed": secrets.randbits(63)})
                            self.ref_state = perturbed["state"]
                            cand_call(candidate, {"cmd": "load", "state": self.ref_state})
                            rec.correctness["parameters_perturbed"] = perturbed["perturbed"]
                        for dist in DISTRIBUTIONS:
                            if dist.name in self.problem.skip:
                                per_dist[dist.name] = {"status": "skipped", "reason": self.problem.skip[dist.name],
                                                       "trials": 0}
                                rec.flags.append("skipped_distribution")
                                continue
                            result = {"status": "passed", "trials": 0, "max_abs_error": 0.0, "max_rel_error": 0.0,
                                      "error_ratio": 0.0, "centred_error": None}
                            per_dist[dist.name] = result
                            seeds[dist.name] = []
                            for _ in range(options.trials):
                                seed = secrets.randbits(63)
                                seeds[dist.name].append(seed)
                                msg = {"cmd": "forward", "seed": seed, "distribution": dist.name}
                                ref_out = ref_call(reference, msg)
                                cand_out = cand_call(candidate, msg | self._poisoned(ref_out, 0))
                                if dist.name == "D1" and first_d1 is None:
                                    first_d1 = (seed, cand_out)
                                self._check_input_use(cand_out, ref_out, dist.name)
                                # The trusted reference worker compares on its device, against outputs that
                                # never left it; the candidate's outputs reach it as data relayed from here.
                                judged = ref_call(reference, {"cmd": "judge", "candidate": cand_out,
                                                              "precision": options.precision})
                                cmp = judged["comparison"]
                                result["trials"] += 1
                                for key in ("max_abs_error", "max_rel_error", "error_ratio"):
                                    result[key] = max(result[key], _as_float(cmp[key]))
                                if cmp["centred_error"] is not None:
                                    result["centred_error"] = max(result["centred_error"] or 0.0,
                                                                  cmp["centred_error"])
                                if dist.name == "D1":
                                    std_results.append(bool(judged["standard"]))
                                if not cmp["passed"]:
                                    result["status"] = "failed"
                                    result["reason"] = cmp["reason"]
                                    break
                        if not any(r["status"] == "failed" for r in per_dist.values()) and first_d1:
                            self._poison_trial(reference, candidate, ref_call, cand_call, per_dist, first_d1)
                        if not any(r["status"] == "failed" for r in per_dist.values()) and first_d1:
                            self._precision_check(reference, ref_call, first_d1)
                        if not any(r["status"] == "failed" for r in per_dist.values()):
                            self._fallback_trial(reference, candidate, ref_call, cand_call, per_dist)
                        self._compare_buffers(ref_call(reference, {"cmd": "buffers"}),
                                              cand_call(candidate, {"cmd": "buffers"}))
                    except WorkerFailure as exc:
                        failure = exc
                    finally:
                        self._collect(candidate)
            self._collect(reference)
        rec.correctness["distributions"] = per_dist
        rec.correctness["trials_per_distribution"] = options.trials
        rec.correctness["tolerance"] = dict(vars(TOLERANCES[options.precision]))
        rec.seeds = {"init": self.init_seed, "correctness": seeds}
        d1 = per_dist.get("D1", {})
        d1_complete = d1.get("trials", 0) == options.trials or d1.get("status") == "failed"
        if failure is not None:
            verdict = "timeout" if failure.kind == "timeout" else "runtime_error"
            rec.error = _failure_dict("correctness", failure)
            running = next((n for n, r in per_dist.items() if r.get("status") == "passed"
                            and r["trials"] < options.trials), None)
            if running:
                per_dist[running]["status"] = "error"
            rec.verdict = verdict
            if d1_complete and std_results:
                rec.standard_verdict = "correct" if all(std_results) else "incorrect"
            else:
                rec.standard_verdict = verdict
            return
        failed = [n for n, r in per_dist.items() if r["status"] == "failed"]
        rejecting = (REJECTING_FLAGS | (FALLBACK_FLAGS if options.require_custom_kernels else frozenset())
                     | (PRECISION_FLAGS if options.strict_precision else frozenset()))
        broken = set(rec.flags) & rejecting
        rec.verdict = "incorrect" if failed else "rejected" if broken else "correct"
        rec.correctness["failed_distributions"] = failed
        rec.standard_verdict = "correct" if std_results and all(std_results) else "incorrect"

    @staticmethod
    def _poisoned(ref_out: dict[str, Any], which: int) -> dict[str, Any]:
        """What a candidate forward in correctness is sent beside the seed: poison for the freed blocks of the
        sizes the call will allocate (its outputs, as the reference's are, plus small-pool blocks) and guard bands
        around its inputs."""
        sizes = [int(n) for n in ref_out.get("nbytes", []) if int(n) > 0] + [2 * 2**20] * 4
        return {"poison": {"byte": POISON_BYTES[which], "sizes": sizes}, "guard_bytes": GUARD_BYTES}

    def _poison_trial(self, reference: Worker, candidate: Worker, ref_call: Callable[..., dict[str, Any]],
                      cand_call: Callable[..., dict[str, Any]], per_dist: dict[str, dict[str, Any]],
                      first_d1: tuple[int, dict[str, Any]]) -> None:
        """The first D1 trial again, with the other poison in freed memory: the outputs must pass again and should
        be the same bits. Failing only here means the kernel reads memory it never wrote."""
        seed, first = first_d1
        msg = {"cmd": "forward", "seed": seed, "distribution": "D1"}
        ref_out = ref_call(reference, msg)
        again = cand_call(candidate, msg | self._poisoned(ref_out, 1))
        self._check_input_use(again, ref_out, "D1")
        judged = ref_call(reference, {"cmd": "judge", "candidate": again, "precision": self.options.precision})
        identical, max_diff = _same_outputs(first, again)
        self.record.correctness["poison"] = {
            "bytes": [f"0x{b:02X}" for b in POISON_BYTES], "seed": seed, "passed": bool(judged["comparison"]["passed"]),
            "identical": identical, "max_abs_difference": max_diff}
        if not judged["comparison"]["passed"]:
            self.record.flags.append("uninitialized_read")
            per_dist["D1"].update(status="failed", reason=f"poisoned trial (freed memory 0x{POISON_BYTES[1]:02X}): "
                                                          + str(judged["comparison"]["reason"]))
        elif not identical:
            self.record.flags.append("nondeterministic")

    def _precision_check(self, reference: Worker, ref_call: Callable[..., dict[str, Any]],
                         first_d1: tuple[int, dict[str, Any]]) -> None:
        """Error against float64 of the candidate's first D1 outputs and of the verified baseline's own run."""
        seed, first = first_d1
        reply = ref_call(reference, {"cmd": "precision", "seed": seed, "distribution": "D1", "candidate": first})
        check = PRECISION_CHECK[self.options.precision]
        result: dict[str, Any] = {"seed": seed, "factor": check.factor, "floor": check.floor, "low": False}
        if reply.get("error"):
            result["error"] = reply["error"]
        outputs = reply.get("outputs", [])
        for out in outputs:
            ref_err, cand_err = out.get("verified_error"), out.get("candidate_error")
            if ref_err is None or cand_err is None:
                continue
            out["limit"] = check.factor * max(ref_err, check.floor)
            if cand_err > out["limit"]:
                result["low"] = True
        result["outputs"] = outputs
        self.record.correctness["precision"] = result
        if result["low"]:
            self.record.flags.append("low_precision")

    def _fallback_trial(self, reference: Worker, candidate: Worker, ref_call: Callable[..., dict[str, Any]],
                        cand_call: Callable[..., dict[str, Any]], per_dist: dict[str, dict[str, Any]]) -> None:
        """One more D1 trial under the fallback recorder, judged like the others (a kernel that behaves differently
        while profiled fails D1); the symbol route runs here in the parent, on the candidate's build folder."""
        seed = secrets.randbits(63)
        msg = {"cmd": "forward", "seed": seed, "distribution": "D1"}
        ref_call(reference, msg)  # the same forward on the reference: BatchNorm buffers stay in step
        reply = cand_call(candidate, msg | {"cmd": "fallback", "guard_bytes": GUARD_BYTES})
        judged = ref_call(reference, {"cmd": "judge", "candidate": reply, "precision": self.options.precision})
        if reply.get("guard_violations"):
            self.record.flags.append("out_of_bounds_write")
            self.record.correctness.setdefault("input_use", {}).setdefault("guard_violations", {})[
                "D1 (fallback trial)"] = reply["guard_violations"]
        env = candidate.spec.env or {}
        roots = [Path(env[k]) for k in ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR") if env.get(k)]
        modules = reply.get("modules") if isinstance(reply.get("modules"), dict) else {}
        symbols = fallback_check.extension_symbols(roots, objects=[str(p) for p in modules.values()])
        profile = reply.get("fallback") if isinstance(reply.get("fallback"), dict) else {}
        verdict = fallback_check.classify(profile, symbols)
        gpu = None
        if isinstance(reply.get("gpu_kernels"), list):  # on a GPU: device time per kernel decides when any ran
            gpu = fallback_check.classify_gpu(reply["gpu_kernels"], fallback_check.own_kernel_names(roots))
            if gpu["library_share_time"] is not None:
                verdict["flags"] = gpu["flags"]
        self.record.fallback = {k: verdict.get(k) for k in (
            "library_share", "library_units", "own_units", "compute_ops", "own_calls", "libraries",
            "library_symbols", "library_backed_modules", "mixed_modules", "unattributed_objects",
            "no_work_observed", "thresholds")} | {"seed": seed, "aten_ops": profile.get("aten_ops", {}),
                                                  "profiled_call_passed": bool(judged["comparison"]["passed"]),
                                                  "symbol_errors": symbols.get("errors"), "gpu": gpu,
                                                  "decided_by": "gpu device time" if gpu and
                                                  gpu["library_share_time"] is not None else "dispatch and symbols"}
        self.record.flags.extend(verdict.get("flags", []))
        if not judged["comparison"]["passed"]:
            per_dist["D1"].update(status="failed", reason="profiled trial: " + str(judged["comparison"]["reason"]))

    def _collect(self, worker: Worker) -> None:
        self.tamper[worker.spec.role] |= worker.tamper
        if worker.spec.role == "candidate" and worker.isolation:
            self.record.env.setdefault("isolation", {})["achieved"] = worker.isolation

    def _judge_integrity(self) -> None:
        """A candidate worker whose environment changed (beyond what a reference worker shows) broke a rule."""
        changed = sorted(self.tamper["candidate"] - self.tamper["reference"])
        if self.tamper["reference"]:
            self.record.integrity["reference_changes"] = sorted(self.tamper["reference"])
        if changed:
            self.record.integrity["tamper"] = changed
            self.record.flags.append("tamper")
            if self.record.verdict == "correct":
                self.record.verdict = "rejected"

    def _check_input_use(self, cand: dict[str, Any], ref: dict[str, Any], distribution: str) -> None:
        """Rules on how forward treats its inputs, judged against what the reference itself does: writing into an
        input (the reference's inputs are its own; an in-place kernel corrupts a caller's) and returning an output
        that shares storage with an input. Outputs may be right and still break these: verdict ``rejected``."""
        self._check_threads(cand, ref, distribution)
        self._check_strides(cand, ref, distribution)
        mutated = sorted(set(cand.get("mutated_inputs", [])) - set(ref.get("mutated_inputs", [])))
        ref_aliases = {tuple(a) for a in ref.get("aliased_outputs", [])}
        aliased = [a for a in cand.get("aliased_outputs", []) if tuple(a) not in ref_aliases]
        notes = self.record.correctness.setdefault("input_use", {})
        if mutated:
            self.record.flags.append("input_mutated")
            notes.setdefault("mutated_inputs", {})[distribution] = mutated
        if aliased:
            self.record.flags.append("output_aliases_input")
            notes.setdefault("aliased_outputs", {})[distribution] = aliased
        if cand.get("guard_violations"):
            self.record.flags.append("out_of_bounds_write")
            notes.setdefault("guard_violations", {})[distribution] = cand["guard_violations"]

    def _check_threads(self, cand: dict[str, Any], ref: dict[str, Any], distribution: str) -> None:
        """Threads still alive after forward returned can carry work past the timer's end. The first trial of a
        worker may start a library's thread pool; after that, the thread count must not grow across a call where
        the reference's does not."""
        self._trials_seen += 1
        if self._trials_seen == 1:
            return
        c_before, c_after = (cand.get("threads") or [0, 0])[:2]
        r_before, r_after = (ref.get("threads") or [0, 0])[:2]
        if c_after - c_before > max(0, r_after - r_before):
            self.record.flags.append("background_threads")
            self.record.correctness.setdefault("input_use", {}).setdefault("thread_growth", {})[distribution] = \
                [c_before, c_after]

    def _check_strides(self, cand: dict[str, Any], ref: dict[str, Any], distribution: str) -> None:
        """An output with a zero stride along a dimension longer than 1 (an expanded view: many elements, one
        memory cell) where the reference's output has none."""
        def degenerate(reply: dict[str, Any]) -> set[int]:
            out = set()
            for k, (shape, stride) in enumerate(zip(reply.get("shapes") or [], reply.get("strides") or [])):
                if shape and stride and any(st == 0 and sz > 1 for sz, st in zip(shape, stride)):
                    out.add(k)
            return out

        bad = sorted(degenerate(cand) - degenerate(ref))
        if bad:
            self.record.flags.append("degenerate_output")
            self.record.correctness.setdefault("input_use", {}).setdefault("zero_stride_outputs", {})[distribution] = bad

    def _compare_buffers(self, ref_reply: dict[str, Any], cand_reply: dict[str, Any]) -> None:
        tol = TOLERANCES[self.options.precision]
        mismatched = []
        cand_buffers = cand_reply.get("buffers", {})
        for name, ref in ref_reply.get("buffers", {}).items():
            cand = cand_buffers.get(name)
            if cand is None or tuple(cand.shape) != tuple(ref.shape):
                continue
            if cand.dtype != ref.dtype or not judge.compare_tensor(cand, ref, tol).passed:
                mismatched.append(name)
        if mismatched:
            self.record.flags.append("buffer_mismatch")
            self.record.correctness["buffer_mismatch"] = mismatched

    def _should_time(self) -> bool:
        """Time what a timed protocol calls correct: the verified verdict, or (for the standard baseline) the
        standard one, so a kernel that only KernelBench's check accepts still gets the speedup it would report."""
        baselines = PROTOCOLS[self.options.protocol]
        if "verified" in baselines and self.record.verdict == "correct":
            return True
        return "standard" in baselines and self.record.standard_verdict == "correct"

    def _performance(self) -> None:
        """Time reference and candidate in several fresh process pairs; within a pair they alternate in rounds
        (ABBA order) so both see the same clocks, temperature and neighbours. Processes running identical code
        differ by up to ~20 % on a GPU (docs/results), so the speedup is the geometric mean over pairs and its
        interval comes from the spread between pairs as well as within them."""
        rec = self.record
        options = self.options
        baselines = list(PROTOCOLS[options.protocol])
        rule = TIMING_RULES[self.device]
        n_pairs = options.timing_pairs or rule.process_pairs
        seed = secrets.randbits(63)
        rec.seeds["timing"] = seed
        clocks_start = envinfo.gpu_clocks(self.gpu) if self.device == "cuda" else {}
        cached = self._cached_reference(baselines)
        deadline = time.monotonic() + options.timeout
        roles = ("reference", "candidate")
        # samples[role][baseline] holds one list of trial times per process pair
        samples: dict[str, dict[str, list[list[float]]]] = {r: {b: [] for b in baselines} for r in roles}
        warmups: dict[str, dict[str, int]] = {r: {} for r in roles}
        flags: dict[str, Any] = {}
        memory_peaks: dict[str, Any] = {}
        wall: dict[str, list[float]] = {}
        share = 1.0 / (TIMING_ROUNDS * n_pairs)
        try:
            for pair_index in range(n_pairs):
                # Memory once, in the first pair, each worker measured while the other is idle (or not yet
                # started): device memory in use is counted for the whole GPU.
                with self._timing_worker("reference", deadline) as reference:
                    if pair_index == 0:
                        memory_peaks["reference"] = self._timed(reference, "reference",
                                                                {"cmd": "memory", "seed": seed}, deadline)["memory"]
                    with self._timing_worker("candidate", deadline) as candidate:
                        if pair_index == 0:
                            memory_peaks["candidate"] = self._timed(candidate, "candidate",
                                                                    {"cmd": "memory", "seed": seed}, deadline)["memory"]
                        self._time_pair(reference, candidate, pair_index, cached, seed, share, deadline,
                                        samples, warmups, flags, wall)
        except WorkerFailure as failure:
            rec.verdict = worst_verdict(rec.verdict, "timeout" if failure.kind == "timeout" else "runtime_error")
            rec.error = _failure_dict("performance", failure)
            return
        clocks_end = envinfo.gpu_clocks(self.gpu) if self.device == "cuda" else {}
        speedups: dict[str, Any] = {}
        for baseline in ("standard", "verified"):
            if baseline not in baselines:
                rec.timing_ms[f"candidate_{baseline}"] = rec.timing_ms[f"reference_{baseline}"] = None
                speedups[baseline] = None
                continue
            cand_groups = samples["candidate"][baseline]
            ref_groups = [g for g in samples["reference"][baseline] if g]
            rec.timing_ms[f"candidate_{baseline}"] = _timing_summary(cand_groups) | {
                "warmup": warmups["candidate"][baseline]}
            ref_summary = _timing_summary(ref_groups) | {"warmup": warmups["reference"][baseline], "cached": False}
            if cached:
                remeasured = ref_summary["median"]
                ref_summary = dict(cached[baseline]["summary"]) | {"cached": True, "remeasure_median": remeasured}
                ref_summary["drift"] = remeasured / ref_summary["median"] - 1.0
                ref_groups = [cached[baseline]["times_ms"]] * len(cand_groups)
                rec.flags.append("reference_timing_cached")
            elif self._reuse_reference_timing():
                pooled = [t for g in ref_groups for t in g]
                self._cache().put(self._cache_key(baseline), {"times_ms": pooled, "summary": ref_summary})
            rec.timing_ms[f"reference_{baseline}"] = ref_summary
            speedups[baseline] = stats.speedup_over_pairs(ref_groups, cand_groups, seed=seed % 2**32)
        rec.timing_ms["gpu_clocks"] = {"start": clocks_start, "end": clocks_end} if self.device == "cuda" else None
        rec.speedup = speedups
        above = {b: s["value"] for b, s in speedups.items() if s and s.get("value") and s["value"] > options.speedup_bound}
        if above:
            rec.flags.append("speedup_above_bound")
            rec.integrity["speedup_above_bound"] = {"bound": options.speedup_bound, **above}
        rec.env["baseline_flags"] = flags
        cand_peak = memory_peaks["candidate"].get("peak_bytes")
        ref_peak = memory_peaks["reference"].get("peak_bytes")
        rec.memory_bytes = {"candidate_peak": cand_peak, "reference_peak": ref_peak,
                            "method": memory_peaks["candidate"].get("method"),
                            "candidate_device_in_use": memory_peaks["candidate"].get("device_in_use_delta"),
                            "reference_device_in_use": memory_peaks["reference"].get("device_in_use_delta")}
        self._check_wall_clock(wall, speedups)
        if cand_peak is not None and ref_peak is not None and cand_peak > ref_peak + MEMORY_SLACK_BYTES[self.device]:
            rec.flags.append("memory_above_reference")
        cand_held, ref_held = rec.memory_bytes["candidate_device_in_use"], rec.memory_bytes["reference_device_in_use"]
        if cand_held is not None and ref_held is not None and cand_held > ref_held + DEVICE_IN_USE_SLACK_BYTES:
            rec.flags.append("memory_above_reference")

    def _check_wall_clock(self, wall: dict[str, list[float]], speedups: dict[str, Any]) -> None:
        """The evaluator's clock against the worker's timer: per call, both roles pay the same harness overheads, so
        a candidate the timer calls faster should not take longer per call than the reference."""
        rec = self.record
        per_call = {role: totals[0] / totals[1] for role, totals in wall.items() if totals[1]}
        rec.timing_ms["wall_per_call"] = per_call
        if len(per_call) < 2:
            return
        claimed = max((s["value"] for s in speedups.values() if s and s.get("value")), default=None)
        slower = per_call["candidate"] / per_call["reference"]
        if claimed is not None and claimed > 1 + WALL_CLOCK_MARGIN and slower > 1 + WALL_CLOCK_MARGIN:
            rec.flags.append("wall_clock_mismatch")
            rec.integrity["wall_clock_mismatch"] = {"claimed_speedup": claimed, "wall_per_call_ratio": slower}

    def _time_pair(self, reference: Worker, candidate: Worker, pair_index: int, cached: dict[str, Any], seed: int,
                   share: float, deadline: float, samples: dict[str, dict[str, list[list[float]]]],
                   warmups: dict[str, dict[str, int]], flags: dict[str, Any], wall: dict[str, list[float]]) -> None:
        """One process pair: reference and candidate alternate in ABBA rounds, then the timed-output re-check. The
        evaluator's own clock runs around every timing call (``wall``: [ms, calls, reported ms] per role)."""
        rec = self.record
        baselines = list(PROTOCOLS[self.options.protocol])
        workers = {"reference": reference, "candidate": candidate}
        roles = ("reference", "candidate")
        kept: dict[str, Any] | None = None  # one timed call's output, taken inside the timer's loop
        try:
            for role in roles:
                for b in baselines:
                    samples[role][b].append([])
            for round_index in range(TIMING_ROUNDS):
                order = roles if round_index % 2 == 0 else roles[::-1]
                for role in order:
                    msg: dict[str, Any] = {"cmd": "time", "seed": seed, "baselines": baselines, "share": share,
                                           "keep_output": role == "candidate" and round_index == TIMING_ROUNDS - 1}
                    if role == "reference" and cached:
                        if round_index or pair_index:
                            continue  # cached: one short re-measure only
                        msg |= {"share": 1.0, "max_trials": REFERENCE_REMEASURE_TRIALS}
                    t0 = time.monotonic()
                    reply = self._timed(workers[role], role, msg, deadline)
                    elapsed_ms = (time.monotonic() - t0) * 1e3
                    flags[role] = reply["flags"]
                    if "kept" in reply:
                        kept = reply["kept"]
                    calls, reported = 0, 0.0
                    for b in baselines:
                        times = [_as_float(t) for t in reply["timing"][b]["times_ms"]]
                        samples[role][b][-1].extend(times)
                        warmups[role].setdefault(b, reply["timing"][b]["warmup"])
                        rec.timing_ms["flush_bytes"] = reply["timing"][b]["flush_bytes"]
                        calls += 3 + int(reply["timing"][b]["warmup"]) + len(times)
                        reported += sum(times)
                    totals = wall.setdefault(role, [0.0, 0, 0.0])
                    totals[0] += elapsed_ms
                    totals[1] += calls
                    totals[2] += reported
                    if reported > elapsed_ms:
                        rec.flags.append("timer_inconsistent")
                        rec.integrity.setdefault("timer_inconsistent", []).append(
                            {"role": role, "reported_ms": reported, "wall_ms": elapsed_ms})
            if kept is not None:
                self._judge_timed_output(reference, kept, seed, deadline)
            if pair_index == 0:
                self._burst_check(reference, candidate, seed, samples, deadline)
        finally:
            self._collect(reference)
            self._collect(candidate)

    def _judge_timed_output(self, reference: Worker, kept: dict[str, Any], seed: int, deadline: float) -> None:
        """The output of one timed call (picked at random inside the timer's loop and copied at once) judged like a
        correctness trial against the reference on the same inputs, redrawn from the call's offset. Every timed
        call reads fresh contents in the same buffers, so a kernel that caches or defers outputs across calls, or
        that does less while it is being timed, answers wrong here; one whose output changes after the call
        returned (work finished later by a thread or queue) is flagged as deferred."""
        rec = self.record
        offset = int(kept["offset"])
        self._timed(reference, "reference", {"cmd": "forward", "seed": seed, "timing_offset": offset,
                                             "distribution": "D1"}, deadline)
        candidate_out = {"structure": kept["structure"], "outputs": kept["outputs"]}
        judged = self._timed(reference, "reference", {"cmd": "judge", "candidate": candidate_out,
                                                      "precision": self.options.precision}, deadline)
        comparison = judged["comparison"]
        checks = rec.correctness.setdefault("timed_rechecks", [])
        checks.append({"offset": offset, "passed": bool(comparison["passed"]), "reason": comparison.get("reason", ""),
                       "changed_after_return": list(kept.get("changed_after_return", []))})
        if kept.get("changed_after_return"):
            rec.flags.append("deferred_output")
        if not comparison["passed"]:
            rec.flags.append("timed_output_mismatch")
            rec.verdict = worst_verdict(rec.verdict, "incorrect")

    def _burst_check(self, reference: Worker, candidate: Worker, seed: int,
                     samples: dict[str, dict[str, list[list[float]]]], deadline: float) -> None:
        """The parent's own clock on back-to-back calls, against the worker's timer. Each role runs a long and a
        short burst (``timer.burst``: no events, no flush); the difference over the difference in calls is the
        wall time per call, free of messaging overhead. Where the reference's wall time per call is its timed
        work (it is not bound by launch overhead), a candidate whose timer claims a clear speedup should show
        some of it here; one that shows none had its time taken off the timer (events re-recorded, a timer's
        locals rewritten) or pays it outside the kernel (host overhead): flag ``wall_clock_mismatch``."""
        rec = self.record
        baseline = list(PROTOCOLS[self.options.protocol])[-1]
        medians = {role: statistics.median([t for g in samples[role][baseline] for t in g] or [float("nan")])
                   for role in ("reference", "candidate")}
        ref_ms = medians["reference"]
        if not (ref_ms > 0):  # a cached reference timing: no samples in this pair
            return
        wall: dict[str, float] = {}
        counts: dict[str, int] = {}
        for role, worker in (("reference", reference), ("candidate", candidate)):
            # about BURST_TARGET_MS by the role's own timed median (a slow kernel gets few calls; one whose timer
            # claims too little gets many, up to BURST_MAX_CALLS)
            own = medians[role] if medians[role] > 0 else ref_ms
            calls = counts[role] = int(min(BURST_MAX_CALLS, max(10, math.ceil(BURST_TARGET_MS / own))))
            short = max(1, calls // 10)
            elapsed = []
            for n in (short, calls):
                t0 = time.perf_counter()
                self._timed(worker, role, {"cmd": "burst", "seed": seed, "baseline": baseline, "calls": n}, deadline)
                elapsed.append((time.perf_counter() - t0) * 1e3)
            wall[role] = max(elapsed[1] - elapsed[0], 1e-6) / (calls - short)
        claimed = ref_ms / medians["candidate"] if medians["candidate"] > 0 else math.inf
        wall_speedup = wall["reference"] / wall["candidate"]
        device_bound = wall["reference"] <= BURST_DEVICE_BOUND * ref_ms
        rec.timing_ms["burst"] = {"baseline": baseline, "calls": counts, "wall_per_call": wall,
                                  "timed_median": medians, "claimed_speedup": claimed, "wall_speedup": wall_speedup,
                                  "reference_device_bound": device_bound}
        if device_bound and claimed >= BURST_MIN_CLAIM and wall_speedup <= BURST_MAX_WALL_SPEEDUP:
            if "wall_clock_mismatch" not in rec.flags:
                rec.flags.append("wall_clock_mismatch")
            rec.integrity["wall_clock_burst"] = {"claimed_speedup": claimed, "wall_speedup": wall_speedup}

    def _roofline(self) -> None:
        """The problem's roofline bound at the timed sizes and the attainment of each timed median (``roofline``).

        Counted once per (problem source, profile, precision) in a fresh process on the meta device (the parent
        never imports problem code) and cached under the cache folder; the ceilings are the device's measured ones
        (``kbv calibrate``) where saved, else its datasheet's, and the section says which."""
        from kbv import hardware, roofline

        rec = self.record
        try:
            name = (rec.env.get("device") or {}).get("name") if self.device == "cuda" else "cpu"
            ceilings = hardware.ceilings_for(name or "unknown", self.options.cache_dir)
            counts = roofline.counts_cached(self.problem.path, self.profile, self.options.precision,
                                            self.options.cache_dir, shape=self.shape)
            roof = roofline.Roofline(counts, ceilings)
        except Exception as exc:  # no ceilings for this device, or a problem that cannot be counted: no section
            rec.roofline = {"error": f"{type(exc).__name__}: {exc}"}
            return
        if counts.profile != self.profile:  # counted at another size (a CPU fallback): the bound is not this one
            rec.roofline = {"error": f"counted at profile {counts.profile!r}, timed at {self.profile!r}",
                            "counted": roof.to_json()["counted"]}
            return
        rec.roofline = roof.record_section(rec.timing_ms)
        # Flag only on a GPU: kbv's CPU runs use the small profile, whose data stays in the CPU's caches, and the
        # CPU's ceilings are a placeholder unless calibrated, so S > 1 there is not a sign of skipped work.
        if rec.roofline["above_roofline"] and self.device == "cuda":
            rec.flags.append("above_roofline")

    def _timing_worker(self, role: str, deadline: float) -> Worker:
        """A fresh worker for timing, with the reference's initial state loaded (the reference loads it too, so
        both processes allocate alike)."""
        try:
            worker = Worker(self._spec(role, "performance"), deadline)
            worker.call({"cmd": "setup", "init_seed": self.init_seed, "state": self.ref_state}, deadline)
            return worker
        except WorkerFailure as failure:
            if role == "reference":
                raise _ReferenceFailed(failure, "performance") from None
            raise

    @staticmethod
    def _timed(worker: Worker, role: str, msg: dict[str, Any], deadline: float) -> dict[str, Any]:
        try:
            return worker.call(msg, deadline)
        except WorkerFailure as failure:
            if role == "reference":
                raise _ReferenceFailed(failure, "performance") from None
            raise

    # -- the reference-timing cache (opt-in; off by default) ------------------------------------------------------

    def _reuse_reference_timing(self) -> bool:
        return bool(self.options.reuse_reference_timing)

    def _cache(self) -> ReferenceTimingCache:
        return ReferenceTimingCache(self.options.cache_dir)

    def _cache_key(self, baseline: str) -> str:
        identity = envinfo.gpu_identity(self.gpu) if self.device == "cuda" else {}
        return cache_key(self.problem.source_sha256, self.record.shapes, self.options.precision, baseline,
                         self.device, identity.get("name", self.device), identity.get("driver", ""))

    def _cached_reference(self, baselines: list[str]) -> dict[str, Any]:
        """Cached reference timings for every baseline, or {} (then the reference is timed live, interleaved)."""
        if not self._reuse_reference_timing():
            return {}
        entries = {b: self._cache().get(self._cache_key(b)) for b in baselines}
        return entries if all(entries.values()) else {}

    def _env(self) -> dict[str, Any]:
        env: dict[str, Any] = envinfo.software()
        env["device_kind"] = self.device
        if self.device == "cuda":
            env["device"] = envinfo.gpu_identity(self.gpu) | {"index": self.gpu}
        env["precision"] = self.options.precision
        env["profile"] = self.profile
        env["protocol"] = self.options.protocol
        env["baselines"] = {b: dict(vars(BASELINES[b])) for b in PROTOCOLS[self.options.protocol]}
        sandbox = confine.plan(self.options.sandbox, self.device)
        ids = sandbox.get("ids")
        env["isolation"] = {
            "process": "fresh process per stage and role (fork server), own session and process group, private "
                       "working and temporary folder",
            "requested": ", ".join([*(name for key, name in (("network", "network namespace"),
                                                              ("pid", "PID namespace"),
                                                              ("read_only", "read-only kbv and results"))
                                       if sandbox.get(key)), f"user {ids[2]}" if ids else "root user"])
            if sandbox["requested"] else "none",
            "reason": sandbox.get("reason", ""),
        }
        return env


def compile_candidate(problem: Problem, candidate: Candidate, options: EvalOptions, device: str,
                      gpu: int | None = None) -> CompileResult:
    """The compile stage: import the candidate in a fresh worker (extension builds happen at import)."""
    scratch = Path(tempfile.mkdtemp(prefix="kbv-build-"))
    spec = candidate_spec(problem, candidate, options, device, gpu, scratch, "compile")
    t0 = time.monotonic()
    deadline = t0 + options.build_timeout
    try:
        try:
            worker = Worker(spec, deadline)  # loads the problem, before any candidate code
        except WorkerFailure as failure:
            return CompileResult(ok=False, verdict="runtime_error", problem_failed=True,
                                 error=_failure_dict("compile", failure) | {"reference": True},
                                 seconds=time.monotonic() - t0)
        with worker:
            worker.call({"cmd": "import"}, deadline)
        return CompileResult(ok=True, seconds=time.monotonic() - t0)
    except WorkerFailure as failure:
        verdict = "timeout" if failure.kind == "timeout" else "compile_error"
        return CompileResult(ok=False, verdict=verdict, error=_failure_dict("compile", failure),
                             seconds=time.monotonic() - t0)
    finally:
        if not options.keep_scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def evaluate(problem: Problem | str | Path, candidate: Candidate | str | Path, options: EvalOptions | None = None,
             *, gpu: int | None = None, compiled: CompileResult | None = None,
             on_stage: Callable[[str], None] | None = None) -> Record:
    """Evaluate one candidate against one problem and return its record (the library entry point)."""
    from kbv.problems import load_problem

    options = options or EvalOptions()
    options.validate()
    device = envinfo.resolve_device(options.device)
    if device == "cuda" and gpu is None:
        gpu = envinfo.gpu_indices()[0]
    problem = problem if isinstance(problem, Problem) else load_problem(problem)
    candidate = candidate if isinstance(candidate, Candidate) else Candidate.from_path(candidate)
    return evaluate_shapes(problem, candidate, options, device, gpu, compiled)


def evaluate_shapes(problem: Problem, candidate: Candidate, options: EvalOptions, device: str, gpu: int | None,
                    compiled: CompileResult | None = None, candidate_label: str | None = None) -> Record:
    """Every shape of the problem (one for most), compiled once; a multi-shape problem's record merges the
    per-shape records (``kbv.shapes.merge``): correct only if correct on every shape, held-out ones included."""
    from kbv import shapes

    plan = problem.shape_overrides()
    if len(plan) == 1 and plan[0][1] is None:
        return PairEvaluation(problem, candidate, options, device, gpu, candidate_label).run(compiled)
    if compiled is None:
        compiled = compile_candidate(problem, candidate, options, device, gpu)
    records = []
    for index, overrides, held_out in plan:
        record = PairEvaluation(problem, candidate, options, device, gpu, candidate_label, overrides).run(compiled)
        records.append((index, overrides, held_out, record))
        if not compiled.ok:
            break  # every shape would repeat the compile failure
    return shapes.merge(records)
