"""Many pairs: parallel builds on the CPU cores, then evaluation over a pool of devices, with resume.

The runner is the one writer of the results file. Builds (the compile stage) run first, ``build_workers`` at a
time, one per distinct candidate file; each extension lands in a folder named by the hash of its source and
toolchain, so the evaluation stages that follow import from a warm cache. Evaluation then takes one pair per device
at a time: on a GPU host the pool is every visible GPU (one candidate process per GPU at a time); on the CPU it is a
single slot, since concurrent CPU runs would disturb each other's timings.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import warnings

from kbv import envinfo
from kbv.sandbox import health
from kbv.sandbox import plan as sandbox_plan
from kbv.problems.candidates import Pair
from kbv.eval.evidence import Evidence, Failure
from kbv.eval.pair import CompileResult, EvalOptions, compile_candidate, evaluate_shapes
from kbv.eval.verdict import Rules, decide
from kbv.records import Record, RecordWriter, recorded_keys


@dataclass
class RunSummary:
    evaluated: int
    skipped: int
    out: Path


class Progress:
    """Callbacks for a progress display; the default does nothing."""

    def start(self, builds: int, evaluations: int) -> None: ...

    def built(self, pair: Pair, result: CompileResult) -> None: ...

    def evaluated(self, record: Record) -> None: ...


def device_slots(device: str) -> list[int | None]:
    if device == "cuda":
        gpus = envinfo.gpu_indices()
        if not gpus:
            raise RuntimeError("no CUDA device visible")
        return list(gpus)
    return [None]


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
    if options.build_jobs is None:  # share the cores among concurrent builds
        options = replace(options, build_jobs=max(1, envinfo.cpu_count() // build_workers))
    compiled: dict[str, CompileResult] = {}

    def build(item: tuple[int, Pair]) -> None:
        i, pair = item
        result = compile_candidate(pair.problem, pair.candidate, options, device, slots[i % len(slots)])
        compiled[pair.candidate.sha256] = result
        progress.built(pair, result)

    with ThreadPoolExecutor(max_workers=build_workers) as pool:
        list(pool.map(build, enumerate(unique.values())))
    return compiled


def run_pairs(pairs: Sequence[Pair], options: EvalOptions, out: str | Path, *, resume: bool = False,
              build_workers: int = 1, progress: Progress | None = None,
              label: Callable[[Pair], str] | None = None) -> RunSummary:
    options.validate()
    progress = progress or Progress()
    device = envinfo.resolve_device(options.device)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    options = replace(options, protect=[*options.protect, str(out.resolve().parent)])
    sandbox = sandbox_plan.plan(options.sandbox, device)
    if not sandbox["requested"] or sandbox.get("reason"):
        warnings.warn(f"kbv: candidate isolation reduced: {sandbox.get('reason')}", stacklevel=2)
    writer = RecordWriter(out)
    done = recorded_keys(out) if resume else set()
    todo = [p for p in pairs if p.key not in done]
    slots = device_slots(device)

    # 1. Builds, in parallel, one per distinct candidate file. 2. Evaluation over the device pool.
    progress.start(len({p.candidate.sha256 for p in todo}), len(todo))
    compiled = build_candidates(todo, options, build_workers=build_workers, progress=progress)

    free: queue.Queue[int | None] = queue.Queue()
    for slot in slots:
        free.put(slot)
    lock = threading.Lock()
    count = 0
    healthy = set(slots)

    def evaluate(pair: Pair) -> None:
        nonlocal count
        gpu = free.get()
        keep = True
        try:
            name = label(pair) if label else str(pair.candidate.path)
            if gpu is None and device == "cuda":  # every GPU failed its health check: nothing left to run on
                record = not_run(pair, name, "no healthy GPU left: every GPU failed kbv's health check")
            else:
                record = evaluate_shapes(pair.problem, pair.candidate, options, device, gpu,
                                         compiled.get(pair.candidate.sha256), name)
                if device == "cuda" and health.looks_like_cuda_fault(record.error):
                    keep, note = health.check(gpu)
                    record.env["gpu_health"] = {"ok": keep, "note": note}
                    if not keep:
                        record.flags = sorted({*record.flags, "gpu_unhealthy"})
            writer.append(record)
            with lock:
                count += 1
            progress.evaluated(record)
        finally:
            if keep or gpu is None:
                free.put(gpu)
            else:  # retire the GPU; when none is left, wake the others with None
                with lock:
                    healthy.discard(gpu)
                    if not healthy:
                        free.put(None)

    with ThreadPoolExecutor(max_workers=len(slots)) as pool:
        for future in [pool.submit(evaluate, p) for p in todo]:
            future.result()
    return RunSummary(evaluated=count, skipped=len(pairs) - len(todo), out=out)


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
