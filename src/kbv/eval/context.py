"""What the stages of one pair share: the pair, its options and device, its scratch folder, the reference's
state, the record sections being filled (``Draft``: every record field except the verdicts and flags, which only
``kbv.eval.verdict.decide`` sets) and the ``Evidence`` the verdict is decided from."""

from __future__ import annotations

import functools
import math
import os
import secrets
import tempfile
import threading
import time
from concurrent.futures import Future
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from kbv.eval.evidence import Evidence, Failure
from kbv.eval.options import EvalOptions
from kbv.eval.params import Mapping, for_candidate
from kbv.eval.workspace import candidate_spec, reference_spec
from kbv.problems import Problem
from kbv.protocol import REPLY_OUTPUT_FACTOR, REPLY_SLACK_BYTES
from kbv.problems.candidates import Candidate
from kbv.sandbox import observe, sampler
from kbv.sandbox.launch import Worker, WorkerFailure, WorkerSpec

SAMPLE_HZ = 500  # the parent's samples of each worker's CPU time (kbv.sandbox.sampler), per thread


@dataclass
class Draft:
    """The record's sections as the stages fill them in."""

    stage: str = ""
    correctness: dict[str, Any] = field(default_factory=dict)
    timing_ms: dict[str, Any] = field(default_factory=dict)
    speedup: dict[str, Any] = field(default_factory=dict)
    memory_bytes: dict[str, Any] = field(default_factory=dict)
    seeds: dict[str, Any] = field(default_factory=dict)
    shapes: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    wall_seconds: dict[str, float] = field(default_factory=dict)
    integrity: dict[str, Any] = field(default_factory=dict)
    roofline: dict[str, Any] | None = None
    fallback: dict[str, Any] | None = None


def failure_dict(stage: str, failure: WorkerFailure) -> dict[str, Any]:
    """The record's ``error`` entry for a worker that did not answer."""
    return {"stage": stage, "kind": failure.kind, "message": failure.message, "log_tail": failure.log_tail[-2000:],
            "traceback": (failure.detail.get("traceback") or "")[-3000:]}


class ReferenceFailed(Exception):
    """The reference worker failed: not the candidate's fault (the pair's verdict is ``runtime_error``)."""

    def __init__(self, failure: WorkerFailure, stage: str):
        super().__init__(failure.message)
        self.failure = Failure(stage, "reference", failure.kind, failure_dict(stage, failure) | {"reference": True})


def _started(future: Future | None) -> Any:
    """What workers started ahead in ``future`` are, once up; None where none were started or they failed to start
    (the stage then starts its own, and reports a failure the usual way)."""
    if future is None:
        return None
    try:
        return future.result()
    except BaseException:  # noqa: BLE001 - started again by the stage, whose failure is then recorded
        return None



def _last_cpus(count: int) -> set[int]:
    """The last ``count`` of the CPUs this process may run on (none where they cannot be read)."""
    try:
        return set(sorted(os.sched_getaffinity(0))[-count:])
    except (AttributeError, OSError):
        return set()


def gpu_timing_sets(count: int, gpus: int) -> dict[int, set[int]]:
    """``count`` CPUs of this process's for each of ``gpus`` GPUs' timing workers: the last ones for GPU 0, the ones
    below them for GPU 1, and so on; none at all where that would leave this process no CPU of its own beside them
    (or its CPUs cannot be read)."""
    try:
        mine = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return {}
    if count <= 0 or count * gpus >= len(mine):
        return {}
    return {g: set(mine[len(mine) - (g + 1) * count:len(mine) - g * count]) for g in range(gpus)}


@functools.cache
def _run_gpus() -> int:
    """How many GPUs this process sees (their timing workers each get CPUs of their own)."""
    from kbv import envinfo

    return len(envinfo.gpu_indices())


class PairContext:
    def __init__(self, problem: Problem, candidate: Candidate, options: EvalOptions, device: str,
                 gpu: int | None = None, shape: dict[str, Any] | None = None):
        self.problem = problem
        self.candidate = candidate
        self.options = options
        self.device = device
        self.gpu = gpu
        self.shape = shape  # one shape's overrides of a multi-shape problem (None: the file's own constants)
        self.profile = options.resolved_profile(device, problem)
        self.scratch = Path(tempfile.mkdtemp(prefix="kbv-"))
        self.init_seed = secrets.randbits(63)
        self.ref_state: dict[str, Any] = {}
        self.mapping = Mapping()
        self.draft = Draft()
        self.evidence = Evidence()
        self.tamper: dict[str, set[str]] = {"candidate": set(), "reference": set()}
        self.first_seen: dict[tuple[str, int], observe.Snapshot] = {}  # each worker's tree after its first call
        self.growth: dict[str, dict[str, int]] = {}  # the most each role's trees grew since
        self.spent: dict[str, float] = {}  # seconds per "<stage>/<part>" (the record's wall_seconds breakdown)
        self.output_bytes = 0  # the largest reference output seen (the candidate's reply budgets follow it)
        # where each role's workers spent their CPU time, sampled by the parent from outside (kbv.sandbox.sampler)
        self.samples: dict[str, dict[str, int]] = {"candidate": {}, "reference": {}}
        # the same samples per stage: {stage: {role: {object: samples}}} (the timing stage's alone is judged too)
        self.stage_samples: dict[str, dict[str, dict[str, int]]] = {}
        self.sampling: dict[int, sampler.Sampler] = {}  # by worker pid, while it runs
        self.sampler_error: str | None = None
        self.own_roots: list[Path] = []  # the candidate's build folders (its own code: kbv.fallback)
        # the timing stage's workers, started while correctness runs (kbv.eval.performance.start_early), once the
        # correctness stage's own two processes are up (their CUDA starts first: starts at once queue in the driver):
        # the correctness stage calls the hook then
        self.early_workers: Future | None = None
        # taking either kind of workers started ahead is one step: the pair's own thread and a pair run again alone
        # (``release_idle``, from ``DeviceGate.exclusive``) may both take them
        self._take_lock = threading.Lock()
        self.on_correctness_started: Callable[[], None] | None = None
        # this pair's correctness workers, started while an earlier pair's correctness ran (kbv.eval.lookahead), and
        # the next pairs', started by this one's correctness stage (up before it leaves the stage)
        self.correctness_ahead: Future | None = None
        self.started_next: list[Future] = []

    def again(self) -> "PairContext":
        """A fresh context for the same pair (new seeds, scratch folder and evidence) that keeps what the compile
        stage found and the record's environment and times so far: for a stage run a second time."""
        fresh = PairContext(self.problem, self.candidate, self.options, self.device, self.gpu, self.shape)
        fresh.draft.env = {k: v for k, v in self.draft.env.items() if k != "output_handoff"}  # not its handoffs
        fresh.draft.wall_seconds = self.draft.wall_seconds
        fresh.evidence.compiled, fresh.evidence.problem_failed = self.evidence.compiled, self.evidence.problem_failed
        fresh.spent = {k: v for k, v in self.spent.items() if not k.startswith("correctness/")}
        return fresh

    def take_early_workers(self) -> list[dict[str, Worker]] | None:
        """The timing workers started while correctness ran, once they are up (None where none were started or
        any failed to start: the stage then starts its own, and reports a failure the usual way)."""
        with self._take_lock:
            early, self.early_workers = self.early_workers, None
        return _started(early)

    def take_correctness_ahead(self) -> dict[str, Worker] | None:
        """This pair's correctness workers started ahead, once they are up (None where none were or they failed to
        start: the stage starts its own)."""
        with self._take_lock:
            ahead, self.correctness_ahead = self.correctness_ahead, None
        return _started(ahead)

    def discard_correctness_ahead(self) -> int:
        """Close correctness workers started ahead and never used (the stage never ran, or the pair's evaluation
        went elsewhere or never began); how many."""
        return self._close_unused(list((self.take_correctness_ahead() or {}).values()))

    def discard_early_workers(self) -> int:
        """Close the timing workers started early and never used (a rejected candidate, a stage run again), and
        start none later; how many."""
        self.on_correctness_started = None
        return self.release_idle()

    def release_idle(self) -> int:
        """Close every worker started ahead for this pair and still idle, correctness and timing ones, all asked to
        exit at once (``DeviceGate.exclusive``: their memory is wanted); the stages start their own. How many."""
        return self._close_unused([*(self.take_correctness_ahead() or {}).values(),
                                   *(worker for pair in self.take_early_workers() or [] for worker in pair.values())])

    def _close_unused(self, workers: list[Worker]) -> int:
        """Workers started ahead and never used: what they reported collected, all asked to exit at once, then
        waited for; how many."""
        for worker in workers:
            self.collect(worker)
            worker.close(wait=False)
        for worker in workers:
            worker.close()
        return len(workers)

    def candidate_state(self) -> dict[str, Any]:
        """The reference's state under the candidate's own names (``kbv.eval.params``)."""
        return for_candidate(self.ref_state, self.mapping) if self.mapping.pairs else dict(self.ref_state)

    def spec(self, role: str, stage: str, lender: bool = False) -> WorkerSpec:
        """A worker's spec. On a GPU where the parent pins workers (``cpus_for``) and ``--threads`` is not given, a
        worker of either role runs as many threads as it has CPUs (a timing worker, ``GPU_TIMING_CPUS``: one), set
        in the worker before any candidate code, so both roles' thread counts are the trusted side's (rule 5)."""
        if role == "candidate":
            spec = candidate_spec(self.problem, self.candidate, self.options, self.device, self.gpu, self.scratch,
                                  stage, self.shape)
        else:
            spec = reference_spec(self.problem, self.options, self.device, self.gpu, self.scratch, stage, self.shape)
        if self.device != "cpu" and spec.threads is None:
            spec.threads = len(self.cpus_for(stage, lender)) or None
        return spec

    def collect(self, worker: Worker) -> None:
        """What a finished worker reported about its environment (tamper) and its confinement, and where it spent
        its CPU time (the parent's samples, ``kbv.sandbox.sampler``)."""
        self.tamper[worker.spec.role] |= worker.tamper
        running = self.sampling.pop(worker.pid, None) if worker.pid is not None else None
        if running is not None:
            profile = running.stop()
            mine = self.samples[worker.spec.role]
            staged = self.stage_samples.setdefault(worker.spec.stage, {}).setdefault(worker.spec.role, {})
            for obj, n in profile.by_object.items():
                mine[obj] = mine.get(obj, 0) + n
                staged[obj] = staged.get(obj, 0) + n
            if profile.error and self.sampler_error is None:
                self.sampler_error = profile.error
        if worker.handoffs:  # outputs that reached the judge as descriptors (kbv.worker.handoff), per stage
            mine = self.draft.env.setdefault("output_handoff", {}).setdefault(worker.spec.stage, {})
            for kind, seen in worker.handoffs.items():
                total = mine.setdefault(kind, {"outputs": 0, "bytes": 0})
                total["outputs"] += seen["outputs"]
                total["bytes"] += seen["bytes"]
        if worker.handoff_failure:  # the worker fell back to the pipe: its outputs passed through host memory
            self.draft.env.setdefault("output_handoff", {}).setdefault(worker.spec.stage, {})[
                "export_failed"] = worker.handoff_failure
        if worker.spec.role == "candidate" and worker.isolation:
            self.draft.env.setdefault("isolation", {})["achieved"] = worker.isolation

    def watch(self, worker: Worker, when: str) -> None:
        """The parent's own look at a worker's process tree after a call (``kbv.sandbox.observe``): a candidate whose
        threads or processes grow after its first call in a worker, beyond what the reference's grow in theirs, can
        carry work past the call's end (``background_threads``)."""
        role, pid = worker.spec.role, worker.pid
        seen = observe.snapshot(pid)
        if seen is None or pid is None:
            return
        pinned = self.cpus_for(worker.spec.stage)
        if role == "candidate" and pinned and seen.cpus is not None and not seen.cpus <= pinned:
            self.evidence.see("resources_changed")
            self.draft.integrity["resources_changed"] = {"pinned": sorted(pinned), "seen": sorted(seen.cpus)}
        first = self.first_seen.setdefault((role, pid), seen)
        growth = self.growth.setdefault(role, {"threads": 0, "processes": 0})
        growth["threads"] = max(growth["threads"], seen.threads - first.threads)
        growth["processes"] = max(growth["processes"], seen.processes - first.processes)
        if role != "candidate":
            return
        ref = self.growth.get("reference", {"threads": 0, "processes": 0})
        if seen.processes - first.processes > ref["processes"] or seen.threads - first.threads > ref["threads"]:
            self.evidence.see("background_threads")
            self.draft.correctness.setdefault("input_use", {}).setdefault("observed_growth", {})[when or "call"] = {
                "processes": [first.processes, seen.processes], "threads": [first.threads, seen.threads]}

    def budget(self, cmd: str) -> int:
        """Tensor bytes a candidate reply to ``cmd`` may carry: outputs (``forward``, ``fallback``, ``kept``,
        ``buffers``) a bounded multiple of the reference's, anything else next to nothing."""
        if cmd in ("forward", "fallback", "kept", "buffers"):
            return REPLY_OUTPUT_FACTOR * self.output_bytes + REPLY_SLACK_BYTES
        return REPLY_SLACK_BYTES

    def saw_reference_output(self, reply: dict[str, Any]) -> None:
        sizes = reply.get("nbytes") or []
        self.output_bytes = max(self.output_bytes, sum(int(n) for n in sizes if isinstance(n, int)))
        self.draft.correctness["output_bytes"] = self.output_bytes  # the largest one forward's outputs came to

    def note_forward(self, role: str, reply: dict[str, Any]) -> None:
        """Add a correctness forward's own account of its call (``forward_ms``: the worker's clock around the model
        call and its sync) to ``correctness.forward_ms[role]``, with the number of forwards: what the stage spent
        outside kbv's own work (the large-output figure of ``benchmarks/pair_cost.py``); and the rest of its
        command by the worker's clock (``forward_split_ms``) to that role's ``split``. A diagnostic only: the
        candidate's process may say anything."""
        ms = reply.get("forward_ms") if isinstance(reply, dict) else None
        if not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
            return
        total = self.draft.correctness.setdefault("forward_ms", {}).setdefault(role, {"forwards": 0, "ms": 0.0})
        total["forwards"] += 1
        total["ms"] = round(total["ms"] + float(ms), 3)
        split = reply.get("forward_split_ms")
        if isinstance(split, dict):
            _add_parts(total.setdefault("split", {}), split)

    @contextmanager
    def clock(self, stage: str, part: str) -> Iterator[None]:
        """Charge the time of a block to ``<stage>/<part>`` of the record's ``wall_seconds`` breakdown."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.charge(stage, part, time.monotonic() - t0)

    def split_cuda_init(self, stage: str, reply: dict[str, Any], part: str = "setup") -> None:
        """Move the seconds a worker says starting CUDA took (``cuda_init_s`` of its hello or of a setup reply, its
        own clock) from ``<stage>/<part>`` to ``<stage>/cuda_init``, never more than was charged to that part: a
        diagnostic only."""
        seconds = reply.get("cuda_init_s") if isinstance(reply, dict) else None
        if not isinstance(seconds, (int, float)) or not seconds > 0:
            return
        moved = min(float(seconds), self.spent.get(f"{stage}/{part}", 0.0))
        self.charge(stage, part, -moved)
        self.charge(stage, "cuda_init", moved)

    def note_judge_split(self, stage: str, reply: dict[str, Any]) -> None:
        """Add a judge command's own account of its time (``split_ms``: receiving the candidate's outputs, its
        descriptors imported; comparing; the standard check; reading back lent inputs; the digest) to the stage's
        ``judge_split_ms`` (``correctness`` or ``timing_ms``), with the number of commands: a diagnostic only."""
        split = reply.get("split_ms") if isinstance(reply, dict) else None
        if not isinstance(split, dict):
            return
        section = self.draft.correctness if stage == "correctness" else self.draft.timing_ms
        total = section.setdefault("judge_split_ms", {"commands": 0})
        total["commands"] += 1
        _add_parts(total, split)

    def mark(self, event: str) -> None:
        """Note when ``event`` happened on the GPU's shared schedule (``env.timeline``: wall-clock seconds since the
        epoch, so the pairs of one batch line up): a diagnostic that decides nothing."""
        self.draft.env.setdefault("timeline", {})[event] = round(time.time(), 3)

    def charge(self, stage: str, part: str, seconds: float) -> None:
        """Add ``seconds`` to ``<stage>/<part>`` of the record's ``wall_seconds`` breakdown."""
        key = f"{stage}/{part}"
        self.spent[key] = self.spent.get(key, 0.0) + seconds

    def start(self, role: str, stage: str, deadline: float, charged: bool = True, lender: bool = False) -> Worker:
        """A fresh worker, its start (process, imports, problem load, confinement) charged to ``process_start``
        (unless ``charged`` is False: workers started together in threads are charged once, by the caller). On
        the CPU both roles are pinned by the parent to the same CPUs (``worker_cpus``; on a GPU both roles' timing
        workers to their GPU's timing CPUs and every other worker to the rest, ``gpu_timing_cpus``): a candidate that
        starts more threads gains no cores, and one that widens its CPU set is caught (``watch``). A ``lender`` (reference
        role, never timed: ``kbv.eval.lent_timing``) is pinned to the parent's other CPUs (``lender_cpus``), so its
        work for both roles alike runs beside theirs rather than in their time slices."""
        with self.clock(stage, "process_start") if charged else nullcontext():
            worker = Worker(self.spec(role, stage, lender), deadline,
                            on_close=lambda s: self.charge(stage, "process_exit", s))
        if charged:  # on a GPU the worker starts CUDA before its hello (kbv.worker.session.Session.warm)
            self.split_cuda_init(stage, {"cuda_init_s": worker.cuda_init_s}, "process_start")
        cpus = self.cpus_for(stage, lender)
        if cpus and observe.pin(worker.pid, cpus) and not lender:
            resources = self.draft.env.setdefault("resources", {})  # on a GPU the timing and the other workers'
            timing = self.device == "cpu" or stage == "performance"
            resources.setdefault("cpus" if timing else "other_cpus", sorted(cpus))
            resources.setdefault("threads" if timing else "other_threads", worker.spec.threads)
        if not lender:  # a lender runs no candidate code: nothing to sample (and no collect would stop it)
            self._sample(worker, cpus)
        return worker

    def _sample(self, worker: Worker, cpus: set[int]) -> None:
        """Start the parent's sampling of a worker's CPU time (every call it makes, until ``collect``)."""
        if not self.options.sample_workers or worker.pid is None or self.sampler_error is not None:
            return
        running = sampler.Sampler(worker.pid, SAMPLE_HZ, cpus=cpus or None)
        if running.start():
            self.sampling[worker.pid] = running
        else:
            self.sampler_error = running.error or "not started"

    def worker_cpus(self) -> set[int]:
        """The CPUs the parent gives every CPU worker, reference and candidate alike: the last ``threads`` of its
        own (none on a GPU, where the GPU is the measured resource)."""
        threads = self.options.resolved_threads(self.device)
        if self.device != "cpu" or not threads:
            return set()
        return _last_cpus(threads)

    def cpus_for(self, stage: str, lender: bool = False) -> set[int]:
        """The CPUs the parent pins a worker of ``stage`` to (a ``lender``: a pair's lender), none where it pins
        none: on the CPU ``worker_cpus`` (``lender_cpus``), on a GPU ``gpu_timing_cpus``."""
        if self.device == "cpu":
            return self.lender_cpus() if lender else self.worker_cpus()
        return self.gpu_timing_cpus("lending" if lender else stage)

    def gpu_timing_cpus(self, stage: str) -> set[int]:
        """On a GPU (``GPU_TIMING_CPUS``, ``options.gpu_timing_cpus``): for the performance stage, the CPUs its GPU's
        timing workers of both roles are pinned to (``gpu_timing_sets``); for every other stage, the parent's CPUs
        less every GPU's timing CPUs. None on the CPU, where ``worker_cpus`` pins, or where it is off."""
        if self.device == "cpu":
            return set()
        gpu = self.gpu or 0
        sets = gpu_timing_sets(self.options.gpu_timing_cpus, max(_run_gpus(), gpu + 1))
        if not sets:
            return set()
        if stage == "performance":
            return sets.get(gpu, set())
        return set(os.sched_getaffinity(0)).difference(*sets.values())

    def lender_cpus(self) -> set[int]:
        """The CPUs of a pair's lender: the parent's own less the timing workers' (``worker_cpus``), or theirs where
        nothing is left (and none on a GPU)."""
        pinned = self.worker_cpus()
        try:
            rest = set(os.sched_getaffinity(0)) - pinned
        except (AttributeError, OSError):
            rest = set()
        return (rest or pinned) if pinned else set()

    def note(self, section: str, key: str, distribution: str, value: Any) -> None:
        """``draft.correctness[section][key][distribution] = value`` (the record's per-distribution details)."""
        self.draft.correctness.setdefault(section, {}).setdefault(key, {})[distribution] = value


def _add_parts(total: dict[str, Any], split: dict[Any, Any]) -> None:
    """Add a worker's account of its time by part (milliseconds) into ``total``, leaving out what is not a finite
    number under a name: the worker's process may say anything."""
    for part, ms in split.items():
        if isinstance(part, str) and isinstance(ms, (int, float)) and math.isfinite(ms):
            total[part] = round(total.get(part, 0.0) + float(ms), 3)
