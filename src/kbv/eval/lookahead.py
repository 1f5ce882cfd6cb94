"""The next pairs' correctness workers, started while the current pairs' correctness stages run (one GPU).

On the H200 the correctness stage's two processes spent 1.14 s per pair starting CUDA in a 50-pair reward batch at
``--gpu-share 3`` (0.44 s on a pair run alone; docs/results/h200-2026-12-04). As the timing workers already are
(``kbv.eval.performance.start_early``), a pair's correctness workers are now started ahead: once a pair's own two
correctness processes are up, it starts those of the next pairs in the run's order that no evaluation has begun,
until ``depth`` pairs have workers waiting (``top_up``), in threads, and waits for them to be up before it leaves the
correctness stage, so no CUDA start overlaps another pair's timing. Topping up, not one per stage: a pair that
fills the GPU closes every idle worker for its timing (``release``), and with one start per stage and one taken per
pair the count never came back (on the H100, h100-2026-12-06-e, 7 of 50 reward pairs found workers waiting, the
other 43 started CUDA in their stage, about 1 s each). Such a timing also tops them up again itself, once the device
is no longer its own (``kbv.eval.pair.PairEvaluation._timing_place``: with topping up at correctness alone, 13 of 50
in h100-2026-12-06-f). Each waits idle, with no candidate
code loaded (that comes with its setup command), until its pair's correctness stage takes it; none serves another
pair. A pair whose evaluation begins on another GPU than its workers', or never begins, has them closed.
``KBV_START_AHEAD=0`` turns this off with the timing workers' start ahead.
"""

from __future__ import annotations

import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from kbv.eval.context import PairContext, ReferenceFailed
from kbv.problems.candidates import Pair
from kbv.sandbox.launch import Worker, WorkerFailure

_AHEAD = ThreadPoolExecutor(max_workers=8, thread_name_prefix="kbv-correctness-ahead")


def launch_correctness(ctx: PairContext, deadline: float) -> dict[str, Worker]:
    """A pair's two correctness workers, started at once and not charged; a failure closes the other (the
    reference's raised first, as the stage would)."""
    with ThreadPoolExecutor(2, thread_name_prefix="kbv-correctness-ahead-role") as pool:
        futures = {role: pool.submit(ctx.start, role, "correctness", deadline, False)
                   for role in ("reference", "candidate")}
        workers, failures = {}, {}
        for role, future in futures.items():
            try:
                workers[role] = future.result()
            except BaseException as exc:  # noqa: BLE001 - raised below, once both are accounted for
                failures[role] = exc
    if failures:
        for worker in workers.values():
            ctx.collect(worker)  # its sampler stopped too
            worker.close()
        failure = failures.get("reference") or failures["candidate"]
        if isinstance(failure, WorkerFailure) and "reference" in failures:
            raise ReferenceFailed(failure, "correctness") from None
        raise failure
    return workers


class Lookahead:
    """Which pairs of a run have had their correctness workers started ahead, and by whom."""

    def __init__(self, pairs: list[Pair], gpu: int | None, eligible: Callable[[Pair], bool],
                 context: Callable[[Pair, int | None], PairContext], timeout: float, depth: int = 1) -> None:
        self._order = list(pairs)
        self._depth = depth  # pairs whose workers ``top_up`` keeps waiting
        self._gpu = gpu
        self._eligible = eligible  # built, one shape: its correctness stage starts its own two workers
        self._context = context  # the pair's context, made now: its workers' specs need its scratch folder
        self._timeout = timeout
        self._lock = threading.Lock()
        self._begun: set[tuple[str, str, int]] = set()
        self._prepared: dict[tuple[str, str, int], PairContext] = {}
        self._closed = False

    def start_next(self) -> Future | None:
        """Start the correctness workers of the first pair, in the run's order, that no evaluation has begun and
        none started for; the future of its workers (None: nothing left)."""
        with self._lock:
            if self._closed:
                return None
            pair = next((p for p in self._order if p.key not in self._begun and p.key not in self._prepared
                         and self._eligible(p)), None)
            if pair is None:
                return None
            ctx = self._context(pair, self._gpu)
            ctx.correctness_ahead = _AHEAD.submit(launch_correctness, ctx, time.monotonic() + self._timeout)
            self._prepared[pair.key] = ctx
            return ctx.correctness_ahead

    def top_up(self) -> list[Future]:
        """Start the next pairs' correctness workers (``start_next``) until ``depth`` pairs not yet begun have
        workers; the futures of those started now."""
        started: list[Future] = []
        while True:
            with self._lock:
                if len(self._prepared) >= self._depth:
                    return started
            future = self.start_next()
            if future is None:
                return started
            started.append(future)

    def begin(self, pair: Pair, gpu: int | None) -> PairContext | None:
        """The evaluation of ``pair`` begins on ``gpu``: its context with its correctness workers started ahead, or
        None (none were, or on another GPU: those are closed)."""
        with self._lock:
            self._begun.add(pair.key)
            ctx = self._prepared.pop(pair.key, None)
        if ctx is not None and gpu != self._gpu:
            _drop(ctx)
            return None
        return ctx

    def release(self) -> int:
        """Close the workers started ahead for pairs not yet begun (``DeviceGate.exclusive``: their memory is wanted);
        how many. Later starts go on as before (a released pair may be started ahead again)."""
        with self._lock:
            left, self._prepared = list(self._prepared.values()), {}
        return sum(_drop(ctx) for ctx in left)

    def close(self) -> None:
        """Close the workers of every pair whose evaluation never began (the run ended or was stopped)."""
        with self._lock:
            self._closed = True
            left, self._prepared = list(self._prepared.values()), {}
        for ctx in left:
            _drop(ctx)


def _drop(ctx: PairContext) -> int:
    """A context made ahead and not used: its workers closed (how many), its scratch folder gone."""
    closed = ctx.discard_correctness_ahead()
    if not ctx.options.keep_scratch:
        shutil.rmtree(ctx.scratch, ignore_errors=True)
    return closed
