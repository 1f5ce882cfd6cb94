"""One (problem, candidate) pair through the stages: compile -> correctness -> performance (with memory).

This is the trusted side. Each stage runs its candidate in a fresh worker process (``kbv.sandbox``); the reference
runs in other fresh workers that never import the candidate. Workers send raw data; the stages
(``kbv.eval.correctness``, ``kbv.eval.performance``) turn it into evidence, ``kbv.eval.verdict.decide`` turns the
evidence into the verdicts and flags, and the record is built once from that decision.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
import time
import traceback
from concurrent import futures
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable

from kbv import envinfo
from kbv.eval import verdict as rules_
from kbv.eval.context import SAMPLE_HZ, PairContext, ReferenceFailed, failure_dict
from kbv.eval.correctness import CorrectnessStage
from kbv.eval import memory_needs
from kbv.eval.evidence import OUT_OF_MEMORY, Failure, reads_out_of_memory
from kbv.eval.gate import DeviceGate
from kbv.eval.lookahead import Lookahead
from kbv.eval.options import EvalOptions
from kbv.eval.performance import PerformanceStage, roofline_section, start_early
from kbv.eval import pch
from kbv.eval.workspace import (build_guard, built_already, candidate_spec, clear_stale_build_locks,
                                discard_torn_builds, publish_build)
from kbv.files import cache_dir as default_cache_dir
from kbv.problems import Problem
from kbv.problems.candidates import Candidate, Pair
from kbv.protocol import BASELINES, SHARED_CORRECTNESS_BASE_BYTES, SHARED_CORRECTNESS_MEMORY_FACTORS
from kbv.records import Record
from kbv.sandbox import devmem, launch
from kbv.sandbox import plan as sandbox_plan
from kbv.sandbox.launch import Worker, WorkerFailure

__all__ = ["CompileResult", "EvalOptions", "PairEvaluation", "compile_candidate", "default_cache_dir", "evaluate",
           "evaluate_shapes"]


@dataclass
class CompileResult:
    """The compile stage's outcome for one candidate file (shared by every pair that uses the file)."""

    ok: bool
    failure: Failure | None = None
    seconds: float = 0.0
    problem_failed: bool = False  # the problem module itself did not load: not the candidate's fault
    # a build made with the precompiled torch/extension.h offered (kbv.eval.pch): its extensions that used it and
    # those whose flags matched no variant (None: not offered, or nothing compiled here)
    headers: dict[str, int] | None = None
    # the build failed with the CUDA source reading torch/types.h and was made again with torch/extension.h
    # (``compile_candidate``): the first attempt's seconds and error message (None where it was made once)
    device_header_retry: dict[str, Any] | None = None

    @property
    def verdict(self) -> str:
        """What the compile stage alone says (``kbv.eval.verdict`` rule 1), for progress displays."""
        if self.ok:
            return ""
        if self.problem_failed:
            return "runtime_error"
        return "timeout" if self.failure and self.failure.kind == "timeout" else "compile_error"

    @property
    def error(self) -> dict[str, Any] | None:
        return self.failure.error if self.failure else None


def _out_of_memory_of(first_run: Callable[[], Failure | None]) -> Failure | None:
    """A stage's first run beside other pairs: the out-of-memory failure it found (``first_run``'s return), or the
    reference's raised out-of-memory failure; any other reference failure is raised on."""
    try:
        return first_run()
    except ReferenceFailed as exc:
        if not out_of_memory(exc.failure):
            raise
        return exc.failure


def out_of_memory(failure: Failure) -> bool:
    """A stage failure that reads as the device running out of memory (either role's)."""
    return reads_out_of_memory(failure.error)


def judge_starved(ctx: PairContext) -> Failure | None:
    """A distribution failed because the judge could not take the candidate's output onto its device for want of
    memory (``output handoff failed: ... OutOfMemoryError``): beside other pairs that is their memory, not the
    candidate's output (on the H200 a correct level1/9 was judged incorrect so under --gpu-share 4); the stage runs
    again with the GPU to itself, where the same failure stands as the output judged wrong."""
    for name, result in (ctx.draft.correctness.get("distributions") or {}).items():
        reason = str(result.get("reason", "")) if isinstance(result, dict) else ""
        if isinstance(result, dict) and result.get("status") == "failed" and "output handoff failed" in reason and any(
                word in reason.lower() for word in OUT_OF_MEMORY):
            return Failure("correctness", "harness", "error", {"stage": "correctness", "kind": "harness",
                                                               "message": f"{name}: {reason[:300]}"})
    return None


def rules_of(options: EvalOptions) -> rules_.Rules:
    return rules_.Rules(baselines=options.baselines, require_custom_kernels=options.require_custom_kernels,
                        strict_precision=options.strict_precision)


def correctness_memory(ctx: PairContext) -> int:
    """The device memory a pair's correctness stage is expected to need beside other pairs' (``--gpu-share``): what
    earlier stages of its problem were seen to hold, with a margin (``kbv.eval.memory_needs``), else
    ``SHARED_CORRECTNESS_MEMORY_FACTORS`` times one forward's inputs, outputs and intermediate tensors plus the
    parameters and buffers twice and ``SHARED_CORRECTNESS_BASE_BYTES``, from the problem's roofline counts where
    they are already cached (0, no bound, where neither is)."""
    from kbv import roofline

    counts = roofline.cached_counts(ctx.problem.path, ctx.profile, ctx.options.precision, ctx.options.cache_dir,
                                    shape=ctx.shape)
    static = 0
    if counts is not None:
        parts = {**counts.bytes_breakdown, "intermediates": counts.intermediate_bytes}
        static = int(sum(factor * parts.get(part, 0) for part, factor in SHARED_CORRECTNESS_MEMORY_FACTORS.items())
                     + 2 * parts.get("state", 0) + SHARED_CORRECTNESS_BASE_BYTES)
    return memory_needs.expected(static, memory_needs.remembered(ctx.options.cache_dir, memory_key(ctx)))


def memory_key(ctx: PairContext) -> str:
    """The problem, profile, precision and shape whose correctness memory is remembered (``kbv.eval.memory_needs``)."""
    return _problem_key(ctx.problem, ctx.profile, ctx.options.precision, ctx.shape)


def _problem_key(problem: Problem, profile: str | None, precision: str, shape: dict[str, Any] | None) -> str:
    from kbv import roofline

    return roofline.counts_key(problem.path, None if profile in (None, "default") else profile, precision,
                               shape=shape)


def remember_memory(ctx: PairContext) -> None:
    """Keep what this correctness stage held on the device for the gate's later pairs of the problem."""
    held = (ctx.draft.memory_bytes.get("correctness_stage") or {}).get("together_max")
    if isinstance(held, int) and held > 0:
        try:
            memory_needs.remember(ctx.options.cache_dir, memory_key(ctx), held)
        except OSError:  # a read-only cache: the gate keeps its static reckoning
            pass


def remember_seconds(ctx: PairContext, wall: dict[str, float]) -> None:
    """Keep how long this pair's stages took on the device, less their waits for it, for a later batch's order
    (``memory_needs.longest_first``). GPU only: the order matters where pairs share a GPU."""
    if ctx.device != "cuda":
        return
    own = sum(wall.get(stage, 0.0) - wall.get(f"{stage}/waiting_for_gpu", 0.0)
              for stage in ("correctness", "performance"))
    try:
        memory_needs.remember_seconds(ctx.options.cache_dir, memory_key(ctx), own)
    except OSError:  # a read-only cache: batches keep their given order
        pass


def remembered_seconds(pair: Pair, options: EvalOptions, device: str) -> float | None:
    """What ``remember_seconds`` kept for a single-shape pair's problem under ``options``, or None."""
    plan = pair.problem.shape_overrides()
    if len(plan) != 1 or plan[0][1] is not None:
        return None
    try:
        key = _problem_key(pair.problem, options.resolved_profile(device, pair.problem), options.precision, None)
    except OSError:
        return None
    return memory_needs.remembered_seconds(options.cache_dir, key)


class PairEvaluation:
    """Runs the stages for one pair on one device and builds its ``Record``."""

    def __init__(self, problem: Problem, candidate: Candidate, options: EvalOptions, device: str,
                 gpu: int | None = None, candidate_label: str | None = None, shape: dict[str, Any] | None = None,
                 gate: DeviceGate | None = None, ctx: PairContext | None = None,
                 lookahead: Lookahead | None = None):
        # ``ctx``: made ahead, its correctness workers starting (kbv.eval.lookahead)
        self.ctx = ctx or PairContext(problem, candidate, options, device, gpu, shape)
        self.candidate_label = candidate_label
        self.gate = gate  # shared with other pairs on this GPU: correctness shared, timing exclusive
        self.lookahead = lookahead  # this pair's correctness starts the next pair's correctness workers
        self._own_idle: Callable[[], int] = lambda: self.ctx.release_idle()  # its workers started ahead, if idle

    def _started(self, ctx: PairContext) -> None:
        """The correctness stage's two processes are up: the timing workers start, and the next pairs' correctness
        workers (none beside a stage that nearly fills the GPU)."""
        start_early(ctx)
        if self.lookahead is not None and ctx.options.start_ahead and not ctx.draft.env.get("correctness_alone"):
            ctx.started_next = self.lookahead.top_up()

    def _next_started(self, ctx: PairContext) -> None:
        """Wait, still in the correctness stage, for the next pairs' correctness workers to be up (their CUDA starts
        end before another pair is timed)."""
        started, ctx.started_next = ctx.started_next, []
        if started:
            with ctx.clock("correctness", "start_ahead"):
                futures.wait(started)

    def _make_room(self, gate: DeviceGate, need: int) -> dict[str, Any]:
        """For a correctness stage that nearly fills the GPU, holding its place alone: other pairs' timing workers
        still exiting waited for, then other pairs' idle workers closed, the latest first, until the driver says the
        device has ``need`` free, or the gate's capacity where more is expected (what kbv ever plans to use:
        closing more contexts, about 0.5 GiB each, could not reach such a need) (``kbv.sandbox.devmem``; every
        one where it cannot say). What it did."""
        waited = launch.wait_retired()
        target = min(need, gate.capacity) if gate.capacity is not None else need

        def free() -> int | None:
            return devmem.free_bytes(self.ctx.gpu) if self.ctx.device == "cuda" else None
        before = free()
        closed = gate.close_idle_but(self._own_idle, lambda: (now := free()) is not None and now >= target)
        return {"idle_workers_closed": closed, "retired_workers_waited": waited, "free_bytes": before}

    def _correctness(self) -> None:
        """The correctness stage; beside other pairs' (``--gpu-share``) it shares the GPU, and there an out-of-memory
        error may be their doing, not this pair's: the stage then runs again, once, in a fresh context (new seeds)
        with the GPU to itself, and only that run counts (``env.correctness_rerun`` says why)."""
        if self.gate is None:
            try:
                CorrectnessStage(self.ctx).run()
            finally:
                self._next_started(self.ctx)
            return
        gate = self.gate
        t_first = time.monotonic()
        t0 = time.monotonic()
        need = correctness_memory(self.ctx)
        self.ctx.draft.env["correctness_memory_expected"] = need
        if gate.nearly_fills(need):  # it runs with no other pair's correctness beside it, nor other pairs' idle or
            # exiting workers, and starts none of the next pairs' (``first_run``, ``_started``)
            self.ctx.draft.env["correctness_alone"] = True

        self.ctx.mark("correctness_asked")

        def first_run() -> Failure | None:
            with gate.shared(need):  # how long it waited for another pair's timing (or memory) to leave the GPU
                if self.ctx.draft.env.get("correctness_alone"):  # the room a run again alone has (``_alone_again``)
                    self.ctx.draft.env["correctness_alone_room"] = self._make_room(gate, need)
                self.ctx.charge("correctness", "waiting_for_gpu", time.monotonic() - t0)
                self.ctx.mark("correctness_in")
                try:
                    try:
                        CorrectnessStage(self.ctx).run()
                    finally:
                        self._next_started(self.ctx)
                    if self.ctx.early_workers is not None:  # their CUDA starts, too, end before another pair is timed
                        with self.ctx.clock("correctness", "start_ahead"):
                            futures.wait([self.ctx.early_workers])
                finally:
                    self.ctx.mark("correctness_out")
            return next((f for f in self.ctx.evidence.failures if out_of_memory(f)), None) or judge_starved(self.ctx)

        starved = _out_of_memory_of(first_run)
        if starved is None:
            return
        first = self.ctx
        first.discard_early_workers()  # started for the first context (its scratch folder goes)
        self.ctx = first.again()
        if not first.options.keep_scratch:
            shutil.rmtree(first.scratch, ignore_errors=True)
        self.ctx.draft.env["correctness_memory_expected"] = need
        self._alone_again(self.ctx, "correctness", "out of memory while other pairs shared the GPU: run again with "
                          "the GPU to itself", starved, t_first, lambda: CorrectnessStage(self.ctx).run())

    def _performance(self, ctx: PairContext) -> None:
        """The performance stage; on a GPU shared with other pairs (``--gpu-share``) an out-of-memory error that is
        not the candidate's (the reference's worker, or kbv's own buffers: ``kind`` harness) may be their doing:
        their idle workers started ahead hold a CUDA context each. The stage then runs again, once, with the GPU to
        itself and those workers closed (``DeviceGate.exclusive``); its times replace the first run's, whose time
        is charged to ``performance/rerun`` (``env.performance_rerun`` says why). What the first run saw of the
        candidate stands: its flags are kept (a second run can add to them, never clear one)."""
        if self.gate is None:
            PerformanceStage(ctx).run(None)
            return
        ev, draft = ctx.evidence, ctx.draft
        failures_before = len(ev.failures)
        kept = {name: copy.deepcopy(getattr(draft, name)) for name in ("timing_ms", "speedup", "memory_bytes")}
        t_first = time.monotonic()

        def first_run() -> Failure | None:
            PerformanceStage(ctx).run(self._timing_place(ctx))
            return next((f for f in ev.failures[failures_before:]
                         if f.stage == "performance" and f.role != "candidate" and out_of_memory(f)), None)

        starved = _out_of_memory_of(first_run)
        if starved is None:
            return
        del ev.failures[failures_before:]
        for name, value in kept.items():
            setattr(draft, name, value)
        ctx.spent = {k: v for k, v in ctx.spent.items() if not k.startswith("performance/")}
        self._alone_again(ctx, "performance", "out of memory, not the candidate's, while other pairs shared the GPU: "
                          "run again with the GPU to itself and the idle workers started ahead closed", starved,
                          t_first, lambda: PerformanceStage(ctx).run(None))

    def _alone_again(self, ctx: PairContext, stage: str, reason: str, starved: Failure, t_first: float,
                     run: Callable[[], None]) -> None:
        """A stage's second run (``run``) after an out-of-memory error beside other pairs: why, in
        ``env.<stage>_rerun``; the first run's time (waits included, discarded) charged to ``<stage>/rerun``; then the
        GPU to itself, the idle workers started ahead closed (``DeviceGate.exclusive``: how many, in the same entry)
        and other pairs' timing workers still exiting waited for (``launch.wait_retired``, as every timing does:
        on the 80 GB H100 level1/30's correctness, run again alone right after other 6 GiB pairs' timing, ran out of
        memory again with 60 GiB held by other processes, h100-2026-12-06-e)."""
        assert self.gate is not None
        ctx.draft.env[f"{stage}_rerun"] = {"reason": reason, "role": starved.role,
                                           "message": str(starved.error.get("message", ""))[:300]}
        ctx.charge(stage, "rerun", time.monotonic() - t_first)
        t0 = time.monotonic()
        with self.gate.exclusive() as closed:
            ctx.draft.env[f"{stage}_rerun"]["idle_workers_closed"] = closed
            ctx.draft.env[f"{stage}_rerun"]["retired_workers_waited"] = launch.wait_retired()
            ctx.charge(stage, "waiting_for_gpu", time.monotonic() - t0)
            ctx.mark(f"{stage}_rerun_in")
            try:
                run()
            finally:
                ctx.mark(f"{stage}_rerun_out")

    @contextmanager
    def _timing_place(self, ctx: PairContext) -> Iterator[Callable[[], AbstractContextManager[int]]]:
        """The performance stage's place on the shared GPU (``DeviceGate.timing``), expected to need what this pair's
        correctness stage did; the waits for it and for the device alone charged to ``performance/waiting_for_gpu``,
        the time held alone noted as ``timing_ms.device_alone_s`` (and the idle workers closed for a problem that
        fills the GPU as ``timing_ms.idle_workers_closed``). Where it closed them, the next pairs' correctness workers
        are started again as soon as the device is no longer its own, and the next timing waits for them before it
        has the device alone (``DeviceGate.starting``), so no CUDA start overlaps another pair's timing: the pairs that
        entered correctness right after such a timing all started CUDA in their own stage (on the 80 GB H100, 13 of
        50 reward pairs found workers waiting, with 14 such timings in the batch: h100-2026-12-06-f)."""
        gate = self.gate
        assert gate is not None
        t0 = time.monotonic()
        ctx.mark("place_asked")
        with gate.timing(int(ctx.draft.env.get("correctness_memory_expected") or 0)) as alone:
            ctx.charge("performance", "waiting_for_gpu", time.monotonic() - t0)
            ctx.mark("place_in")

            @contextmanager
            def charged() -> Iterator[int]:
                t1 = time.monotonic()
                with alone() as closed:
                    t2 = time.monotonic()
                    ctx.charge("performance", "waiting_for_gpu", t2 - t1)
                    ctx.mark("alone_in")
                    if closed:  # a problem that fills the GPU: the idle workers started ahead were closed
                        ctx.draft.timing_ms["idle_workers_closed"] = closed
                    try:
                        yield closed
                    finally:  # what no other pair could overlap: the batch's floor is the sum of these
                        ctx.draft.timing_ms["device_alone_s"] = round(time.monotonic() - t2, 3)
                        ctx.mark("alone_out")
                if closed and self.lookahead is not None and ctx.options.start_ahead:
                    gate.starting(self.lookahead.top_up())

            try:
                yield charged
            finally:
                ctx.mark("place_out")

    def run(self, compiled: CompileResult | None = None) -> Record:
        ctx = self.ctx
        ev, draft, options = ctx.evidence, ctx.draft, ctx.options
        rules = rules_of(options)
        start = time.monotonic()
        draft.env = self._env()
        # its workers started ahead, idle on a shared GPU, closed for a pair run again alone (kbv.eval.gate)
        forget_idle = self.gate.hold_idle(self._own_idle) if self.gate is not None else None
        try:
            draft.stage = "compile"
            compiled = compiled or compile_candidate(ctx.problem, ctx.candidate, options, ctx.device, ctx.gpu)
            draft.wall_seconds["compile"] = round(compiled.seconds, 3)
            if compiled.headers is not None:
                draft.env["precompiled_header"] = compiled.headers
            if compiled.device_header_retry is not None:
                draft.env["device_header_retry"] = compiled.device_header_retry
            ev.compiled, ev.problem_failed = compiled.ok, compiled.problem_failed
            if compiled.failure is not None:
                ev.fail(compiled.failure)
            if compiled.ok:
                draft.stage = "correctness"
                t0 = time.monotonic()
                ctx.on_correctness_started = partial(self._started, ctx)  # timing workers, the next pair's
                self._correctness()
                ctx, ev, draft = self.ctx, self.ctx.evidence, self.ctx.draft  # a second run has a fresh context
                remember_memory(ctx)
                draft.stage = "correctness"
                draft.wall_seconds["correctness"] = round(time.monotonic() - t0, 3)
                ev.timed_for = rules_.should_time(ev, rules)
                if ev.timed_for:
                    draft.stage = "performance"
                    t0 = time.monotonic()
                    self._performance(ctx)
                    draft.wall_seconds["performance"] = round(time.monotonic() - t0, 3)
                    roofline_section(ctx)
                self._integrity()
                self._sampled()
        except ReferenceFailed as exc:
            self.ctx.evidence.fail(exc.failure)
        except Exception as exc:  # a fault of kbv's own: record it rather than lose the run
            self.ctx.evidence.fail(Failure(draft.stage if draft.stage in ("compile", "correctness", "performance") else "compile",
                            "harness", "harness", {"stage": draft.stage, "kind": "harness",
                                                   "message": f"{type(exc).__name__}: {exc}",
                                                   "traceback": traceback.format_exc()[-3000:]}))
        finally:
            if forget_idle is not None:
                forget_idle()
            ctx, ev, draft = self.ctx, self.ctx.evidence, self.ctx.draft  # a correctness run again: a fresh context
            ctx.discard_early_workers()  # not timed (rejected, or a failure): never used
            ctx.discard_correctness_ahead()  # started ahead for a correctness stage that never ran
            self._next_started(ctx)  # the next pair's, if this one failed before waiting for them
            draft.wall_seconds["total"] = round(time.monotonic() - start, 3)
            draft.wall_seconds.update({k: round(v, 3) for k, v in sorted(ctx.spent.items())})
            for stage in ("correctness", "performance"):  # what no part was charged with: the parent's own work
                if stage in draft.wall_seconds:
                    parts = sum(v for k, v in ctx.spent.items() if k.startswith(f"{stage}/"))
                    draft.wall_seconds[f"{stage}/other"] = round(max(0.0, draft.wall_seconds[stage] - parts), 3)
            remember_seconds(ctx, draft.wall_seconds)
            if not options.keep_scratch:
                shutil.rmtree(ctx.scratch, ignore_errors=True)
        decision = rules_.decide(ev, rules)
        if decision.error is None and ev.compiled:
            draft.stage = "done"
        return self._record(decision)

    def _record(self, decision: rules_.Decision) -> Record:
        ctx, draft = self.ctx, self.ctx.draft
        p, c = ctx.problem, ctx.candidate
        return Record(
            problem=p.key, level=p.level, problem_id=p.problem_id, problem_sha256=p.source_sha256,
            candidate=self.candidate_label or str(c.path), candidate_sha256=c.sha256, sample=c.sample,
            verdict=decision.verdict, standard_verdict=decision.standard_verdict, flags=decision.flags,
            error=decision.error, stage=draft.stage, correctness=draft.correctness, timing_ms=draft.timing_ms,
            speedup=draft.speedup, memory_bytes=draft.memory_bytes, seeds=draft.seeds, shapes=draft.shapes,
            env=draft.env, wall_seconds=draft.wall_seconds, integrity=draft.integrity, roofline=draft.roofline,
            fallback=draft.fallback,
        )

    def _integrity(self) -> None:
        """A candidate worker whose environment changed (beyond what a reference worker shows) broke a rule."""
        ctx = self.ctx
        changed = sorted(ctx.tamper["candidate"] - ctx.tamper["reference"])
        if ctx.tamper["reference"]:
            ctx.draft.integrity["reference_changes"] = sorted(ctx.tamper["reference"])
        if changed:
            ctx.draft.integrity["tamper"] = changed
            ctx.evidence.see("tamper")

    def _sampled(self) -> None:
        """Library use seen from the parent's samples of every worker (``kbv.fallback.sampled``): it may add a
        fallback flag to what the profiled call showed, never clear one."""
        from kbv.fallback import sampled

        ctx = self.ctx
        if ctx.draft.fallback is None:
            return
        if not any(ctx.samples.values()):
            ctx.draft.fallback["sampled"] = {"error": ctx.sampler_error or "no samples"}
            return
        roots = tuple(str(r) for r in ctx.own_roots)
        own_calls = ctx.draft.fallback.get("own_calls") or {}
        seen = sampled.judge(ctx.samples["candidate"], ctx.samples["reference"], roots,
                             ctx.device == "cpu" and any(str(k).startswith("triton:") for k in own_calls),
                             bool(ctx.draft.fallback.get("own_units")),
                             bool(ctx.draft.fallback.get("no_work_observed")), self._timed_samples())
        if ctx.sampler_error:
            seen["error"] = ctx.sampler_error
        ctx.draft.fallback["sampled"] = seen
        if seen["flags"] and not ctx.evidence.observed & {"fallback", "partial_fallback"}:
            ctx.evidence.see(*seen["flags"])

    def _timed_samples(self) -> tuple[dict[str, int], float] | None:
        """On the CPU: the candidate's samples in the timing stage, and how many its forward calls there would give
        at ``SAMPLE_HZ``: the timing commands' calls (``timing_ms.forward_calls``) at its own median per call, and
        the long burst's calls at the parent's clock per call; None without them. On a GPU a forward's host time is
        its launches, not its kernels: not judged there."""
        ctx = self.ctx
        staged = ctx.stage_samples.get("performance", {}).get("candidate")
        timing = ctx.draft.timing_ms or {}
        calls = (timing.get("forward_calls") or {}).get("candidate")
        summary = timing.get("candidate_verified") or timing.get("candidate_standard") or {}
        median = summary.get("median")
        if ctx.device != "cpu" or staged is None or not calls or not isinstance(median, (int, float)):
            return None
        busy_ms = calls * float(median)
        burst = timing.get("burst") or {}
        burst_calls = (burst.get("calls") or {}).get("candidate")
        burst_per_call = (burst.get("wall_per_call") or {}).get("candidate")
        if isinstance(burst_calls, int) and isinstance(burst_per_call, (int, float)):
            busy_ms += burst_calls * float(burst_per_call)
        return staged, busy_ms / 1e3 * SAMPLE_HZ

    def _env(self) -> dict[str, Any]:
        ctx = self.ctx
        env: dict[str, Any] = envinfo.software()
        env["device_kind"] = ctx.device
        if ctx.device == "cuda":
            env["device"] = envinfo.gpu_identity(ctx.gpu) | {"index": ctx.gpu}
        env["precision"] = ctx.options.precision
        env["profile"] = ctx.profile
        env["protocol"] = ctx.options.protocol
        env["standard_tolerance"] = {"version": ctx.options.standard_tolerance,
                                     "tolerance": ctx.options.standard_tolerance_value}
        env["baselines"] = {b: dict(vars(BASELINES[b])) for b in ctx.options.baselines}
        sandbox = sandbox_plan.plan(ctx.options.sandbox, ctx.device)
        ids = sandbox.get("ids")
        env["isolation"] = {
            "process": "fresh process per stage and role (kbv's launcher, reachable only by the parent), own "
                       "session and process group, private working and temporary folder, allow-listed environment",
            "requested": ", ".join([*(name for key, name in (("network", "network namespace"),
                                                              ("pid", "PID namespace with its own /proc"),
                                                              ("read_only", "read-only kbv and results"),
                                                              ("hide", "evaluator data hidden"),
                                                              ("seccomp", "seccomp deny-list"))
                                       if sandbox.get(key)),
                                    f"user {ids[2]} (user namespace)" if ids else "root user"])
            if sandbox["requested"] else "none",
            "reason": sandbox.get("reason", ""),
        }
        return env


def compile_candidate(problem: Problem, candidate: Candidate, options: EvalOptions, device: str,
                      gpu: int | None = None) -> CompileResult:
    """The compile stage: import the candidate in a fresh worker (extension builds happen at import)."""
    with build_guard(candidate, device, options.cache_dir):  # one compile of a source at a time on this machine
        discard_torn_builds(candidate, device, options.cache_dir)  # an interrupted earlier build is not reused
        clear_stale_build_locks(candidate, device, options.cache_dir)  # nor a lock a killed process left
        result = _compile(problem, candidate, options, device, gpu)
        if not _device_header_may_have_failed(result, candidate, options, device):
            return result
        # the CUDA source read torch/types.h for torch/extension.h (kbv.eval.pch) and the build failed: made
        # again with torch/extension.h itself, and its outcome (and its error, if it fails too) is the build's
        again = _compile(problem, candidate, replace(options, device_header=False), device, gpu)
        first = (result.error or {}).get("message", "")
        return replace(again, seconds=result.seconds + again.seconds,
                       device_header_retry={"seconds": round(result.seconds, 2), "message": str(first)[:300]})


def _device_header_may_have_failed(result: CompileResult, candidate: Candidate, options: EvalOptions,
                                   device: str) -> bool:
    """Whether a failed build may owe its failure to the CUDA source's ``torch/types.h`` (``kbv.eval.pch``): a build
    error (not a timeout or a problem that failed to load) of a candidate with CUDA sources, on a GPU, with the
    headers offered and ``device_header`` on."""
    if result.ok or result.problem_failed or result.failure is None or result.failure.kind != "build":
        return False
    if device == "cpu" or not options.device_header or pch.offered(options, device) is None:
        return False
    try:
        return "cuda_sources" in candidate.path.read_text(errors="replace")
    except OSError:
        return False


def _compile(problem: Problem, candidate: Candidate, options: EvalOptions, device: str,
             gpu: int | None) -> CompileResult:
    scratch = Path(tempfile.mkdtemp(prefix="kbv-build-"))
    spec = candidate_spec(problem, candidate, options, device, gpu, scratch, "compile")
    t0 = time.monotonic()
    deadline = t0 + options.build_timeout
    fresh = not built_already(candidate, device, options.cache_dir)
    try:
        try:
            worker = Worker(spec, deadline)  # loads the problem, before any candidate code
        except WorkerFailure as failure:
            return CompileResult(ok=False, problem_failed=True, seconds=time.monotonic() - t0,
                                 failure=Failure("compile", "reference", failure.kind,
                                                 failure_dict("compile", failure) | {"reference": True}))
        with worker:
            worker.call({"cmd": "import"}, deadline)
        publish_build(spec)
        env = spec.env or {}
        headers = (pch.used(Path(env["TORCH_EXTENSIONS_DIR"]), Path(env["CPATH"]))
                   if fresh and "CPATH" in env and "TORCH_EXTENSIONS_DIR" in env else None)
        return CompileResult(ok=True, seconds=time.monotonic() - t0,
                             headers=headers if headers and any(headers.values()) else None)
    except WorkerFailure as failure:
        kind = "timeout" if failure.kind == "timeout" else "build"
        return CompileResult(ok=False, failure=Failure("compile", "candidate", kind, failure_dict("compile", failure)),
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
    try:
        return evaluate_shapes(problem, candidate, options, device, gpu, compiled)
    finally:
        launch.wait_retired()  # no worker outlives the call


def evaluate_shapes(problem: Problem, candidate: Candidate, options: EvalOptions, device: str, gpu: int | None,
                    compiled: CompileResult | None = None, candidate_label: str | None = None,
                    gate: DeviceGate | None = None, ctx: PairContext | None = None,
                    lookahead: Lookahead | None = None) -> Record:
    """Every shape of the problem (one for most), compiled once; a multi-shape problem's record merges the
    per-shape records (``kbv.eval.shapes.merge``): correct only if correct on every shape, held-out ones included."""
    from kbv.eval import shapes

    plan = problem.shape_overrides()
    if len(plan) == 1 and plan[0][1] is None:
        return PairEvaluation(problem, candidate, options, device, gpu, candidate_label, gate=gate, ctx=ctx,
                              lookahead=lookahead).run(compiled)
    if compiled is None:
        compiled = compile_candidate(problem, candidate, options, device, gpu)
    records = []
    for index, overrides, held_out in plan:
        record = PairEvaluation(problem, candidate, options, device, gpu, candidate_label, overrides,
                                gate).run(compiled)
        records.append((index, overrides, held_out, record))
        if not compiled.ok:
            break  # every shape would repeat the compile failure
    return shapes.merge(records)
