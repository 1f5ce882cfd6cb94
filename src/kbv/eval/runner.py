"""Many pairs: parallel builds on the CPU cores, then evaluation over a pool of devices, with resume.

The runner is the one writer of the results file. Builds (the compile stage) run first, ``build_workers`` at a
time, one per distinct candidate file; each extension lands in a folder named by the hash of its source and
toolchain, so the evaluation stages that follow import from a warm cache. Evaluation then takes one pair per device
at a time: on a GPU host the pool is every visible GPU (one candidate process per GPU at a time); on the CPU it is a
single slot, since concurrent CPU runs would disturb each other's timings.
"""

from __future__ import annotations

import queue
import resource
import shutil
import signal
import threading
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import warnings

from kbv import envinfo
from kbv.eval.options import OptionsError
from kbv.eval import pch
from kbv.eval.workspace import SANDBOX_BUILD_ROOT, build_dir, built_already
from kbv.sandbox import health, launch
from kbv.sandbox import plan as sandbox_plan
from kbv.problems.candidates import Pair
from kbv.eval.evidence import Evidence, Failure
from kbv.eval.context import PairContext
from kbv.eval.gate import DeviceGate
from kbv.eval.lookahead import Lookahead
from kbv.eval import memory_needs
from kbv.eval.pair import CompileResult, EvalOptions, compile_candidate, evaluate_shapes, remembered_seconds
from kbv.eval.verdict import Rules, decide
from kbv.records import Record, RecordWriter, recorded_keys
from kbv.protocol import GATE_ALONE_FRACTION, GATE_MEMORY_FRACTION, LOOKAHEAD_DEPTH, LOOKAHEAD_DEVICES


@dataclass
class RunSummary:
    evaluated: int
    skipped: int
    out: Path


EXISTING = ("append", "overwrite", "error")  # what run_pairs does with a results file that already has content
STOP_GRACE_S = 10.0  # after Ctrl-C, how long the runner waits for its threads once every worker is killed


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_pairs`: every worker's process group was killed and the build folders of builds
    cut short removed; the records already written stay (each is one whole line), so ``resume=True`` continues.
    ``recorded``: records this run wrote; ``remaining``: pairs of this run not recorded; ``stuck``: threads that
    had not finished after ``STOP_GRACE_S``."""

    def __init__(self, recorded: int, remaining: int, out: Path, stuck: int = 0):
        super().__init__(f"interrupted: {recorded} pairs recorded in {out}, {remaining} not evaluated")
        self.recorded, self.remaining, self.out, self.stuck = recorded, remaining, out, stuck


class IsolationWarning(UserWarning):
    """Candidates run with less isolation than asked for (see ``sandbox_notice``)."""


def sandbox_notice(sandbox: dict) -> str | None:
    """One line saying that candidate isolation is reduced, why, and what to do; None when it is not."""
    if sandbox["requested"] and not sandbox.get("reason"):
        return None
    reason = str(sandbox.get("reason") or "unknown reason")
    if "turned off" in reason:
        todo = "unset KBV_SANDBOX to isolate candidates again"
    elif "not root" in reason:
        todo = "run kbv as root (in a container or VM) to isolate candidates, or evaluate only code you trust"
    else:
        todo = "see docs/security.md; evaluate only code you trust until it is fixed"
    return f"kbv: candidate isolation reduced ({reason}): {todo}"


class _StopOnSigint:
    """While a run is in progress (main thread only): Ctrl-C first marks the run stopped, so no thread records a
    worker's death by that signal as the candidate's failure, then raises ``KeyboardInterrupt`` as usual."""

    def __enter__(self) -> "_StopOnSigint":
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        launch.refuse_workers()
        raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


def _wait_all(futures: list[Future]) -> None:
    """Wait for the futures in short slices (so Ctrl-C reaches this thread at once); re-raise the first error."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
        for f in done:
            f.result()


def _stop(pool: ThreadPoolExecutor, running: set[Future] | list[Future]) -> int:
    """Kill every worker, cancel what has not started and wait (bounded) for the rest; returns the threads still
    running after ``STOP_GRACE_S``."""
    launch.stop_all()
    pool.shutdown(wait=False, cancel_futures=True)
    # a future cancelled here never becomes "done" for wait() (no thread ever notifies it): leave those out, or
    # every run with pairs still queued would wait the whole grace and report its threads stuck
    started = [f for f in running if not f.cancelled()]
    _, still = wait(started, timeout=STOP_GRACE_S)
    return len(still)


def _remove_partial_builds(pairs: Sequence[Pair], device: str, cache_dir: Path) -> None:
    """The build folders of builds cut short by Ctrl-C: removed, so no later run imports a torn extension."""
    for pair in pairs:
        build = build_dir(pair.candidate, device, cache_dir)
        for folder in (build, SANDBOX_BUILD_ROOT / build.name):
            shutil.rmtree(folder, ignore_errors=True)


def _remove_stale_locks(pairs: Sequence[Pair], device: str, cache_dir: Path) -> None:
    """torch's extension lock files left by killed workers (a later load would wait on them forever)."""
    for pair in pairs:
        build = build_dir(pair.candidate, device, cache_dir)
        for folder in (build, SANDBOX_BUILD_ROOT / build.name):
            for lock in folder.glob("torch_extensions/*/lock"):
                lock.unlink(missing_ok=True)


class Progress:
    """Callbacks for a progress display; the default does nothing."""

    def start(self, builds: int, evaluations: int) -> None: ...

    def built(self, pair: Pair, result: CompileResult) -> None: ...

    def headers(self, info: dict[str, Any]) -> None:
        """The precompiled ``torch/extension.h`` was built before the builds (``kbv.eval.pch.build``'s result)."""

    def evaluated(self, record: Record) -> None: ...


def device_slots(device: str) -> list[int | None]:
    if device == "cuda":
        gpus = envinfo.gpu_indices()
        if not gpus:
            raise RuntimeError("no CUDA device visible")
        return list(gpus)
    return [None]


def count_problems(pairs: Sequence[Pair], options: EvalOptions, device: str) -> None:
    """The roofline counts of every problem and shape the pairs will time, in one counting process up front (the
    performance stage reads them from the cache; a problem that fails here is counted, and its error recorded,
    there)."""
    from kbv import roofline

    jobs = [(p.problem.path, options.resolved_profile(device, p.problem), options.precision, overrides)
            for p in pairs for _, overrides, _ in p.problem.shape_overrides()]  # precount skips repeats
    try:
        roofline.precount(jobs, options.cache_dir)
    except OSError:  # no counting process: each pair counts its own
        pass


def build_candidates(pairs: Sequence[Pair], options: EvalOptions, *, build_workers: int = 1,
                     progress: Progress | None = None) -> dict[str, CompileResult]:
    """The compile stage for every distinct candidate file, ``build_workers`` at a time; results keyed by the
    candidate's hash. Builds land in the hash-named cache, so evaluation (or a later run) imports them warm."""
    progress = progress or Progress()
    device = envinfo.resolve_device(options.device)
    slots = device_slots(device)
    unique: dict[str, Pair] = {}
    for pair in pairs:
        unique.setdefault(pair.candidate.sha256, pair)
    build_workers = max(1, build_workers)
    fresh = [p for p in unique.values() if not built_already(p.candidate, device, options.cache_dir)]
    if pch.wanted((_source(p) for p in fresh), options, device):
        progress.headers(pch.build(options.cache_dir, device))
    if options.build_jobs is None:  # share the cores among concurrent builds
        options = replace(options, build_jobs=max(1, envinfo.cpu_count() // build_workers))
    compiled: dict[str, CompileResult] = {}
    building: dict[str, Pair] = {}
    lock = threading.Lock()

    def build(i: int, pair: Pair) -> None:
        with lock:
            building[pair.candidate.sha256] = pair
        result = compile_candidate(pair.problem, pair.candidate, options, device, slots[i % len(slots)])
        if launch.stopped():  # cut short by Ctrl-C: not a result
            return
        compiled[pair.candidate.sha256] = result
        with lock:
            building.pop(pair.candidate.sha256, None)
        progress.built(pair, result)

    pool = ThreadPoolExecutor(max_workers=build_workers)
    futures = [pool.submit(build, i, pair) for i, pair in enumerate(unique.values())]
    try:
        _wait_all(futures)
    except KeyboardInterrupt:
        _stop(pool, futures)
        with lock:
            _remove_partial_builds(list(building.values()), device, options.cache_dir)
        raise
    finally:
        pool.shutdown(wait=False)
    return compiled


def _source(pair: Pair) -> str:
    try:
        return pair.candidate.path.read_text(errors="replace")
    except OSError:
        return ""


def raise_open_file_limit(wanted: int = 65536) -> int:
    """Raise this process's soft limit on open files towards the hard one (at most ``wanted``) and return it: the
    parent holds the descriptors of every pair in flight (the reference's state and relayed outputs, up to
    ``wire.MAX_HANDLES`` per message), which a default soft limit of 1024 can run out of."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def run_pairs(pairs: Sequence[Pair], options: EvalOptions, out: str | Path, *, resume: bool = False,
              build_workers: int = 1, progress: Progress | None = None,
              label: Callable[[Pair], str] | None = None, existing: str = "append",
              notice: Callable[[str], None] | None = None) -> RunSummary:
    """Evaluate every pair into ``out``. ``existing``: what to do when ``out`` already has content and ``resume``
    is off: ``append`` to it, ``overwrite`` it (deleted first), or ``error`` (``OptionsError``). ``notice`` gets
    the one-line isolation warning (default: an ``IsolationWarning``). Ctrl-C raises :class:`Interrupted`."""
    options.validate()
    if existing not in EXISTING:
        raise OptionsError(f"existing must be one of {', '.join(EXISTING)} (got {existing!r})")
    progress = progress or Progress()
    device = envinfo.resolve_device(options.device)
    out = Path(out)
    if not resume and out.exists() and out.stat().st_size > 0:
        if existing == "error":
            raise OptionsError(f"{out} already has records: give --resume (skip pairs already recorded), --append "
                               "(add to it) or --overwrite (replace it)")
        if existing == "overwrite":
            out.unlink()
    out.parent.mkdir(parents=True, exist_ok=True)
    options = replace(options, protect=[*options.protect, str(out.resolve().parent)])
    sandbox = sandbox_plan.plan(options.sandbox, device)
    message = sandbox_notice(sandbox)
    if message and notice:
        notice(message)
    elif message:  # no source line: the warning is about the machine, not about the caller's code
        warnings.warn_explicit(message, IsolationWarning, filename="kbv", lineno=0, module="kbv.eval.runner")
    raise_open_file_limit()
    writer = RecordWriter(out)
    done = recorded_keys(out) if resume else set()
    todo = [p for p in pairs if p.key not in done]
    slots = device_slots(device)
    launch.allow_workers()
    with _StopOnSigint():
        return _run(pairs, todo, options, device, slots, out, writer, build_workers, progress, label)


def _run(pairs: Sequence[Pair], todo: list[Pair], options: EvalOptions, device: str, slots: list[int | None],
         out: Path, writer: RecordWriter, build_workers: int, progress: Progress,
         label: Callable[[Pair], str] | None) -> RunSummary:
    # 1. Builds, in parallel, one per distinct candidate file. 2. Evaluation over the device pool.
    progress.start(len({p.candidate.sha256 for p in todo}), len(todo))
    try:
        compiled = build_candidates(todo, options, build_workers=build_workers, progress=progress)
    except KeyboardInterrupt:
        raise Interrupted(0, len(todo), out) from None
    count_problems([p for p in todo if (built := compiled.get(p.candidate.sha256)) is not None and built.ok], options,
                   device)

    free: queue.Queue[int | None] = queue.Queue()
    share = options.gpu_share if device == "cuda" else 1  # pairs in flight per GPU (kbv.eval.gate)
    for _ in range(share):
        for slot in slots:
            free.put(slot)
    gates = {slot: DeviceGate(gate_capacity(slot), GATE_ALONE_FRACTION) for slot in slots} if share > 1 else {}
    lock = threading.Lock()
    count = 0
    healthy = set(slots)

    in_flight: dict[tuple[str, str, int], Pair] = {}
    if share > 1:  # pairs sharing a GPU: the longest (as their problems last took) first, so none is left alone last
        todo = memory_needs.longest_first(todo, lambda p: remembered_seconds(p, options, device))
    ahead = lookahead_of(todo, compiled, options, device, slots)
    if ahead is not None and slots[0] in gates:  # a pair run again alone closes them (kbv.eval.gate)
        gates[slots[0]].hold_idle(ahead.release)

    def evaluate(pair: Pair) -> None:
        nonlocal count
        gpu = free.get()
        while gpu is not None and gpu not in healthy:  # a slot of a GPU retired since it was queued
            gpu = free.get()
        keep = True
        with lock:
            in_flight[pair.key] = pair
        prepared = ahead.begin(pair, gpu) if ahead is not None else None
        try:
            name = label(pair) if label else str(pair.candidate.path)
            if gpu is None and device == "cuda":  # every GPU failed its health check: nothing left to run on
                if prepared is not None:
                    prepared.discard_correctness_ahead()
                record = not_run(pair, name, "no healthy GPU left: every GPU failed kbv's health check")
            else:
                started: dict[str, Any] = {"ctx": prepared, "lookahead": ahead} if ahead is not None else {}
                record = evaluate_shapes(pair.problem, pair.candidate, options, device, gpu,  # kbv.eval.lookahead
                                         compiled.get(pair.candidate.sha256), name, gate=gates.get(gpu), **started)
                if device == "cuda" and gpu is not None and health.looks_like_cuda_fault(record.error):
                    keep, note = health.check(gpu)
                    record.env["gpu_health"] = {"ok": keep, "note": note}
                    if not keep:
                        record.flags = sorted({*record.flags, "gpu_unhealthy"})
            if launch.stopped():  # cut short by Ctrl-C: its failures are kbv's, not the candidate's
                return
            writer.append(record)
            with lock:
                count += 1
                in_flight.pop(pair.key, None)
            progress.evaluated(record)
        finally:
            if keep or gpu is None:
                free.put(gpu)
            else:  # retire the GPU; when none is left, wake the others with None
                with lock:
                    healthy.discard(gpu)
                    if not healthy:
                        free.put(None)

    pool = ThreadPoolExecutor(max_workers=len(slots) * share)
    futures = [pool.submit(evaluate, p) for p in todo]
    try:
        _wait_all(futures)
    except KeyboardInterrupt:
        stuck = _stop(pool, futures)
        with lock:
            _remove_stale_locks(list(in_flight.values()), device, options.cache_dir)
            recorded = count
        raise Interrupted(recorded, len(todo) - recorded, out, stuck) from None
    finally:
        pool.shutdown(wait=False)
        if ahead is not None:
            ahead.close()  # correctness workers started for pairs that never began
        launch.wait_retired()  # the last pairs' timing workers, still exiting: no worker outlives the run
    return RunSummary(evaluated=count, skipped=len(pairs) - len(todo), out=out)


def lookahead_of(todo: list[Pair], compiled: dict[str, CompileResult], options: EvalOptions, device: str,
                 slots: list[int | None]) -> Lookahead | None:
    """Correctness workers started ahead (``kbv.eval.lookahead``): on one GPU (a worker is started for its GPU),
    for built single-shape pairs, unless ``KBV_START_AHEAD=0``."""
    if not LOOKAHEAD_DEVICES.get(device) or len(slots) != 1 or not options.start_ahead:
        return None

    def eligible(pair: Pair) -> bool:
        built = compiled.get(pair.candidate.sha256)
        plan = pair.problem.shape_overrides()
        return built is not None and built.ok and len(plan) == 1 and plan[0][1] is None

    wanted = LOOKAHEAD_DEPTH if options.lookahead_depth is None else options.lookahead_depth
    depth = min(wanted, options.gpu_share if device == "cuda" else 1)  # one pair at a time: the next one's
    return Lookahead(todo, slots[0], eligible,
                     lambda pair, gpu: PairContext(pair.problem, pair.candidate, options, device, gpu),
                     options.timeout, depth)


def gate_capacity(gpu: int | None) -> int | None:
    """The expected device memory that correctness stages sharing a GPU may add up to (``kbv.eval.gate``):
    ``GATE_MEMORY_FRACTION`` of its memory (None, no bound, where nvidia-smi cannot say)."""
    total = envinfo.gpu_memory_bytes(gpu)
    return int(GATE_MEMORY_FRACTION * total) if total else None


def not_run(pair: Pair, name: str, why: str) -> Record:
    """The record of a pair kbv could not evaluate (no device left), so the run still accounts for it; the verdict
    comes from the same rules as every other (a harness failure)."""
    p = pair.problem
    evidence = Evidence()
    evidence.see("gpu_unhealthy")
    evidence.fail(Failure("compile", "harness", "harness", {"stage": "compile", "kind": "harness", "message": why}))
    decision = decide(evidence, Rules())
    return Record(problem=p.key, level=p.level, problem_id=p.problem_id, problem_sha256=p.source_sha256,
                  candidate=name, candidate_sha256=pair.candidate.sha256, sample=pair.candidate.sample,
                  verdict=decision.verdict, standard_verdict=decision.standard_verdict, flags=decision.flags,
                  error=decision.error)
