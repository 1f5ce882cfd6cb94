"""The performance stage of one pair: reference and candidate timed in fresh process pairs under both baselines,
memory, the timed-output re-check, the parent's burst clock check, and the roofline section.

Reference and candidate alternate in ABBA rounds within each pair so both see the same clocks, temperature and
neighbours; processes running identical code differ by up to ~20 % on a GPU (docs/results), so the speedup is the
geometric mean over pairs and its interval comes from the spread between pairs as well as within them. A
candidate far slower than the reference is timed once with few trials (``timing_truncated``). Findings go to
``ctx.evidence``; figures to the record's sections (``ctx.draft``). No verdict is decided here.
"""

from __future__ import annotations

import math
import secrets
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from typing import Any, Callable, Iterator

from kbv import envinfo, stats
from kbv.eval import workspace
from kbv.eval.context import PairContext, ReferenceFailed, failure_dict
from kbv.eval.correctness import as_float
from kbv.eval.evidence import PART_OF, Failure, out_of_memory_is_kbvs, reads_out_of_memory
from kbv.eval.gate import ungated
from kbv.eval.lent_timing import TimedLoan, lends, open_loans
from kbv.eval.pacing import Pacer, untimed_excess, untimed_ms
from kbv.eval.refcache import ReferenceTimingCache, cache_key
from kbv.eval.timed_record import TimedRecords, records
from kbv.protocol import (
    BURST_DEVICE_BOUND, BURST_INPUT_SETS, BURST_MAX_CALLS, BURST_MAX_WALL_OVER_TIMED, BURST_MAX_WALL_SPEEDUP, BURST_MIN_CLAIM, BURST_MIN_CLAIM_CPU,
    BURST_TARGET_MS, CHANGED_KEPT_MAX, CLEAN_REFERENCE_DEFAULT, ESTIMATE_CALLS, FIRST_TIMED_CALL, LENT_CHECKS_KEPT, REFERENCE_CLEAN_MAX,
    REFERENCE_CLEAN_POOLED_COMMANDS, REFERENCE_CLEAN_REJECT_ABOVE, REFERENCE_CLEAN_RETRY_BELOW,
    CPU_MEMORY_REPEATS, REFERENCE_AFTER_CANDIDATE_MAX, IDLE_CPU_SLACK_MS, IDLE_CPU_SLACK_REL, IDLE_GPU_KEPT_SAMPLES, LEND_PREDRAW, DEVICE_IN_USE_SLACK_BYTES, DEVICE_IN_USE_SLACK_REL, STAGE_MEMORY_SLACK_BYTES,
    STAGE_MEMORY_SLACK_REL, STAGE_MEMORY_TRANSIENT_OUTPUTS, DISTRIBUTIONS, JUDGED_TIMED_BYTES_PER_PAIR, JUDGED_TIMED_CALLS_PER_PAIR, MEMORY_SLACK_BYTES,
    REFERENCE_CACHE_SLOW_MAX, REFERENCE_DRIFT_MAX, REFERENCE_REMEASURE_COMMANDS, REFERENCE_REMEASURE_TRIALS, REFERENCE_SHIFTED_SHARE, RING_BYTES, RING_DEVICE_FRACTION, TIMED_DISTRIBUTION_WEIGHTS, TIMING_ROUNDS, TIMING_RULES, TIMING_TRUNCATE_CONFIRM, TIMING_TRUNCATE_FACTOR, timed_call,
)
from kbv.sandbox import devbusy, devclock, devmem, freeze, launch, observe
from kbv.sandbox.launch import Worker, WorkerFailure

_READER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kbv-gpu-clocks")  # readings of GPU clocks
_EARLY = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kbv-early")  # timing workers started during correctness
Samples = dict[str, dict[str, list[list[float]]]]  # samples[role][baseline]: one list of trial times per pair


def timing_summary(groups: list[list[float]]) -> dict[str, Any]:
    """Statistics of all trials pooled, plus each process's median (their spread is the between-process part)."""
    pooled = [t for g in groups for t in g]
    return stats.summarize(pooled) | {"process_medians": [stats.summarize(g)["median"] for g in groups if g],
                                      "rounds": TIMING_ROUNDS}


def launch_pairs(ctx: PairContext, pairs: range, deadline: float,
                 set_up: Callable[..., None] | None = None) -> list[dict[str, Worker]]:
    """The timing workers of ``pairs``, started at once in threads (and set up by ``set_up``), not charged; a failure
    closes every worker started (the reference's failure raised first). Each waits idle, blocked on its own channel,
    until its pair is timed; none serves another pair. Where the pairs' timed inputs are lent, each pair's lender
    (a worker of the reference's role, never set up: ``kbv.eval.lent_timing``) starts with them, as ``lender``."""
    roles = ("reference", "candidate", "lender") if lends(ctx.options.lend_timed, ctx.device)[0] else (
        "reference", "candidate")
    jobs = [(index, role) for index in pairs for role in roles]

    def launch(role: str) -> Worker:
        try:
            worker = ctx.start("reference" if role == "lender" else role, "performance", deadline, charged=False,
                               lender=role == "lender")
        except WorkerFailure as failure:
            if role != "candidate":
                raise ReferenceFailed(failure, "performance") from None
            raise
        if set_up is not None and role != "lender":
            try:
                set_up(worker, deadline, charged=False)
            except BaseException:
                worker.close()
                raise
        return worker

    workers: dict[int, dict[str, Worker]] = {index: {} for index in pairs}
    failures: list[BaseException] = []
    with ThreadPoolExecutor(len(jobs), thread_name_prefix="kbv-start-ahead") as pool:
        futures = {job: pool.submit(launch, job[1]) for job in jobs}
        for (index, role), future in futures.items():
            try:
                workers[index][role] = future.result()
            except BaseException as exc:  # noqa: BLE001 - raised below, once every worker is accounted for
                failures.append(exc)
    if failures:
        for pair in workers.values():
            for worker in pair.values():
                ctx.collect(worker)
                worker.close()
        raise next((f for f in failures if isinstance(f, ReferenceFailed)), failures[0])
    return [workers[index] for index in pairs]


def start_early(ctx: PairContext) -> None:
    """Start every timing pair's workers in threads (``ctx.early_workers``): called by the correctness stage once its
    own two processes are up (``ctx.on_correctness_started``; on a GPU CUDA starts queue in the driver: started at
    once with them, six took 0.9 s against 0.3 s for two on the H200, and correctness waited). Each starts (on a
    GPU, CUDA too) before its hello and then waits, idle, with no candidate code loaded (that comes with its setup,
    in the stage, pair by pair), so the start no longer adds to the timing stage. Idle processes and contexts run no
    work while another pair is timed. ``KBV_START_AHEAD=0`` turns it off."""
    if not ctx.options.start_ahead:
        return
    ctx.early_workers = _EARLY.submit(launch_pairs, ctx, range(timing_pairs(ctx)),
                                      time.monotonic() + ctx.options.timeout)


def timing_pairs(ctx: PairContext) -> int:
    """The process pairs the timing stage runs (before any confirmation pair)."""
    return ctx.options.timing_pairs or TIMING_RULES[ctx.device].process_pairs


def _no_lender(msg: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError("nothing is lent in this pair")


class PerformanceStage:
    def __init__(self, ctx: PairContext):
        self.ctx = ctx
        self.options = ctx.options
        self.ev = ctx.evidence
        self.draft = ctx.draft
        self.baselines = list(ctx.options.baselines)
        self.truncated = False  # the candidate was far slower: timed once, with few trials
        self.truncation_offered = True  # until a claimed cut is refused (``_take_truncation``)
        self.burst_seen: dict[str, Any] | None = None  # the clock cross-check's measurements (_burst_check)
        self.confirming = False  # timing the confirmation pair (one timing pair whose untimed_work is to be confirmed)
        self.aliased: dict[str, set[tuple[int, int]]] = {"reference": set(), "candidate": set()}  # timed, burst
        # the distributions timed inputs come from (a problem's declared skips left out): kbv.protocol.timed_call
        self.names = tuple(d.name for d in DISTRIBUTIONS if d.name not in ctx.problem.skip)
        total = (ctx.draft.env.get("device") or {}).get("total_memory") if ctx.device == "cuda" else None
        ring = max(RING_BYTES[ctx.device], int(RING_DEVICE_FRACTION * total) if isinstance(total, int) else 0)
        self.ring_bytes = ring // (TIMING_ROUNDS * len(self.baselines))
        self.burst_bytes = ring  # a burst's input sets and kept outputs, per worker
        # a command keeps at least one output: where one is more than a command's share of the ring, the pair's kept
        # outputs would exceed it (on an 80 GB H100 four 6 GiB outputs beside both workers' own: out of memory), so
        # each command's kept call is judged, and dropped, once that command has ended
        self.judge_each_command = ctx.output_bytes > self.ring_bytes
        # and on a GPU every timing command of both roles, clean ones too, then gives its caching allocator's free
        # blocks back as it ends (the worker's ``release_cached``), for the other role's worker
        self.release_cached = self.judge_each_command and ctx.device != "cpu"
        # per role and baseline, each timing command's list of untimed times per timed call (its window on the
        # parent's clock minus the time its worker reported), in the order the commands ran: kbv.eval.pacing
        self.untimed: dict[str, dict[str, list[list[float]]]] = {"reference": {}, "candidate": {}}
        # the rounds the untimed-work rule reads from, per role and baseline (``_untimed_reference_in_full``)
        self.untimed_since: dict[str, dict[str, int]] | None = None
        # CPU, first pair: each role's resident-set rise over its timing commands (the parent's /proc), the timed
        # calls it kept per command, and the bytes of one call's outputs (the reference's account)
        self.stage_memory: dict[str, Any] = {"start": {}, "rise": {}, "kept_calls": {"reference": [], "candidate": []},
                                             "output_bytes": None, "folded": {}}
        # CPU, first pair: each role's resident-set rise over every timed call, read by the parent around each call
        # (``_call_memory``): no call is the memory-measured one, every call is
        self.call_memory: dict[str, list[int]] = {"reference": [], "candidate": []}
        # per role, the CPU time its timing worker used while the other role's timing command ran (it has no command
        # then: idle), and that command's wall time, in milliseconds, read by the parent (``observe.cpu_ns``)
        self.idle_cpu: dict[str, list[float]] = {"reference": [0.0, 0.0], "candidate": [0.0, 0.0]}
        # per pair and baseline, the median of each reference timing command that came right after a candidate's
        # timing command ("after") and of the others ("other"): device work a candidate left queued at its reply
        # runs beside the next command (timing_ms.reference_after_candidate)
        self.reference_rounds: dict[int, dict[str, dict[str, list[float]]]] = {}
        self.after_confirmation: dict[str, Any] | None = None  # ``_confirm_reference_slowed``'s, for that rule
        # per baseline, the median of each of the current pair's reference timing commands (all of them, the first
        # too), and per pair timed clean, what its clean command found (``_clean_reference``)
        self.pair_reference: dict[str, list[float]] = {}
        self.pair_reference_allocs: dict[str, list[Any]] = {}  # the same commands' ``allocator`` counts (on CUDA)
        self.clean = clean_reference_on(ctx.options.clean_reference, ctx.device)
        self.reference_clean: list[dict[str, Any]] = []
        self.clean_confirmation: dict[str, Any] | None = None  # ``_confirm_reference_slowed``'s, for the clean rule
        self.pair_groups: dict[int, dict[tuple[str, str], list[float]]] = {}  # each pair's sample lists, by role, baseline
        self.pair_loans: dict[str, TimedLoan] = {}  # the current pair's (``_time_pair``)
        # on a GPU: per role, the driver's utilisation samples of its worker while the other role was timed
        # samples, most SM %, commands read over and the samples that saw SM use; None once NVML could not be
        # asked (timing_ms.idle_gpu)
        self.idle_gpu: dict[str, dict[str, Any]] | None = {
            role: {"samples": 0, "busy_count": 0, "max_sm": 0, "commands": 0, "busy": []}
            for role in ("reference", "candidate")}
        # the memory-measured calls' inputs, the same for both roles: what drawing them leaves held (a distribution
        # whose draw makes a temporary of the inputs' size) differs between distributions, and on the H200 roles
        # drawn from different keys held 17.9 against 9.36 GB on level1/4's 8 GiB input (h200-2026-12-03)
        self.memory_key = secrets.randbits(63)
        # both roles' timed inputs lent by a third process, the lender, one per process pair (kbv.eval.lent_timing)
        self.lend, self.lend_reason = lends(ctx.options.lend_timed, ctx.device)
        self.lender: Worker | None = None  # the pair's lender while it is timed (``_pair``)
        # every forward of every timing command recorded, both roles (kbv.eval.timed_record): None where it is off
        self.recorded = TimedRecords() if records(ctx.options.record_timed, ctx.device) else None

    # -- workers --------------------------------------------------------------------------------------------------

    def _start(self, role: str, deadline: float, charged: bool = True) -> Worker:
        """A fresh worker for timing (its start charged to ``process_start`` unless ``charged`` is False)."""
        try:
            return self.ctx.start(role, "performance", deadline, charged=charged)
        except WorkerFailure as failure:
            if role == "reference":
                raise ReferenceFailed(failure, "performance") from None
            raise

    def _predraw(self) -> bool:
        """Whether the lender draws each next call's inputs ahead (``LEND_PREDRAW``): only where it has CPUs of its own,
        so the draw runs beside a timed call and never in its time slice."""
        if not LEND_PREDRAW["cuda" if self.ctx.device.startswith("cuda") else "cpu"]:
            return False
        return not self.ctx.lender_cpus() & self.ctx.worker_cpus()

    def _start_lender(self, deadline: float) -> Worker:
        """The pair's lender: a worker of the reference's role that lends both roles' timed inputs and is never
        timed (its start charged to ``process_start``; it needs no set-up: the problem's inputs only)."""
        try:
            return self.ctx.start("reference", "performance", deadline, lender=True)
        except WorkerFailure as failure:
            raise ReferenceFailed(failure, "performance") from None

    def _setup(self, worker: Worker, deadline: float, charged: bool = True) -> None:
        """Load the reference's initial state into a timing worker (the reference loads it too, so both processes
        allocate alike); a worker whose setup fails is collected (its caller closes it)."""
        role = worker.spec.role
        state = self.ctx.ref_state if role == "reference" else self.ctx.candidate_state()
        try:
            with self.ctx.clock("performance", "setup") if charged else nullcontext():
                reply = worker.call({"cmd": "setup", "init_seed": self.ctx.init_seed, "state": state,
                                     "record": self.recorded is not None}, deadline)
            if charged:
                self.ctx.split_cuda_init("performance", reply)
            if self.recorded is not None:
                self.recorded.warmed(role, reply.get("record_warm") if isinstance(reply, dict) else None)
        except BaseException as exc:
            self.ctx.collect(worker)
            if isinstance(exc, WorkerFailure) and role == "reference":
                raise ReferenceFailed(exc, "performance") from None
            raise

    def _start_ahead(self, pairs: range, deadline: float, set_up: bool) -> list[dict[str, Worker]]:
        """The workers of ``pairs``, started at once in threads (and set up, with ``set_up``), charged to
        ``start_ahead`` as one wall time (``launch_pairs``)."""
        with self.ctx.clock("performance", "start_ahead"):
            return launch_pairs(self.ctx, pairs, deadline, self._setup if set_up else None)

    @staticmethod
    def _wait_exited(workers: list[Worker]) -> None:
        """Wait until every worker asked to exit (``Worker.close(wait=False)``) is gone, and every worker an earlier
        pair retired (``launch.wait_retired``): a pair's workers exit while the next pair's start, and the next pair
        is timed only once they have (their exit also frees the GPU)."""
        while workers:
            workers.pop().close()
        launch.wait_retired()

    def _call(self, worker: Worker, role: str, msg: dict[str, Any], deadline: float,
              pacer: Pacer | None = None) -> dict[str, Any]:
        try:
            with self.ctx.clock("performance", PART_OF.get(msg.get("cmd", ""), "other")):
                budget = self.ctx.budget(msg.get("cmd", "")) if role == "candidate" else None
                return worker.call(msg, deadline, budget, pacer=pacer)
        except WorkerFailure as failure:
            if role == "reference":
                raise ReferenceFailed(failure, "performance") from None
            raise

    def _memory(self, worker: Worker, role: str, deadline: float) -> dict[str, Any]:
        """The memory command, measured twice: by the worker (one call's peak) and, on the CPU, by the parent from
        ``/proc`` (the rise of the worker's resident set over the whole command: ``kbv.sandbox.observe``), which
        the candidate cannot blind; on the CPU the parent's figure is the one compared, for both roles alike. On a
        GPU the parent also reads what the driver says the worker's processes hold after the call (NVML), compared
        instead of the worker's own figure where both roles have it."""
        msg = {"cmd": "memory", "key": self.memory_key, "names": self.names}
        result = dict(self._call(worker, role, msg, deadline)["memory"])
        if self.ctx.device != "cpu":  # what the driver says the worker's processes hold after the call (its tree:
            # a sandboxed worker's CUDA runs in the inner process of its PID namespace; kbv.sandbox.devmem)
            pids = observe.tree(worker.pid) if worker.pid is not None else []
            listed = devmem.entries(pids) if pids else None
            # none listed: not found (a CUDA worker holds a context by now), so no figure rather than a zero
            result["process_device_bytes"] = (sum(used for _, used in listed) or None) if listed else None
            result["process_device_entries"] = [list(e) for e in listed] if listed is not None else None
            return result
        peaks = []
        for _ in range(CPU_MEMORY_REPEATS):  # stray allocations only add: the least of a few calls is the cleanest
            self._call(worker, role, msg | {"phase": "prepare"}, deadline)
            start = observe.peak_start(worker.pid)
            self._call(worker, role, msg | {"phase": "run"}, deadline)
            seen = observe.peak_since(start)
            if seen is not None:
                peaks.append(seen)
        result["worker_peak_bytes"] = result.get("peak_bytes")
        result["peak_bytes"] = at_least_the_outputs(min(peaks), self.ctx.output_bytes) if peaks else None
        result["method"] = ("VmHWM rise over one call, read by the parent from /proc (least of "
                            f"{CPU_MEMORY_REPEATS}), at least one forward's outputs" if peaks else "unavailable")
        return result

    # -- the stage ------------------------------------------------------------------------------------------------

    def run(self, place: AbstractContextManager[Callable[[], AbstractContextManager[Any]]] | None = None) -> None:
        """The stage. On a GPU shared with other pairs, ``place`` is the stage's place on it (``DeviceGate.timing``):
        held beside other pairs' correctness for the first pair's set-up and memory measure (the driver's
        per-process figure and the worker's own allocator peak are each process's own; where NVML cannot be read,
        or the measure runs out of memory beside others, it is taken with the device alone), and become the device
        to itself (what it yields: ``alone``) for the timed rounds, the burst check and the timed-output re-check;
        every worker is asked to exit before the place is left, so none with candidate code outlives it beside
        another pair's timing, and the parent's own conclusions (statistics and rules) come after."""
        ctx, options, draft = self.ctx, self.options, self.draft
        baselines = self.baselines
        n_pairs = timing_pairs(ctx)
        seed = secrets.randbits(63)
        draft.seeds["timing"] = seed
        cached = self._cached_reference(baselines)
        deadline = time.monotonic() + options.timeout
        roles = ("reference", "candidate")
        samples: Samples = {r: {b: [] for b in baselines} for r in roles}
        warmups: dict[str, dict[str, int]] = {r: {} for r in roles}
        flags: dict[str, Any] = {}
        memory_peaks: dict[str, Any] = {}
        wall: dict[str, list[float]] = {}
        share = 1.0 / (TIMING_ROUNDS * n_pairs)
        exiting: list[Worker] = []  # the previous pair's workers, asked to exit: waited for before next timing
        # Started ahead (options.start_ahead): every pair's workers while correctness ran (``start_early``), idle and
        # with no candidate code until set up here, pair by pair. Where that did not happen: the first pair's two
        # processes together, then, once the first pair is timed and its workers asked to exit, every later pair's
        # workers together, started while those exit and set up, like the early ones, only when their pair is due: a
        # later pair's candidate with its code loaded would sit unstopped beside an earlier pair's timing, its clean
        # command included.
        ahead: list[dict[str, Worker]] = [{} for _ in range(n_pairs)]
        timing = (cached, seed, share, deadline, samples, warmups, flags, wall)
        beside = place is not None and (ctx.device == "cpu" or devmem.available())
        with place or ungated() as alone:
            try:
                with ctx.clock("performance", "start_ahead"):  # started while correctness ran: the wait, if any
                    early = ctx.take_early_workers()  # one per pair (timing_pairs)
                # an earlier pair's retired workers (long gone after this pair's correctness, unless one ignored the
                # request) are gone before any worker of this stage takes its memory baseline
                launch.wait_retired()
                if early is not None:
                    ahead = early
                elif options.start_ahead:
                    ahead[:1] = self._start_ahead(range(1), deadline, set_up=False)
                # the first pair's workers still to be set up (and measured) by ``_pair``, with the device alone
                first_set_up = not (beside and self._measure_first(ahead[0], memory_peaks, exiting, deadline))
                with alone():
                    # the GPU's clocks (an nvidia-smi process: a tenth of a second or more) read as the stage goes on
                    clocks_start = _READER.submit(envinfo.gpu_clocks, ctx.gpu) if ctx.device == "cuda" else None
                    for pair_index in range(n_pairs):
                        # Memory once, in the first pair (unless measured above), each worker measured while the
                        # other is idle or not yet set up, and while every later pair's worker is idle with no
                        # candidate code (or does not exist yet): device memory in use is counted for the whole GPU,
                        # from a baseline each worker takes at its setup (on the H200 a candidate set up beside a
                        # measured reference counted the reference's as its own).
                        set_up = first_set_up if pair_index == 0 else True
                        self._pair(pair_index, ahead[pair_index], set_up, memory_peaks, exiting, timing)
                        if self.truncated:
                            break
                        if pair_index == 0 and options.start_ahead and n_pairs > 1 and early is None:
                            ahead[1:] = self._start_ahead(range(1, n_pairs), deadline, set_up=False)
                    if n_pairs == 1 and not self.truncated and any(
                            v["flagged"] for v in self._untimed_found(samples).values()):
                        # One process pair said untimed_work: it counts only if a second, fresh pair says it too
                        # (processes of identical code differ; the rule then judges every round of both pairs).
                        # Where the second pair clears it, the first pair's times are dropped: a candidate that
                        # behaves only once it has been seen gains nothing from the pair it was seen in.
                        # A cached reference ran one short command, a fresh process's first, which every
                        # candidate command was read against: there the cache is set aside and the fresh pair
                        # times the reference in full, and its rounds alone decide (``_untimed_found``).
                        in_full = self._untimed_reference_in_full(cached)
                        self.confirming = True  # its burst replaces the first pair's (whose times may be dropped)
                        self._pair(n_pairs, {}, True, memory_peaks, exiting, timing)
                        confirmed = any(v["flagged"] for v in self._untimed_found(samples).values())
                        if not confirmed:  # a cached reference's one short re-measure (pair 0) stays where the
                            # cache does: only the first pair ever times it, and its drift is recorded
                            self._drop_pair_times(samples, [0], ("candidate",) if cached else roles)
                        draft.timing_ms["untimed_confirmation_pair"] = {"confirmed": confirmed,
                                                                        "first_pair_times_dropped": not confirmed}
                        if in_full:
                            draft.timing_ms["untimed_confirmation_pair"]["reference_in_full"] = True
                    aside = draft.timing_ms.get("reference_cache_set_aside")
                    if n_pairs == 1 and not self.truncated and not self.confirming and aside:
                        self._second_pair_after_set_aside(aside, samples, memory_peaks, exiting, timing)
                    self._excuse_moved_together()
                    if self._clean_flagged() or self._after_flagged():
                        self._confirm_reference_slowed(samples, memory_peaks, exiting, timing)
                    clocks_end = _READER.submit(envinfo.gpu_clocks, ctx.gpu) if ctx.device == "cuda" else None
            except WorkerFailure as failure:
                error = failure_dict("performance", failure)
                kbvs = out_of_memory_is_kbvs(  # on the H100 (80 GB) 6 GiB outputs did (h100-2026-12-05)
                    error, self.draft.memory_bytes, self.ctx.device,
                    "the timing stage ran out of device memory with both roles' workers and their kept outputs; in "
                    "the correctness stage the candidate's processes held no more than the reference's")
                if kbvs is not None:
                    error |= {"kind": "harness", "out_of_memory": kbvs}
                self.ev.fail(Failure("performance", "harness" if kbvs else "candidate", failure.kind, error))
                return
            finally:
                for workers in ahead:  # started ahead and never timed (a failure, or a truncated candidate)
                    for worker in workers.values():
                        self.ctx.collect(worker)
                        worker.close(wait=False)
                        exiting.append(worker)
                # the last pair's workers exit while whatever comes next runs (the next pair's correctness): waited
                # for before any timing starts (asked here, inside the place) and before the run returns, not on
                # this pair's clock
                launch.retire(exiting)
        self.ev.timing_truncated = self.truncated
        self._judge_aliases()
        self._judge_untimed(samples)
        self._record_reference_after_candidate()
        self._judge_reference_clean()  # before the cache: a slowed reference's times are never cached
        speedups: dict[str, Any] = {}
        for baseline in ("standard", "verified"):
            if baseline not in baselines:
                draft.timing_ms[f"candidate_{baseline}"] = draft.timing_ms[f"reference_{baseline}"] = None
                speedups[baseline] = None
                continue
            cand_groups = [g for g in samples["candidate"][baseline] if g]
            ref_groups = [g for g in samples["reference"][baseline] if g]
            draft.timing_ms[f"candidate_{baseline}"] = timing_summary(cand_groups) | {
                "warmup": warmups["candidate"][baseline], "truncated": self.truncated}
            ref_summary = timing_summary(ref_groups) | {"warmup": warmups["reference"][baseline], "cached": False}
            too_slow = (draft.timing_ms.get("reference_cache_too_slow") or {}).get(baseline)
            if too_slow:  # set aside after its re-measure: the reference was timed in full in this pair
                ref_summary["cache_too_slow"] = too_slow
            if cached:
                remeasured, stored = ref_summary["median"], cached[baseline]["summary"]
                drift = remeasured / stored["median"] - 1.0 if remeasured is not None and stored["median"] else None
                ref_summary = dict(stored) | {"cached": True, "remeasure_median": remeasured, "drift": drift}
                ref_groups = [cached[baseline]["times_ms"]] * len(cand_groups)
                self.ev.see("reference_timing_cached")
            elif options.reuse_reference_timing and not self.truncated and "reference_slowed" not in self.ev.observed \
                    and not any((found.get(baseline) or {}).get(key) for found in self.reference_clean
                                for key in ("substituted", "excused")):
                # a capped reference (_cap_at_clean_times) is never cached: its times are scaled, not timed; nor one
                # with an excused finding (_excuse_moved_together): read slow beside the candidate, the next
                # candidates would be read against it
                pooled = [t for g in ref_groups for t in g]
                self._cache().put(self._cache_key(baseline), {"times_ms": pooled, "summary": ref_summary})
            draft.timing_ms[f"reference_{baseline}"] = ref_summary
            if self.truncated:
                fastest = min(t for g in cand_groups for t in g)
                speedups[baseline] = {"value": ref_summary["median"] / fastest if fastest > 0 else None,
                                      "ci_low": None, "ci_high": None, "confidence": None, "pairs": len(cand_groups),
                                      "bound": "upper"}
            else:
                speedups[baseline] = stats.speedup_over_pairs(ref_groups, cand_groups, seed=seed % 2**32)
        draft.timing_ms["gpu_clocks"] = ({"start": clocks_start.result(), "end": clocks_end.result()}
                                         if clocks_start and clocks_end else None)
        draft.timing_ms["input_distributions"] = {name: TIMED_DISTRIBUTION_WEIGHTS[name] for name in self.names}
        draft.speedup = speedups
        self._judge_burst(speedups)
        above = {b: s["value"] for b, s in speedups.items()
                 if s and s.get("value") and s["value"] > options.speedup_bound}
        if above:
            self.ev.see("speedup_above_bound")
            draft.integrity["speedup_above_bound"] = {"bound": options.speedup_bound, **above}
        draft.env["baseline_flags"] = flags
        cand_peak = memory_peaks["candidate"].get("peak_bytes")
        ref_peak = memory_peaks["reference"].get("peak_bytes")
        draft.memory_bytes = {**draft.memory_bytes,  # the correctness stage's own figure stays
                              "candidate_peak": cand_peak, "reference_peak": ref_peak,
                              "method": memory_peaks["candidate"].get("method"),
                              "candidate_device_in_use": memory_peaks["candidate"].get("device_in_use_delta"),
                              "reference_device_in_use": memory_peaks["reference"].get("device_in_use_delta"),
                              "process_device": {role: memory_peaks[role].get("process_device_bytes")
                                                 for role in ("reference", "candidate")}
                              if ctx.device != "cpu" else None,
                              "process_device_entries": {role: memory_peaks[role].get("process_device_entries")
                                                         for role in ("reference", "candidate")}
                              if ctx.device != "cpu" else None}
        draft.timing_ms["wall_per_call"] = {role: totals[0] / totals[1] for role, totals in wall.items() if totals[1]}
        draft.timing_ms["forward_calls"] = {role: totals[1] for role, totals in wall.items()}  # estimate, warm-up, timed
        if cand_peak is not None and ref_peak is not None and cand_peak > ref_peak + MEMORY_SLACK_BYTES[ctx.device]:
            self.ev.see("memory_above_reference")
        # device memory held: the driver's figure per process where both roles have one (read by the parent, and no
        # other process's memory in it), else each worker's own rise of the GPU's memory in use since its setup
        process = draft.memory_bytes["process_device"] or {}
        if process.get("candidate") and process.get("reference"):
            cand_held, ref_held = process["candidate"], process["reference"]
            draft.memory_bytes["held_compared"] = "process_device"
        else:
            cand_held, ref_held = draft.memory_bytes["candidate_device_in_use"], draft.memory_bytes["reference_device_in_use"]
            draft.memory_bytes["held_compared"] = "device_in_use" if ctx.device != "cpu" else None
        if cand_held is not None and ref_held is not None and cand_held > ref_held + max(
                DEVICE_IN_USE_SLACK_BYTES, DEVICE_IN_USE_SLACK_REL * max(ref_held, 0)):
            self.ev.see("memory_above_reference")
        self._judge_stage_memory()
        self._judge_call_memory()
        self._judge_idle_cpu()
        self._record_idle_gpu()
        self._judge_recorded()

    def _judge_recorded(self) -> None:
        """What every recorded forward launched (``kbv.eval.timed_record``): the record's
        ``fallback.timed_calls``, and a fallback flag the profiled call did not have."""
        if self.recorded is None:
            return
        record, added = self.recorded.judge(self.ctx.own_roots, self.ctx.device, self.ev.observed)
        self.draft.fallback = {**(self.draft.fallback or {}), "timed_calls": record}
        self.ev.see(*added)

    def _time_pair(self, reference: Worker, candidate: Worker, pair_index: int, cached: dict[str, Any], seed: int,
                   share: float, deadline: float, samples: Samples, warmups: dict[str, dict[str, int]],
                   flags: dict[str, Any], wall: dict[str, list[float]]) -> None:
        """One process pair: reference and candidate alternate in ABBA rounds, each timing command with a fresh key
        for its inputs; then the judged timed calls, drawn by the parent among every call the candidate kept. The
        evaluator's own clock runs around every timing call (``wall``: [ms, calls, reported ms] per role); the
        candidate is timed once with few trials when it is far slower than the reference (``kbv.worker.timer``)."""
        baselines = self.baselines
        workers = {"reference": reference, "candidate": candidate}
        roles = ("reference", "candidate")
        if not self.ctx.own_roots:  # the profiled call did not run (a failed distribution): its folders from here
            self.ctx.own_roots = workspace.own_roots(candidate.spec)
        kept: list[tuple[int, str, int, Pacer]] = []  # (round, baseline, index, its command) of every kept call
        estimates: dict[str, dict[str, float]] = {role: {} for role in roles}  # per role and baseline, the median
        # per call of its worker's last command: sent with the next (``estimate_ms``), which then makes no estimate
        # calls (``ESTIMATE_CALLS``)
        ref_call_ms: dict[str, float] = {}  # the reference's median per call in this pair, per baseline
        lender = self.lender
        if lender is not None:  # both roles' slots; the fills run inside each role's timing commands, on its clock
            fill_call = self._direct(lender, deadline)
            loans = open_loans(fill_call, lambda m: self._call(lender, "reference", m, deadline),
                               {role: partial(self._call, workers[role], role, deadline=deadline) for role in roles},
                               predraw=self._predraw())
        else:
            loans = {role: TimedLoan(role, _no_lender, _no_lender, reason=self.lend_reason) for role in roles}
        self.pair_reference = {b: [] for b in baselines}
        self.pair_reference_allocs = {b: [] for b in baselines}
        self.pair_loans = loans  # the reference's slot serves its clean command too (``_clean_reference``)
        try:
            for role in roles:
                for b in baselines:
                    samples[role][b].append([])
                if self.ctx.device == "cpu":  # the baseline before any call (see CorrectnessStage._distributions)
                    self.ctx.watch(workers[role], "before the first timed call")
            self.pair_groups[pair_index] = {(role, b): samples[role][b][-1] for role in roles for b in baselines}
            previous: str | None = None  # the role of the pair's last timing command (None before the first)
            remeasures: list[dict[str, Any]] = []  # a cached reference's short re-measures, each one's finding
            for round_index in range(TIMING_ROUNDS):
                order = list(roles if round_index % 2 == 0 else roles[::-1])
                while order:
                    role = order.pop(0)
                    loan = loans[role]
                    lent = loan.lent  # its timed inputs from the lender's slot
                    pacer = self._pacer(round_index, loan.filler(round_index) if lent else None)
                    msg: dict[str, Any] = {"cmd": "time", "baselines": baselines, "share": share,
                                           "round": round_index}
                    msg["ring_bytes"] = self.ring_bytes  # both roles keep every output: the same work and memory
                    msg["record"] = self.recorded is not None  # both roles alike: the same work around each call
                    msg["release_cached"] = self.release_cached  # both roles alike, as the clean command's
                    if estimates[role]:
                        msg["estimate_ms"] = dict(estimates[role])
                    remeasure = role == "reference" and bool(cached)
                    if remeasure:
                        if round_index or pair_index:
                            continue  # cached: the short re-measures only
                        msg |= {"share": 1.0, "max_trials": REFERENCE_REMEASURE_TRIALS}
                    if role == "candidate" and ref_call_ms and self.truncation_offered:
                        msg["slow_ms"] = {b: TIMING_TRUNCATE_FACTOR * ms for b, ms in ref_call_ms.items()}
                    measure = pair_index == 0
                    if measure and self.ctx.device == "cpu" and role not in self.stage_memory["start"]:
                        self.stage_memory["start"][role] = observe.peak_start(workers[role].pid)
                    if measure:
                        pacer.around = self._call_memory(role)
                    other = roles[1] if role == roles[0] else roles[0]
                    t_loop = time.monotonic()
                    idle_from = observe.cpu_ns(workers[other].pid)  # the other role's worker, idle meanwhile
                    busy_from = time.time()
                    # and stopped, where freeze_idle: none of its threads can launch or spin beside this timing
                    with freeze.stopped(workers[other].pid if self.options.freeze_idle else None):
                        with self._parent_part("clocks"):
                            clock = self._clock()
                        t0 = time.monotonic()
                        reply = self._call(workers[role], role, msg, deadline, pacer)
                        elapsed_ms = (time.monotonic() - t0) * 1e3
                    with self._parent_part("clocks"):
                        self._note_clock(pair_index, round_index, role, clock, reply)
                    idle_to = observe.cpu_ns(workers[other].pid)
                    if idle_from is not None and idle_to is not None:
                        self.idle_cpu[other][0] += (idle_to - idle_from) / 1e6
                        self.idle_cpu[other][1] += elapsed_ms
                    if self.ctx.device != "cpu":
                        with self._parent_part("idle_gpu"):
                            self._note_idle_gpu(other, workers[other].pid, busy_from, elapsed_ms)
                    if pacer.fill_error is not None:  # the lender failed while filling the slot
                        raise pacer.fill_error
                    if lent:
                        loan.close_command()
                    if measure:
                        self._note_stage_memory(role, workers[role].pid, reply, pacer)
                    if role == "reference" and (self.ctx.device != "cpu" or self.judge_each_command):  # it kept its
                        # outputs while timed (the same work as the candidate), never judged: on a GPU freed at once
                        # (device memory for two roles' rings); on the CPU kept until the pair ends, as the candidate
                        # keeps its own, so both processes hold alike (the whole-stage memory rule,
                        # _judge_stage_memory), unless the candidate's are judged and dropped after each command
                        with self._parent_part("drop"):
                            self._call(reference, role, {"cmd": "drop"}, deadline)
                    with self._parent_part("watch"):
                        self.ctx.watch(workers[role], f"timing round {round_index}")
                    self._note_parent(elapsed_ms, (time.monotonic() - t_loop) * 1e3, reply)
                    flags[role] = reply["flags"]
                    calls, reported = 0, 0.0
                    for b in baselines:
                        timing = reply["timing"][b]
                        times = [as_float(t) for t in timing["times_ms"]]
                        samples[role][b][-1].extend(times)
                        peaks = timing.get("peak_bytes")  # CUDA: every timed call's own peak allocation
                        if self.ctx.device != "cpu" and isinstance(peaks, list):
                            self.call_memory[role].extend(int(p) for p in peaks if isinstance(p, int))
                        if role == "reference" and times and previous is not None and not remeasure:  # (the
                            # first: neither; a short re-measure is no full command to compare)
                            self.reference_rounds.setdefault(pair_index, {}).setdefault(
                                b, {"after": [], "other": []})[
                                "after" if previous == "candidate" else "other"].append(statistics.median(times))
                        warmups[role].setdefault(b, timing["warmup"])
                        self.draft.timing_ms["flush_bytes"] = timing["flush_bytes"]
                        calls += (0 if b in msg.get("estimate_ms", {}) else ESTIMATE_CALLS) + int(timing["warmup"]) \
                            + len(times)
                        if times:
                            estimates[role][b] = statistics.median(times)
                        reported += sum(times)
                        # both roles' inputs lent, or neither's: the same work falls in both roles' windows
                        self.untimed[role].setdefault(b, []).append(untimed_ms(pacer.windows.get(b, {}), times))
                        self._note_split(role, timing.get("split_ms"))
                        if isinstance(timing.get("profile"), dict):  # KBV_PROFILE_TIMING=1: the first command's
                            self.draft.timing_ms.setdefault("worker_profile", {}).setdefault(role, {}).setdefault(
                                b, timing["profile"])
                        self._note_aliases(role, ((reply.get("ring") or {}).get(b) or {}).get("aliased_outputs"))
                        if role == "reference":
                            if times:
                                ref_call_ms[b] = statistics.median(samples[role][b][-1])
                                self.pair_reference[b].append(statistics.median(times))
                                self.pair_reference_allocs[b].append(timing.get("allocator"))
                            continue  # the reference's kept outputs were dropped after its command
                        if timing.get("truncated"):
                            self._take_truncation(b, times, (msg.get("slow_ms") or {}).get(b), round_index,
                                                  pair_index)
                        ring = (reply.get("ring") or {}).get(b) or {}
                        n_kept = int(ring.get("kept", 0))
                        # the kept calls are the timed ones: input sets FIRST_TIMED_CALL onwards
                        kept.extend((round_index, b, FIRST_TIMED_CALL + i, pacer) for i in range(n_kept))
                        if ring.get("changed_after_return"):
                            self.ev.see("deferred_output")
                            self.draft.integrity.setdefault("deferred_output", []).append(
                                {"round": round_index, "baseline": b, "outputs": ring["changed_after_return"]})
                    if role == "candidate" and self.judge_each_command and kept:
                        # outputs too large for the pair's ring (a command keeps one): every command's kept call is
                        # judged once the command has ended, and dropped. Not a draw among commands: once a pair's
                        # judged call had been drawn the worker would know every later command goes unjudged
                        judged = min(len(kept), judged_calls(self.ctx.output_bytes))
                        self._judge_timed_outputs(reference, candidate, kept, deadline)
                        each = self.draft.timing_ms.setdefault("judged_each_command", {"commands": 0, "judged": 0})
                        each["commands"] += 1
                        each["judged"] += judged
                        kept = []
                    if remeasure:
                        measured = {b: [as_float(t) for t in reply["timing"][b]["times_ms"]] for b in baselines}
                        if self._set_aside_if_too_slow(cached, measured):
                            if remeasures:  # a slower first re-measure, then one below the cache
                                self.draft.timing_ms["reference_remeasures"] = {"slower": remeasures,
                                                                                "kept_cache": False}
                        else:
                            remeasures.append(self._remeasure_slower(cached, measured))
                            if remeasures[-1] and len(remeasures) < REFERENCE_REMEASURE_COMMANDS:
                                order.insert(0, "reference")  # another short re-measure at once, the same process
                            else:
                                self._set_aside_if_slower(cached, remeasures)
                    totals = wall.setdefault(role, [0.0, 0, 0.0])
                    totals[0] += elapsed_ms
                    totals[1] += calls
                    totals[2] += reported
                    if reported > elapsed_ms:
                        self.ev.see("timer_inconsistent")
                        self.draft.integrity.setdefault("timer_inconsistent", []).append(
                            {"role": role, "reported_ms": reported, "wall_ms": elapsed_ms})
                    previous = role
                if self.truncated:
                    break
            self._note_loans(loans)
            self._judge_timed_outputs(reference, candidate, kept, deadline)
            if (pair_index == 0 or self.confirming) and not self.truncated:
                self._burst_check(reference, candidate, samples, deadline, pair_index)
            if self.recorded is not None:  # each worker's one session, stopped after every command of the pair: the
                # reference's after its clean commands where they follow (``_clean_reference``), recorded as its others
                clean_follows = self.clean and not cached
                for role in ("candidate",) if clean_follows else roles:
                    self._collect_recorded(workers[role], role, deadline)
        finally:
            self.ctx.collect(reference)
            self.ctx.collect(candidate)

    def _take_truncation(self, baseline: str, times: list[float], slow_ms: float | None, round_index: int,
                         pair_index: int) -> None:
        """The candidate's worker says it cut its trials, far slower than the reference. That ends the stage early
        and skips its many-call checks, so it counts (``truncated``) only where every reported trial took at least
        ``TIMING_TRUNCATE_CONFIRM`` of the slow bound this command was sent; otherwise it is refused
        (``timing_ms.truncation_refused``) and no later command is offered the cut: the candidate's word may add a
        flag, never skip a check."""
        if slow_ms is not None and times and min(times) >= TIMING_TRUNCATE_CONFIRM * slow_ms:
            self.truncated = True
            return
        self.truncation_offered = False
        self.draft.timing_ms.setdefault("truncation_refused", []).append(
            {"pair": pair_index, "round": round_index, "baseline": baseline, "slow_ms": slow_ms,
             "fastest_ms": round(min(times), 5) if times else None, "trials": len(times)})

    def _pacer(self, round_index: int, fill: Any) -> Pacer:
        """A timing command's pacer: its key stays here, each call's seed handed over when the call is due, its
        inputs filled by the lender where ``fill`` is given (``TimedLoan.filler``)."""
        return Pacer(secrets.randbits(63), self.names, tuple(self.baselines), round_index,
                     FIRST_TIMED_CALL + TIMING_RULES[self.ctx.device].max_trials + 1, fill=fill)

    def _remeasure_slower(self, cached: dict[str, Any], times: dict[str, list[float]]) -> dict[str, Any]:
        """One short re-measure of a cached reference (``times`` per baseline): the baselines where its median is
        more than ``REFERENCE_DRIFT_MAX`` slower than the cached median and at least ``REFERENCE_SHIFTED_SHARE`` of
        its trials are slower than nine in ten of the cached trials, with what it read (empty: it agrees). Ten
        trials of a microsecond kernel run a fifth slow by their median alone as a matter of course (2 of 6
        re-measures of the CPU's ReLU), most of them not past the cached trials' tail."""
        slower = {}
        for baseline, entry in cached.items():
            stored = (entry.get("summary") or {}).get("median")
            cached_times = [float(t) for t in entry.get("times_ms") or []]
            measured = times.get(baseline) or []
            if not (measured and stored and len(cached_times) > 1):
                continue
            remeasured = statistics.median(measured)
            tail = statistics.quantiles(cached_times, n=10, method="inclusive")[-1]
            shifted = sum(t > tail for t in measured) / len(measured)
            if remeasured / stored - 1.0 > REFERENCE_DRIFT_MAX and shifted >= REFERENCE_SHIFTED_SHARE:
                slower[baseline] = {"median": stored, "remeasure_median": remeasured,
                                    "drift": round(remeasured / stored - 1.0, 4),
                                    "above_cached_p90": round(shifted, 3)}
        return slower

    def _set_aside_if_too_slow(self, cached: dict[str, Any], measured: dict[str, list[float]]) -> bool:
        """After a cached reference's short re-measure (``measured``: its times per baseline): where its median is
        more than ``REFERENCE_CACHE_SLOW_MAX`` below a cached median, the cache was measured in a slow process and
        would inflate this candidate's speedup and every later one's. It is set aside at once (``cached`` emptied)
        and its entries that read too slow dropped; the reference runs its remaining rounds in full beside the
        candidate, as where nothing was cached, and the cache takes that figure. No second pair: the pair's own
        rounds are the measurement where nothing is cached too. Recorded as ``timing_ms.reference_cache_too_slow``
        (per baseline: the cached median, the re-measure's, the drift). Whether it set the cache aside."""
        found = {}
        for baseline, entry in cached.items():
            stored = (entry.get("summary") or {}).get("median")
            times = measured.get(baseline) or []
            if not (times and stored):
                continue
            remeasured = statistics.median(times)
            if remeasured / stored - 1.0 < -REFERENCE_CACHE_SLOW_MAX:
                found[baseline] = {"median": stored, "remeasure_median": remeasured,
                                   "drift": round(remeasured / stored - 1.0, 4)}
        if not found:
            return False
        self.draft.timing_ms["reference_cache_too_slow"] = found
        for baseline in found:
            self._cache().drop(self._cache_key(baseline))
        cached.clear()
        return True

    def _set_aside_if_slower(self, cached: dict[str, Any], remeasures: list[dict[str, Any]]) -> None:
        """After a cached reference's short re-measures (the first pair's first reference commands, each one's
        ``_remeasure_slower``): where the last one found any baseline slower, this machine no longer gives the
        cached time (on the H100 a cached 0.204 ms beside a re-measure of 0.298 ms and a candidate of identical code
        at 0.290 ms gave 0.70: docs/results/h100-2026-12-05-b). A second re-measure follows a slow first one at once
        (``REFERENCE_REMEASURE_COMMANDS``): a reference process's first command often reads slow where its next
        does not. The cache is then set aside for this evaluation (``cached`` emptied): the reference runs its
        remaining rounds in full beside the candidate, as where nothing was cached, and the cache takes the new
        figure. Recorded as ``timing_ms.reference_cache_set_aside`` (per baseline, the last re-measure's finding),
        and where more than one ran, each one's findings as ``timing_ms.reference_remeasures``. The re-measures
        alone are never the reference's time."""
        if len(remeasures) > 1:
            self.draft.timing_ms["reference_remeasures"] = {"slower": remeasures, "kept_cache": not remeasures[-1]}
        if remeasures and remeasures[-1]:
            self.draft.timing_ms["reference_cache_set_aside"] = remeasures[-1]
            cached.clear()

    def _second_pair_after_set_aside(self, aside: dict[str, Any], samples: Samples, memory_peaks: dict[str, Any],
                                     exiting: list[Worker], timing: tuple[Any, ...]) -> None:
        """With one timing pair, a cached reference time set aside (``_set_aside_if_slower``) leaves two readings that
        disagree: the cache and one reference process. A second, fresh pair times both roles in full. Where its
        reference agrees with the cached median (within ``REFERENCE_DRIFT_MAX``), the first pair's reference process
        was the slow one, and the first pair's times of both roles are dropped; otherwise the machine changed, and
        both pairs count. Recorded in ``timing_ms.reference_cache_second_pair`` (beside the set-aside, whose keys are
        baselines). On the H100 a reference
        process timed in full after a set-aside still ran slow throughout: 0.127 ms against the candidate's 0.090,
        identical code, the cache 0.078 (self-speedup 1.41, docs/results/h100-2026-12-05-c)."""
        self.confirming = True  # its burst replaces the first pair's (whose times may be dropped)
        self._pair(1, {}, True, memory_peaks, exiting, timing)
        second = {b: statistics.median(samples["reference"][b][-1]) for b in aside
                  if b in samples["reference"] and len(samples["reference"][b]) > 1 and samples["reference"][b][-1]}
        agrees = bool(second) and all(abs(second[b] / aside[b]["median"] - 1.0) <= REFERENCE_DRIFT_MAX
                                      for b in second)
        if agrees:
            self._drop_pair_times(samples, [0])
        self.draft.timing_ms["reference_cache_second_pair"] = {
            "reference_median": {b: round(m, 6) for b, m in second.items()}, "agrees_with_cache": agrees,
            "first_pair_times_dropped": agrees}

    def _direct(self, worker: Worker, deadline: float) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """Commands to the reference's worker with no clock of their own (made inside another command's)."""
        def call(msg: dict[str, Any]) -> dict[str, Any]:
            try:
                return worker.call(msg, deadline, spin=True)
            except WorkerFailure as failure:
                raise ReferenceFailed(failure, "performance") from None
        return call

    def _note_loans(self, loans: dict[str, TimedLoan]) -> None:
        """What one process pair's lent timed inputs showed: the flags the lender's read-backs of the candidate's slot
        found, and in the record (``timing_ms.lent_inputs``) how many timed calls were lent, per pair and role
        (``calls`` the candidate's, ``reference_calls``), or why none were."""
        loan = loans["candidate"]
        self.ev.see(*loan.seen)
        record = self.draft.timing_ms.setdefault("lent_inputs", {"calls": [], "reference_calls": [], "not_lent": None,
                                                                 "reference_wrote": []})
        record["calls"].append(loan.calls)
        record["reference_calls"].append(loans["reference"].calls)
        record["reference_wrote"] = sorted(set(record["reference_wrote"]) | loans["reference"].wrote)
        if loan.reason and record["not_lent"] is None:
            record["not_lent"] = loan.reason
        if loan.findings:
            found = self.draft.correctness.setdefault("input_use", {}).setdefault("timed_lent", [])
            found.extend(loan.findings[:max(0, LENT_CHECKS_KEPT - len(found))])

    def _note_stage_memory(self, role: str, pid: int | None, reply: dict[str, Any], pacer: Pacer) -> None:
        """After one of the first pair's timing commands: on the CPU the role's resident-set rise since before its
        first (``observe.peak_since``: a high-water mark, so every call of every command counts), on a GPU the most
        device memory the driver has said its processes hold after any of them (NVML); the timed calls whose inputs
        it was handed and whose outputs it committed (the parent's count: a call it did not keep fails the judged
        one), and from the reference the bytes of one call's outputs."""
        memory = self.stage_memory
        if self.ctx.device == "cpu":
            start = memory["start"].get(role)
            rise = observe.peak_since(start)
            folded = memory["folded"].get(role)  # the high-water marks the per-call measure's resets cut short
            if rise is not None and start is not None and folded is not None:
                rise = max(rise, folded - start[1])
            memory["rise"][role] = rise
        else:
            listed = devmem.entries(observe.tree(pid)) if pid is not None else None
            if listed:
                memory["rise"][role] = max(memory["rise"].get(role) or 0, sum(used for _, used in listed))
        memory["kept_calls"][role].append(sum(len(pacer.windows.get(b, {})) for b in self.baselines))
        if role == "reference" and memory["output_bytes"] is None:
            for ring in (reply.get("ring") or {}).values():
                if isinstance(ring, dict) and ring.get("kept") and isinstance(ring.get("kept_bytes"), int):
                    memory["output_bytes"] = ring["kept_bytes"] // int(ring["kept"])
                    break

    def _call_memory(self, role: str) -> Callable[[bool], None] | None:
        """CPU, first pair: the parent's look around each timed call (``Pacer.around``): just before the call's
        inputs are handed over it resets the worker's high-water mark (folding the one so far into the whole stage's
        measure) and once its output is committed reads the rise, so every timed call of both roles is measured
        alike and none is told apart (the memory command's one call can be: ``memory_call_detect``)."""
        memory = self.stage_memory
        if self.ctx.device != "cpu" or memory["start"].get(role) is None:
            return None
        opened: list[tuple[int, int] | None] = [None]

        def around(opening: bool) -> None:
            if opening:
                fresh, high = observe.peak_restart(memory["start"][role])
                if high is not None:
                    memory["folded"][role] = max(memory["folded"].get(role, 0), high)
                opened[0] = fresh
            elif opened[0] is not None:
                rise = observe.peak_since(opened[0])
                if rise is not None:
                    self.call_memory[role].append(rise)
                opened[0] = None
        return around

    def _judge_idle_cpu(self) -> None:
        """Work while idle: a timing worker has no command while the other role's timing command runs, so its process
        tree should use no CPU then. The candidate's worker using more than the reference's did while idle (the
        parent's reading of both trees' CPU clocks), by more than ``IDLE_CPU_SLACK_MS`` or ``IDLE_CPU_SLACK_REL`` of
        the time it was idle, is ``idle_work``: a thread or process that runs beside the reference's timing (it may
        slow it: a shared CPU, launches onto a shared GPU) or does work outside every timed call's window, whatever
        started it and however the candidate's process reports it. Recorded as ``timing_ms.idle_cpu``."""
        idle = self.idle_cpu
        if not (idle["candidate"][1] and idle["reference"][1]):
            return
        cpu = {role: round(idle[role][0], 3) for role in idle}
        wall = {role: round(idle[role][1], 3) for role in idle}
        allowed = cpu["reference"] + max(IDLE_CPU_SLACK_MS, IDLE_CPU_SLACK_REL * wall["candidate"])
        flagged = cpu["candidate"] > allowed
        self.draft.timing_ms["idle_cpu"] = {"cpu_ms": cpu, "idle_ms": wall, "allowed_ms": round(allowed, 3),
                                            "flagged": flagged}
        if flagged:
            self.ev.see("idle_work")

    def _note_idle_gpu(self, role: str, pid: int | None, since: float, elapsed_ms: float) -> None:
        """After one of the other role's timing commands (``elapsed_ms`` long, begun at ``since``): the driver's
        utilisation samples of ``role``'s worker tree since then (``kbv.sandbox.devbusy``), added to the role's
        count and highest SM share; each sample that saw SM use kept (up to ``IDLE_GPU_KEPT_SAMPLES``) as
        [ms after ``since``, SM percent, the command's ms], to tell a sample that covers the worker's own previous
        command (the driver's period is about a sixth of a second) from one wholly inside its idle time."""
        if self.idle_gpu is None or pid is None:
            return
        found = devbusy.samples(observe.tree(pid), since)
        if found is None:
            self.idle_gpu = None
            return
        figures = self.idle_gpu[role]
        for _, offset, sm in found:
            figures["samples"] += 1
            figures["max_sm"] = max(figures["max_sm"], sm)
            figures["busy_count"] += sm > 0
            if sm > 0 and len(figures["busy"]) < IDLE_GPU_KEPT_SAMPLES:
                figures["busy"].append([round(offset * 1e3, 1), sm, round(elapsed_ms, 1)])
        figures["commands"] += 1

    def _after_ratios(self, pairs: set[int] | None = None) -> dict[str, Any]:
        """Per baseline, the after/other figures pooled over ``pairs`` (default: every pair timed so far) where both
        groups have a command: ``after_ms``, ``other_ms`` and ``ratio``, the least of the first over the most of
        the second (``_record_reference_after_candidate``)."""
        pooled: dict[str, dict[str, list[float]]] = {}
        for pair, rounds in sorted(self.reference_rounds.items()):
            if pairs is None or pair in pairs:
                for b, v in rounds.items():
                    group = pooled.setdefault(b, {"after": [], "other": []})
                    group["after"] += v["after"]
                    group["other"] += v["other"]
        return {b: {"after_ms": [round(t, 5) for t in v["after"]], "other_ms": [round(t, 5) for t in v["other"]],
                    "ratio": round(min(v["after"]) / max(v["other"]), 4) if max(v["other"]) > 0 else None}
                for b, v in pooled.items() if v["after"] and v["other"]}

    def _after_flagged(self, pairs: set[int] | None = None) -> bool:
        """On a GPU, whether the after/other ratio over ``pairs`` is above ``REFERENCE_AFTER_CANDIDATE_MAX`` under
        any baseline."""
        return self.ctx.device != "cpu" and any(v["ratio"] is not None and v["ratio"] > REFERENCE_AFTER_CANDIDATE_MAX
                                                for v in self._after_ratios(pairs).values())

    def _record_reference_after_candidate(self) -> None:
        """``timing_ms.reference_after_candidate``: per baseline, the medians of the reference's timing commands that
        came right after one of the candidate's (``after_ms``: in ABBA rounds the second and fourth) and of the
        others (``other_ms``: the third; the first of each pair counts in neither, as it follows the candidate's
        setup and memory command, where work could be queued too, yet it is no timing command of the candidate's),
        and ``ratio``, the least of the first over the most of the second, pooled over the pairs. Device work the
        candidate's worker left queued when it replied runs beside the reference's next timed calls and slows them,
        uses no CPU (``idle_work`` does not see it) and is too short for the driver's samples (``idle_gpu``): on a
        GPU a ratio above ``REFERENCE_AFTER_CANDIDATE_MAX`` for any baseline is ``reference_slowed``, rejected, once
        a fresh pair confirmed it (``_confirm_reference_slowed``; where the fresh pair cleared it, the earlier
        pairs no longer count). The reference's times are the trusted worker's own, so nothing the candidate's
        process reports enters the rule. On the CPU it is recorded only (``flagged`` None)."""
        dropped = set((self.after_confirmation or {}).get("dropped_pairs", ()))
        kept = {pair for pair in self.reference_rounds if pair not in dropped}
        section = self._after_ratios(kept)
        if not section:
            return
        flagged = None
        if self.ctx.device != "cpu":  # confirmed: it stands (pooled with the fresh pair's, the least over the most
            # could read below the bound where each pair is above it)
            flagged = bool((self.after_confirmation or {}).get("confirmed")) or self._after_flagged(kept)
            if flagged:
                self.ev.see("reference_slowed")
        self.draft.timing_ms["reference_after_candidate"] = {**section, "allowed_ratio": REFERENCE_AFTER_CANDIDATE_MAX,
                                                             "flagged": flagged,
                                                             "confirmation": self.after_confirmation}

    def _record_idle_gpu(self) -> None:
        """GPU work while idle (``timing_ms.idle_gpu``): per role, how many of the driver's utilisation samples
        named its worker's processes while the other role was timed, how many of them saw SM use (``busy``), the
        most SM share among them and those samples themselves (``busy_samples``). Kernels a worker queued before its
        last reply, or a thread of it launched afterwards, run beside the other role's timed calls, and its CPU
        clock (``idle_work``) need not show them. Recorded only (``flagged`` stays None): on the H100 a worker that
        loaded the GPU at about half duty while idle was named in no sample, and an honest idle process once was
        (docs/results/h100-2026-12-05); the driver's period is too coarse for a rule."""
        if self.ctx.device == "cpu" or self.idle_gpu is None or not self.idle_gpu["candidate"]["commands"]:
            return
        self.draft.timing_ms["idle_gpu"] = {
            "samples": {r: v["samples"] for r, v in self.idle_gpu.items()},
            "busy": {r: v["busy_count"] for r, v in self.idle_gpu.items()},
            "max_sm_percent": {r: v["max_sm"] for r, v in self.idle_gpu.items()},
            "commands": {r: v["commands"] for r, v in self.idle_gpu.items()},
            "busy_samples": {r: v["busy"] for r, v in self.idle_gpu.items()},
            "flagged": None}

    def _judge_call_memory(self) -> None:
        """The per-call memory rule: the candidate's median peak over a timed call above the reference's is
        ``memory_above_reference`` (a workspace made and freed inside every call but the memory command's, which
        the whole stage's slack does not see). CPU: the parent's reading of each timing worker's resident-set rise
        around every timed call of the first pair (``_call_memory``), above by more than ``MEMORY_SLACK_BYTES`` or
        ``STAGE_MEMORY_SLACK_REL`` of the reference's. GPU: each timed call's caching-allocator peak, which both
        roles' timers report for every timed call (``kbv.worker.timer``), above by more than ``MEMORY_SLACK_BYTES``
        (the memory command's own rule, applied to every timed call: the worker's figure, so it adds the flag and
        never clears one). Recorded as ``memory_bytes.timed_calls``."""
        calls = self.call_memory
        if not (calls["reference"] and calls["candidate"]):
            return
        median = {role: int(statistics.median(calls[role])) for role in calls}
        slack = MEMORY_SLACK_BYTES[self.ctx.device]
        allowed = median["reference"] + (max(slack, STAGE_MEMORY_SLACK_REL * median["reference"])
                                         if self.ctx.device == "cpu" else slack)
        flagged = median["candidate"] > allowed
        self.draft.memory_bytes["timed_calls"] = {"median": median, "max": {r: max(calls[r]) for r in calls},
                                                  "calls": {r: len(calls[r]) for r in calls},
                                                  "allowed": int(allowed), "flagged": flagged,
                                                  "measured_by": "parent" if self.ctx.device == "cpu" else "worker"}
        if flagged:
            self.ev.see("memory_above_reference")

    def _judge_stage_memory(self) -> None:
        """The CPU's whole-stage memory rule (``STAGE_MEMORY_SLACK_*``): each role's rise over its timing commands,
        less the timed outputs it keeps (both roles keep every command's until the pair ends, or one command's where
        they are judged after each: ``judge_each_command``); the candidate's above
        the reference's by more than the slack, and ``STAGE_MEMORY_TRANSIENT_OUTPUTS`` of one call's output bytes
        (the harness's own buffers between calls, peaking together differently in processes of the same code), is
        ``memory_above_reference``. Recorded as
        ``memory_bytes.timing_stage``; on a GPU only recorded (the most the driver said each role held after any
        timing command, and the outputs kept), to be calibrated on the GPU before it decides anything."""
        memory = self.stage_memory
        rise, calls, per_call = memory["rise"], memory["kept_calls"], memory["output_bytes"]
        if per_call is None or any(rise.get(r) is None or not calls[r] for r in ("reference", "candidate")):
            return
        if self.ctx.device != "cpu":  # a diagnostic until calibrated on a GPU: the reference drops its outputs
            # after each command there, the candidate keeps every command's until they are judged
            kept = {"candidate": sum(calls["candidate"]) * per_call, "reference": max(calls["reference"]) * per_call}
            self.draft.memory_bytes["timing_stage"] = {"device_held_max": dict(rise), "kept_outputs": kept,
                                                       "flagged": None}
            return
        # outputs judged and dropped after each command (judge_each_command, both roles): one command's at most
        held_at_once = max if self.judge_each_command else sum
        kept = {role: held_at_once(calls[role]) * per_call for role in ("reference", "candidate")}
        held = {role: rise[role] - kept[role] for role in ("reference", "candidate")}
        allowed = (held["reference"] + max(STAGE_MEMORY_SLACK_BYTES, STAGE_MEMORY_SLACK_REL * max(held["reference"], 0))
                   + STAGE_MEMORY_TRANSIENT_OUTPUTS * per_call)
        flagged = held["candidate"] > allowed
        self.draft.memory_bytes["timing_stage"] = {"rise": dict(rise), "kept_outputs": kept, "compared": held,
                                                   "allowed": int(allowed), "flagged": flagged}
        if flagged:
            self.ev.see("memory_above_reference")

    def _pair(self, pair_index: int, workers: dict[str, Worker], set_up: bool, memory_peaks: dict[str, Any],
              exiting: list[Worker], timing: tuple[Any, ...]) -> None:
        """One process pair: its workers started (unless started ahead: ``workers``) and set up (``set_up``), the
        first pair's measured for memory one at a time (unless ``_measure_first`` did), timed once the previous pair's
        workers have exited (``_time_pair``, which ``timing`` is passed on to after the workers and pair index), then
        asked to exit."""
        deadline = timing[3]
        reference = workers.pop("reference", None) or self._start("reference", deadline)
        try:
            if set_up:
                self._setup(reference, deadline)
            if pair_index == 0 and "reference" not in memory_peaks:  # not measured beside other pairs already
                memory_peaks["reference"] = self._memory(reference, "reference", deadline)
            candidate = workers.pop("candidate", None) or self._start("candidate", deadline)
            try:
                if set_up:
                    self._setup(candidate, deadline)
                if pair_index == 0 and "candidate" not in memory_peaks:
                    memory_peaks["candidate"] = self._memory(candidate, "candidate", deadline)
                # started ahead with the pair, or now; never set up (it needs the problem's inputs only)
                self.lender = (workers.pop("lender", None) or self._start_lender(deadline)) if self.lend else None
                try:
                    self._wait_exited(exiting)  # they exited while this pair started: now it has the GPU alone
                    self._time_pair(reference, candidate, pair_index, *timing)
                    if self.clean and not timing[0]:  # the reference's times count (a truncated pair's too)
                        self._clean_reference(reference, candidate, pair_index, timing[2], deadline)
                finally:
                    self.pair_loans = {}  # the pair's slots, with their lender, end with it
                    if self.lender is not None:
                        self.lender.close(wait=False)
                        exiting.append(self.lender)
                        self.lender = None
            finally:
                candidate.close(wait=False)
                exiting.append(candidate)
        finally:
            reference.close(wait=False)
            exiting.append(reference)

    def _clean_reference(self, reference: Worker, candidate: Worker, pair_index: int, share: float,
                         deadline: float) -> None:
        """The pair's clean command: the candidate's processes killed and waited for (the device work they queued
        ends with their context: stopping them would not have stopped it), then one more timing command of the
        reference, as its others in the pair (its share, its kept outputs dropped after, its inputs lent where the
        pair's were, from the same slot; recorded where they are, so that the recording's cost per call is in both
        readings), with a full warm-up (``full_warmup``: it follows the kill's
        idle gap, where the pair's other later commands follow a busy GPU and warm up briefly). Per baseline, the
        pair's pooled reference median beside the candidate (what its speedup reads) over the clean command's
        median is ``ratio`` (``timing_ms.reference_clean``, judged in ``_judge_reference_clean``). Where any ratio
        is below ``REFERENCE_CLEAN_RETRY_BELOW`` (the clean command read slow), a second clean command follows and the
        faster median counts. Where any ratio is then above ``REFERENCE_CLEAN_MAX`` (a finding, on a GPU), clean
        commands follow until there are ``REFERENCE_CLEAN_POOLED_COMMANDS``, and the finding reads the median of all
        their calls pooled (``clean_from: "pooled"``), as the figure beside the candidate pools its commands: a
        reference whose whole commands run at one of two speeds is read alike on both sides. The clean times enter
        no speedup: they are not interleaved with the candidate's."""
        with self.ctx.clock("performance", "process_exit"):
            candidate.kill()
            candidate.close()
        replies = [self._clean_command(reference, share, TIMING_ROUNDS, deadline, full_warmup=True, pair=pair_index)]
        found = self._clean_found(pair_index, replies)
        if any(v["ratio"] is not None and v["ratio"] < REFERENCE_CLEAN_RETRY_BELOW
               for b, v in found.items() if b != "pair"):  # it read slow: a second reading, the faster counts
            replies.append(self._clean_command(reference, share, TIMING_ROUNDS + 1, deadline, full_warmup=False,
                                               after=replies[-1], pair=pair_index))
            found = self._clean_found(pair_index, replies)
        if self._clean_flagged([found]) and len(replies) < REFERENCE_CLEAN_POOLED_COMMANDS:
            first = {b: v["ratio"] for b, v in found.items() if b != "pair"}
            while len(replies) < REFERENCE_CLEAN_POOLED_COMMANDS:
                replies.append(self._clean_command(reference, share, TIMING_ROUNDS + len(replies), deadline,
                                                   full_warmup=False, after=replies[-1], pair=pair_index))
            found = self._clean_found(pair_index, replies, pooled=True)
            for b, ratio in first.items():
                found[b]["ratio_before_pooling"] = ratio
        self._cap_at_clean_times(pair_index, found)
        self.reference_clean.append(found)
        if self.recorded is not None:
            self._collect_recorded(reference, "reference", deadline)

    def _collect_recorded(self, worker: Worker, role: str, deadline: float) -> None:
        """A worker's recording of every forward of its timing commands, its one session stopped (``cmd_recorded``)."""
        assert self.recorded is not None
        self.recorded.add(role, self._call(worker, role, {"cmd": "recorded"}, deadline).get("recorded"))

    def _cap_at_clean_times(self, pair_index: int, found: dict[str, Any]) -> None:
        """On a GPU, per baseline, a finding (a ratio above ``REFERENCE_CLEAN_MAX``) no larger than
        ``REFERENCE_CLEAN_REJECT_ABOVE``: the pair's reference times beside the candidate are scaled down, in place,
        until their median is ``REFERENCE_CLEAN_MAX`` times the clean commands' (``substituted``, ``scaled_by``), and
        the finding is not judged (``_clean_flagged``): within it an honest launch-bound pair cannot be told from a
        slowed one. A candidate that slowed the reference there gains what one that slowed it a little less, with no
        finding, gains; an honest pair read just above the bound (the machine's drift between the pair and its clean
        commands) loses as little."""
        if self.ctx.device == "cpu":
            return
        groups = self.pair_groups.get(pair_index, {})
        for b, v in found.items():
            if b == "pair" or ("reference", b) not in groups or v["ratio"] is None:
                continue
            if REFERENCE_CLEAN_MAX < v["ratio"] <= REFERENCE_CLEAN_REJECT_ABOVE:
                scale = REFERENCE_CLEAN_MAX / v["ratio"]
                groups[("reference", b)][:] = [t * scale for t in groups[("reference", b)]]
                v["substituted"] = True
                v["scaled_by"] = round(scale, 4)

    def _clean_command(self, reference: Worker, share: float, round_index: int, deadline: float,
                       full_warmup: bool, *, pair: int, after: dict[str, Any] | None = None) -> dict[str, Any]:
        """One clean command of the reference's (``_clean_reference``): its reply, its kept outputs dropped after.
        One ``after`` another clean command is sent that command's medians as its estimates, as the commands beside
        the candidate are sent their previous command's (``_time_pair``)."""
        loan = self.pair_loans.get("reference")  # its filler is None, and close_command nothing, where not lent
        pacer = self._pacer(round_index, loan.filler(round_index) if loan is not None else None)
        msg = {"cmd": "time", "baselines": self.baselines, "share": share, "round": round_index,
               "ring_bytes": self.ring_bytes, "record": self.recorded is not None, "full_warmup": full_warmup,
               "release_cached": self.release_cached}
        if after is not None:
            msg["estimate_ms"] = reply_medians(after)
        clock = self._clock()
        reply = self._call(reference, "reference", msg, deadline, pacer)
        self._note_clock(pair, round_index, "reference", clock, reply)
        if pacer.fill_error is not None:  # the lender failed while filling the slot
            raise pacer.fill_error
        if loan is not None:
            loan.close_command()
        self._call(reference, "reference", {"cmd": "drop"}, deadline)
        self.ctx.watch(reference, "the clean command")
        return reply

    def _clean_found(self, pair_index: int, replies: list[dict[str, Any]], pooled: bool = False) -> dict[str, Any]:
        """What a pair's clean commands found, per baseline: the reference's commands beside the candidate, the pair's
        pooled reference median, the fastest clean command's median (``clean_ms``; each one's in ``clean_each_ms``
        where a second ran), or with ``pooled`` the median of all the clean commands' calls (``clean_from``), and
        their ratio."""
        found: dict[str, Any] = {"pair": pair_index}
        for b in self.baselines:
            each = [times for reply in replies if (times := [as_float(t) for t in reply["timing"][b]["times_ms"]])]
            medians = [statistics.median(times) for times in each]
            beside = self.pair_reference.get(b) or []
            pooled_ms = self._pooled(pair_index, "reference", b)
            if pooled:
                clean_ms = statistics.median([t for times in each for t in times]) if each else None
            else:
                clean_ms = min(medians) if medians else None
            found[b] = {"beside_ms": [round(t, 5) for t in beside],
                        "pooled_ms": round(pooled_ms, 5) if pooled_ms is not None else None,
                        "clean_ms": round(clean_ms, 5) if clean_ms is not None else None,
                        "clean_from": "pooled" if pooled else "fastest",
                        "ratio": round(pooled_ms / clean_ms, 4) if pooled_ms and clean_ms else None}
            if len(replies) > 1:
                found[b]["clean_each_ms"] = [round(m, 5) for m in medians]
            if self.ctx.device == "cuda":  # device allocations in each command's timed trials (decide nothing)
                found[b]["allocator"] = {"beside": self.pair_reference_allocs.get(b) or [],
                                         "clean": [reply["timing"][b].get("allocator") for reply in replies]}
        return found

    def _drop_pair_times(self, samples: Samples, pairs: list[int],
                         roles: tuple[str, ...] = ("reference", "candidate")) -> None:
        """The times of ``pairs`` (of ``roles``) out of ``samples``, where a confirmation pair found them
        misleading; the other pairs' stay in order, so the two roles' groups still pair up."""
        for pair in pairs:
            for (role, b), group in self.pair_groups.get(pair, {}).items():
                if role in roles:
                    samples[role][b][:] = [g for g in samples[role][b] if g is not group]

    def _clean_flagged(self, pairs: list[dict[str, Any]] | None = None) -> bool:
        """On a GPU, whether any of ``pairs`` (default: every clean command's findings so far) has a ratio above
        ``REFERENCE_CLEAN_MAX`` under any baseline that was not ``substituted`` (``_cap_at_clean_times``) or
        ``excused`` (``_excuse_moved_together``)."""
        if self.ctx.device == "cpu":
            return False
        return any(_finding(v) and not v.get("substituted") and not v.get("excused")
                   for found in (self.reference_clean if pairs is None else pairs)
                   for b, v in found.items() if b != "pair")

    def _excuse_moved_together(self) -> None:
        """On a GPU, a finding the candidate gained nothing from: per baseline, a pair whose reference read slow
        beside the candidate (a ratio above ``REFERENCE_CLEAN_MAX``, not capped) while the candidate's own calls in
        it were as slow, so that its speedup (its pooled reference median over its pooled candidate median) is no
        more than ``REFERENCE_CLEAN_MAX`` times the median clean speedup (the clean commands' median over the
        candidate's pooled median) of the stage's pairs with no finding, is ``excused`` and not judged. Whole
        commands of both roles run at one of two speeds on a launch-bound pair, together (on an H100 the fixed
        pair's two processes read 0.04 or 0.07 ms a call in turn, and two of its four pairs had every clean command
        at the faster speed: 1.72-1.78, a false ``reference_slowed``; docs/results/h100-2026-12-07-i). A candidate
        that slows the reference beside it does not slow itself in its own commands, or gives its gain back: its
        speedup is then bounded as under the rule's bound with no finding. Needs a pair with no finding (the
        reward preset's one pair has none beside it); the fresh pair of ``_confirm_reference_slowed`` is read the
        same way."""
        if self.ctx.device == "cpu":
            return
        for b in self.baselines:
            clean_speedups = []
            for found in self.reference_clean:
                v, cand = found.get(b), self._pooled(found["pair"], "candidate", b)
                if isinstance(v, dict) and v["ratio"] is not None and not _finding(v) and v["clean_ms"] and cand:
                    clean_speedups.append(v["clean_ms"] / cand)
            if not clean_speedups:
                continue
            bound = REFERENCE_CLEAN_MAX * statistics.median(clean_speedups)
            for found in self.reference_clean:
                v, cand = found.get(b), self._pooled(found["pair"], "candidate", b)
                ref = self._pooled(found["pair"], "reference", b)
                if not isinstance(v, dict) or not _finding(v) or v.get("substituted") or not cand or not ref:
                    continue
                if ref / cand <= bound:
                    v["excused"] = {"pair_speedup": round(ref / cand, 4),
                                    "clean_speedup": round(bound / REFERENCE_CLEAN_MAX, 4),
                                    "pairs": len(clean_speedups)}

    def _pooled(self, pair_index: int, role: str, baseline: str) -> float | None:
        """A pair's pooled median of one role under one baseline (its calls beside the other role), None if none."""
        times = self.pair_groups.get(pair_index, {}).get((role, baseline)) or []
        return statistics.median(times) if times else None

    def _confirm_reference_slowed(self, samples: Samples, memory_peaks: dict[str, Any], exiting: list[Worker],
                                  timing: tuple[Any, ...]) -> None:
        """The reference ran slower beside the candidate than in some pair's clean command, or in the commands right
        after the candidate's than in its others: one fresh pair, cleaned as any other, decides for each rule that
        found it. Flagged there too, that rule's finding stands (``reference_slowed``); clear there, the pairs it
        flagged no longer count for it, and where neither rule's finding stands their times of both roles are
        dropped and the fresh pair's count instead, so a candidate that slowed the reference only in some pairs
        gains nothing from them. A single honest pair can read slow where the GPU's state changed in between: on the
        H100 one of 54 honest clean commands read 1.20 (docs/results/h100-2026-12-06-b), and the reference timed
        against itself read 1.26 after/other, two commands against one of a matmul whose calls took 0.34 or 0.49 ms
        (docs/results/h100-2026-12-06-d). Recorded in ``timing_ms.reference_clean.confirmation`` and
        ``timing_ms.reference_after_candidate.confirmation``."""
        clean_flagged = [found["pair"] for found in self.reference_clean if self._clean_flagged([found])]
        after_flagged = sorted(self.reference_rounds) if self._after_flagged() else []
        fresh = 1 + max([found["pair"] for found in self.reference_clean] + list(self.reference_rounds) + [0])
        self.confirming = True  # its burst is judged as the first pair's is
        self._pair(fresh, {}, True, memory_peaks, exiting, timing)
        stands = False
        self._excuse_moved_together()  # the fresh pair's finding too, against the pairs with none
        if clean_flagged:
            found_fresh = [found for found in self.reference_clean if found["pair"] == fresh]
            confirmed = not found_fresh or self._clean_flagged(found_fresh)  # no clean command there: it stands
            stands |= confirmed
            self.clean_confirmation = {"flagged_pairs": clean_flagged, "pair": fresh, "confirmed": confirmed,
                                       "dropped_pairs": [] if confirmed else clean_flagged}
        if after_flagged:
            # no after/other figures there (a cached reference times no command past the first pair's first): the
            # finding stands
            confirmed = not self._after_ratios({fresh}) or self._after_flagged({fresh})
            stands |= confirmed
            self.after_confirmation = {"flagged_pairs": after_flagged, "pair": fresh, "confirmed": confirmed,
                                       "dropped_pairs": [] if confirmed else after_flagged}
        if not stands:
            self._drop_pair_times(samples, sorted(set(clean_flagged) | set(after_flagged)))

    def _judge_reference_clean(self) -> None:
        """``timing_ms.reference_clean``: every clean command's findings (``_clean_reference``). On a GPU a ratio
        above ``REFERENCE_CLEAN_MAX`` (the pair's pooled reference median, the figure its speedup reads, over the
        clean command's) is ``reference_slowed``, rejected, once a fresh pair confirmed it
        (``_confirm_reference_slowed``; pairs it cleared no longer count): the reference ran slower beside the
        candidate's process than once that process was gone. The times are the trusted reference worker's own. On
        the CPU recorded only (``flagged`` None)."""
        if not self.reference_clean:
            return
        flagged = None
        if self.ctx.device != "cpu":
            dropped = set((self.clean_confirmation or {}).get("dropped_pairs", ()))
            flagged = self._clean_flagged([found for found in self.reference_clean if found["pair"] not in dropped])
            if flagged:
                self.ev.see("reference_slowed")
        self.draft.timing_ms["reference_clean"] = {"pairs": self.reference_clean, "allowed_ratio": REFERENCE_CLEAN_MAX,
                                                   "flagged": flagged, "confirmation": self.clean_confirmation}

    def _measure_first(self, workers: dict[str, Worker], memory_peaks: dict[str, Any], exiting: list[Worker],
                       deadline: float) -> bool:
        """The first pair's workers started (unless started ahead: ``workers``, which keeps them for ``_pair``), set
        up and measured for memory, one role at a time (the other idle or not yet set up), beside other pairs'
        correctness runs. True when done. False where a measure ran out of memory there (their memory, perhaps,
        not this pair's), or where the driver's per-process figure was not read for both roles on a GPU (the
        whole device's memory in use, compared instead, counts the other pairs' too): both workers are then asked
        to exit, and ``_pair`` starts, sets up and measures fresh ones with the device to itself
        (``timing_ms.memory_measured_alone`` says why)."""
        try:
            for role in ("reference", "candidate"):
                if role not in workers:
                    workers[role] = self._start(role, deadline)
                self._setup(workers[role], deadline)
                memory_peaks[role] = self._memory(workers[role], role, deadline)
        except (WorkerFailure, ReferenceFailed) as exc:
            error = exc.failure.error if isinstance(exc, ReferenceFailed) else failure_dict("performance", exc)
            if not reads_out_of_memory(error):
                raise
            why = {"reason": "out of memory beside other pairs' correctness runs: measured again with the GPU to "
                             "itself", "message": str(error.get("message", ""))[:300]}
        else:
            if self.ctx.device == "cpu" or all(memory_peaks[r].get("process_device_bytes") for r in memory_peaks):
                return True
            why = {"reason": "the driver's per-process figure was not read for both roles beside other pairs: "
                             "measured again with the GPU to itself", "message": ""}
        for worker in workers.values():
            self.ctx.collect(worker)
            worker.close(wait=False)
            exiting.append(worker)
        workers.clear()
        memory_peaks.clear()
        self.draft.timing_ms["memory_measured_alone"] = why
        return False

    def _untimed_reference_in_full(self, cached: dict[str, Any]) -> bool:
        """Before an untimed-work finding's fresh pair: where the reference is cached, its one timing command (the
        short re-measure, a fresh process's first) is all the candidate's commands were read against, and a
        fresh process's first command can do its harness work faster than a pair's later ones (on an H100 two
        honest 6 GiB elementwise pairs read 8-128 ms a call above their re-measure in every round and were
        rejected; timed in full beside the candidate they were not flagged: docs/results/h100-2026-12-07-g). So the
        cache is set aside (``cached`` emptied: the fresh pair times the reference in full, its clean command too,
        and the cache takes its figure), and the rule reads the fresh pair's rounds alone (``untimed_since``).
        Whether it was."""
        if not cached:
            return False
        cached.clear()
        self.untimed_since = {role: {b: len(v) for b, v in self.untimed[role].items()} for role in self.untimed}
        return True

    def _untimed_found(self, samples: Samples) -> dict[str, Any]:
        """Per baseline, the untimed-work rule's figures over every round timed so far (``kbv.eval.pacing``), or
        since ``untimed_since`` where a cached reference was set aside for the fresh pair."""
        seen: dict[str, Any] = {}
        since = self.untimed_since or {}
        for b in self.baselines:
            medians = {role: statistics.median([t for g in samples[role][b] for t in g] or [math.nan])
                       for role in ("reference", "candidate")}
            rounds = {role: self.untimed[role].get(b, [])[since.get(role, {}).get(b, 0):]
                      for role in ("reference", "candidate")}
            found = untimed_excess(rounds["reference"], rounds["candidate"],
                                   medians["reference"], medians["candidate"], self.ctx.device)
            if found is not None:
                seen[b] = found
        return seen

    def _judge_untimed(self, samples: Samples) -> None:
        """The parent's clock around every timed call against the worker's timer (``kbv.eval.pacing``): per
        baseline, the candidate's untimed time per call beside the reference's, round by round
        (``timing_ms.untimed``); more than the rule allows in every round is ``untimed_work``. A candidate timed once
        with few trials (far slower) is not judged: its few calls give no stable median."""
        if self.truncated:
            return
        seen = self._untimed_found(samples)
        self.draft.timing_ms["untimed"] = seen or None
        flagged = {b: v for b, v in seen.items() if v["flagged"]}
        if flagged:
            self.ev.see("untimed_work")
            self.draft.integrity["untimed_work"] = flagged

    def _note_aliases(self, role: str, pairs: Any) -> None:
        """[output, input] pairs a worker saw sharing storage among its kept timed and burst outputs."""
        if isinstance(pairs, list):
            self.aliased[role] |= {(int(p[0]), int(p[1])) for p in pairs
                                   if isinstance(p, list) and len(p) == 2 and all(isinstance(v, int) for v in p)}

    def _judge_aliases(self) -> None:
        """An output that shares storage with an input in a timed or burst call, where the reference's do not:
        ``output_aliases_input``, as on correctness forwards (a kernel that hands its input back only while timed)."""
        extra = sorted(self.aliased["candidate"] - self.aliased["reference"])
        if extra:
            self.ev.see("output_aliases_input")
            self.draft.correctness.setdefault("input_use", {}).setdefault("aliased_outputs", {})["timed"] = [
                list(pair) for pair in extra]

    def _clock(self) -> dict[str, Any] | None:
        """On a GPU, its SM clock and the driver's reasons for it now (``kbv.sandbox.devclock``), with the clock of
        each CPU the timing workers are pinned to (``cpu_mhz``, where the host tells it); None elsewhere."""
        if self.ctx.device != "cuda":
            return None
        now = devclock.reading(self.ctx.gpu)
        cpus = devclock.cpu_mhz(self.ctx.gpu_timing_cpus("performance"))
        return (now or {}) | {"cpu_mhz": cpus} if cpus else now

    def _note_clock(self, pair: int, round_index: int, role: str, before: dict[str, Any] | None,
                    reply: Any) -> None:
        """One timing command's GPU clock as it was sent (``before``) and as it replied, beside its median per
        baseline, in ``timing_ms.command_clocks`` (rounds from ``TIMING_ROUNDS`` on are the reference's clean
        commands): a diagnostic for a reference whose whole commands run at one of two speeds; decides nothing."""
        if before is None:
            return
        entry = {"pair": pair, "round": round_index, "role": role, "before": before, "after": self._clock(),
                 "median_ms": {b: round(ms, 5) for b, ms in reply_medians(reply).items()}}
        tails = reply_tails(reply)
        if tails:  # the worker's own figure (the host's latency after a synchronize), beside the medians
            entry["sync_tail_ms"] = tails
        self.draft.timing_ms.setdefault("command_clocks", []).append(entry)

    @contextmanager
    def _parent_part(self, part: str) -> Iterator[None]:
        """Add the block's time to ``timing_ms.parent_split_ms[part]``: the parent's own work around the timing
        commands, a diagnostic that decides nothing."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            mine = self.draft.timing_ms.setdefault("parent_split_ms", {})
            mine[part] = round(mine.get(part, 0.0) + (time.monotonic() - t0) * 1e3, 3)

    def _note_parent(self, call_ms: float, loop_ms: float, reply: Any) -> None:
        """One timing command's times in ``timing_ms.parent_split_ms``: ``commands``; ``call``, the command sent
        until its reply (the worker's asks and commitments answered on the way); ``worker``, the worker's own
        clock from the command's receipt to its reply; ``loop``, everything the parent did for it (``call`` and
        the parts named beside it: ``clocks``, ``idle_gpu``, ``drop``, ``watch``). Decides nothing."""
        mine = self.draft.timing_ms.setdefault("parent_split_ms", {})
        mine["commands"] = mine.get("commands", 0) + 1
        worker_ms = reply.get("command_ms") if isinstance(reply, dict) else None
        for part, ms in (("call", call_ms), ("loop", loop_ms), ("worker", worker_ms)):
            if isinstance(ms, (int, float)) and math.isfinite(ms):
                mine[part] = round(mine.get(part, 0.0) + float(ms), 3)

    def _note_split(self, role: str, split: Any) -> None:
        """The worker's own account of a timing command (``timer.time_calls``'s ``split_ms``), summed per role into
        ``timing_ms.worker_split_ms``: where time went inside the worker, for diagnosis only (it decides nothing)."""
        if not isinstance(split, dict):
            return
        mine = self.draft.timing_ms.setdefault("worker_split_ms", {}).setdefault(role, {})
        for part, value in split.items():
            if isinstance(part, str) and isinstance(value, (int, float)) and math.isfinite(value):
                mine[part] = mine.get(part, 0.0) + float(value)

    def _judge(self, reference: Worker, candidate: Worker, fetch: dict[str, Any], inputs: tuple[int, str],
               baseline: str, deadline: float, what: dict[str, Any]) -> None:
        """One kept candidate output judged like a correctness trial against the reference on the same inputs
        (``inputs``: the call's seed and distribution), under the flags it was timed under (``baseline``)."""
        got = self._call(candidate, "candidate", {"cmd": "kept", **fetch}, deadline)
        seed, dist = inputs
        record = {**what, "distribution": dist, "found": bool(got.get("found"))}
        # a kept timed call's digest, on record with the parent since its trial ended (kbv.worker.commit)
        committed = (None if "burst" in fetch else
                     candidate.commits.get((int(fetch["round"]), str(fetch["baseline"]), int(fetch["index"]))))
        if not got.get("found"):
            record |= {"passed": False, "reason": "the kept output was not returned"}
        else:
            # its own inputs not compared after the call: the reply is not read, and a whole input less on the
            # device (on an 80 GB H100 a 6 GiB output's judged call ran out of memory beside the candidate's worker)
            self._call(reference, "reference", {"cmd": "forward", "seed": seed, "distribution": dist,
                                                "baseline": baseline, "check_mutation": False}, deadline)
            judged = self._call(reference, "reference", {
                "cmd": "judge", "candidate": {"structure": got["structure"], "outputs": got["outputs"]},
                "precision": self.options.precision, "digest": "burst" not in fetch}, deadline)
            self.ctx.note_judge_split("performance", judged)
            record |= {"passed": bool(judged["comparison"]["passed"]),
                       "reason": judged["comparison"].get("reason", "")}
            if judged["comparison"].get("precision_recheck"):
                record["precision_recheck"] = judged["comparison"]["precision_recheck"]
            if "burst" not in fetch and judged.get("digest") != committed:
                record |= {"passed": False, "committed": committed is not None,
                           "reason": "the kept output is not the one committed when its call ended" if committed
                           is not None else "no commitment was sent for this call when it ended"}
        self.draft.correctness.setdefault("timed_rechecks", []).append(record)
        if not record["passed"]:
            self.ev.see("timed_output_mismatch")

    def _judge_timed_outputs(self, reference: Worker, candidate: Worker, kept: list[tuple[int, str, int, Pacer]],
                             deadline: float) -> None:
        """``judged_calls`` calls drawn by the parent, after the pair's rounds (or, where the outputs are too large
        for the ring, after each command: ``judge_each_command``), among every timed call the candidate kept: the
        worker never knows which calls, rounds or baselines are judged before they are drawn."""
        if not kept:
            return
        rng = secrets.SystemRandom()
        for round_index, baseline, index, pacer in rng.sample(kept, min(judged_calls(self.ctx.output_bytes),
                                                                        len(kept))):
            self._judge(reference, candidate, {"round": round_index, "baseline": baseline, "index": index,
                                               "drop": False}, pacer.inputs(baseline, index), baseline, deadline,
                        {"round": round_index, "baseline": baseline, "index": index})
        dropped = self._call(candidate, "candidate", {"cmd": "drop"}, deadline)
        changed = dropped.get("changed_kept")
        if isinstance(changed, list) and changed:  # the worker's own word: a flag added, never one cleared
            self.ev.see("timed_output_mismatch")
            self.draft.integrity.setdefault("kept_changed_after_commit", []).extend(changed[:CHANGED_KEPT_MAX])

    def _burst_check(self, reference: Worker, candidate: Worker, samples: Samples, deadline: float,
                     pair_index: int = 0) -> None:
        """The one check of the worker's timer against the parent's own clock, on back-to-back calls. Each role runs
        a long and a short burst (``timer.burst``: no events, no flush, ``BURST_INPUT_SETS`` input sets drawn from a
        fresh key); the difference over the difference in calls
        is the wall time per call, free of messaging and per-call harness overhead (input loading, which differs
        between kernels with different host work). Where the reference's wall time per call is its timed work (it
        is not bound by launch overhead), a candidate whose timer claims a clear speedup should show some of it
        here; one that shows none had its time taken off the timer (events re-recorded, a timer's locals
        rewritten) or pays it outside the kernel (host overhead): flag ``wall_clock_mismatch``. Run in the first
        pair and again in a confirmation pair (whose times may be the only ones kept), on each role's latest timed
        process (a cached reference's: the first pair's re-measure): processes of identical code differ, so the
        burst's processes must be the ones its timed medians come from."""
        baseline = self.baselines[-1]
        latest = {role: next((g for g in reversed(samples[role][baseline]) if g), [])
                  for role in ("reference", "candidate")}
        medians = {role: statistics.median(latest[role] or [float("nan")]) for role in latest}
        ref_ms = medians["reference"]
        if not (ref_ms > 0):  # a cached reference timing: no samples in this pair
            return
        wall: dict[str, float] = {}
        counts: dict[str, int] = {}
        keys: dict[str, int] = {}
        sets = BURST_INPUT_SETS
        for role, worker in (("reference", reference), ("candidate", candidate)):
            # about BURST_TARGET_MS by the role's own timed median (a slow kernel gets few calls; one whose timer
            # claims too little gets many, up to BURST_MAX_CALLS)
            per_call = medians[role] if medians[role] > 0 else ref_ms
            calls = counts[role] = int(min(BURST_MAX_CALLS, max(10, math.ceil(BURST_TARGET_MS / per_call))))
            short = max(1, calls // 10)
            elapsed = []
            for n in (1, short, calls):  # the first, one call, takes the command's one-time costs (not used)
                key = keys[role] = secrets.randbits(63)
                msg = {"cmd": "burst", "key": key, "names": self.names, "baseline": baseline, "calls": n}
                if role == "reference":  # as many input sets as fit in memory: the reference's count is the rule
                    msg |= {"budget_bytes": self.burst_bytes, "output_bytes": self.ctx.output_bytes}
                else:
                    msg["sets"] = sets
                idle = candidate if role == "reference" else reference
                with freeze.stopped(idle.pid if self.options.freeze_idle else None):  # as in the timing rounds
                    t0 = time.perf_counter()
                    reply = self._call(worker, role, msg, deadline)
                    elapsed.append((time.perf_counter() - t0) * 1e3)
                self._note_aliases(role, reply.get("aliased_outputs"))
                if role == "reference" and n == calls:
                    sets = max(1, min(BURST_INPUT_SETS, int(reply.get("sets") or 1)))
            wall[role] = max(elapsed[2] - elapsed[1], 1e-6) / (calls - short)
        # the claim judged is the timer's with confidence: the lower end of the speedup's interval (the pooled
        # median ratio alone swings by 2x or more between honest runs of a microsecond kernel on a shared core)
        ratio = ref_ms / medians["candidate"] if medians["candidate"] > 0 else math.inf
        interval = stats.speedup_over_pairs([latest["reference"]], [latest["candidate"]], seed=secrets.randbits(32))
        claimed = interval["ci_low"] if interval.get("ci_low") is not None else ratio
        wall_speedup = wall["reference"] / wall["candidate"]
        device_bound = wall["reference"] <= BURST_DEVICE_BOUND * ref_ms
        # each role's wall time per call over its own timed median: about 1 or less for any honest kernel (the
        # timer brackets the call and a device-wide sync; the burst runs warm and overlaps launches)
        own: dict[str, float] = {role: wall[role] / medians[role] if medians[role] > 0 else math.inf
                                 for role in wall}
        self.draft.timing_ms["burst"] = {"pair": pair_index, "baseline": baseline, "calls": counts, "wall_per_call": wall,
                                         "timed_median": medians, "median_ratio": ratio, "claimed_speedup": claimed,
                                         "wall_speedup": wall_speedup, "reference_device_bound": device_bound,
                                         "wall_over_timed": own}
        self.burst_seen = {"wall_speedup": wall_speedup, "device_bound": device_bound, "wall_over_timed": own,
                           "pair_claim": claimed}  # judged in _judge_burst, against the record's own claim
        # burst calls are judged too: one of the long burst's input sets, drawn after the burst
        s = secrets.randbelow(max(1, min(sets, counts["candidate"])))
        self._judge(reference, candidate, {"burst": s}, timed_call(keys["candidate"], s, self.names), baseline,
                    deadline, {"burst": True, "index": s})

    def _judge_burst(self, speedups: dict[str, Any]) -> None:
        """The clock cross-check's verdict, once every pair is timed: the claim judged is the one the record makes
        (the lower end of the final speedup's interval, over all pairs), not the first pair's alone: between
        processes of identical code a microsecond kernel's timed median moved by 1.8x on the H200, so one pair's
        interval claimed a speedup of 1.7 for the reference against itself."""
        seen = self.burst_seen
        if seen is None:
            return
        final = speedups.get(self.baselines[-1]) or {}
        claimed = final.get("ci_low") if final.get("ci_low") is not None else final.get("value")
        if claimed is None:
            claimed = seen["pair_claim"]
        self.draft.timing_ms["burst"] |= {"claimed_speedup": claimed, "pair_claimed_speedup": seen["pair_claim"]}
        own = seen["wall_over_timed"]
        mismatch = burst_mismatch(claimed, seen["wall_speedup"], seen["device_bound"], self.ctx.device)
        understated = timer_understates(own["candidate"], own["reference"])
        if mismatch or understated:
            self.ev.see("wall_clock_mismatch")
            self.draft.integrity["wall_clock_burst"] = {"claimed_speedup": claimed,
                                                        "wall_speedup": seen["wall_speedup"], "wall_over_timed": own,
                                                        "claim_not_seen": mismatch, "timer_understates": understated}

    # -- the reference-timing cache (opt-in; off by default) ------------------------------------------------------

    def _cache(self) -> ReferenceTimingCache:
        return ReferenceTimingCache(self.options.cache_dir)

    def _cache_key(self, baseline: str) -> str:
        ctx = self.ctx
        identity = envinfo.gpu_identity(ctx.gpu) if ctx.device == "cuda" else {}
        return cache_key(ctx.problem.source_sha256, self.draft.shapes, self.options.precision, baseline,
                         ctx.device, identity.get("name", ctx.device), identity.get("driver", ""), self.names,
                         lent=self.lend, recorded=self.recorded is not None)

    def _cached_reference(self, baselines: list[str]) -> dict[str, Any]:
        """Cached reference timings for every baseline, or {} (then the reference is timed live, interleaved)."""
        if not self.options.reuse_reference_timing:
            return {}
        entries = {b: self._cache().get(self._cache_key(b)) for b in baselines}
        return entries if all(entries.values()) else {}


def reply_medians(reply: Any) -> dict[str, float]:
    """A timing command's median per call per baseline, from its reply (a baseline with no times has none)."""
    timing = reply.get("timing") if isinstance(reply, dict) else None
    return {b: statistics.median(times) for b, t in (timing or {}).items()
            if isinstance(t, dict) and isinstance(t.get("times_ms"), list)
            and (times := [as_float(x) for x in t["times_ms"]])}


def reply_tails(reply: Any) -> dict[str, float]:
    """A timing command's ``sync_tail_ms`` per baseline (``kbv.worker.timer``), from its reply: CUDA only, the
    worker's own figure."""
    timing = reply.get("timing") if isinstance(reply, dict) else None
    return {b: round(float(t["sync_tail_ms"]), 5) for b, t in (timing if isinstance(timing, dict) else {}).items()
            if isinstance(t, dict) and isinstance(t.get("sync_tail_ms"), (int, float))
            and math.isfinite(t["sync_tail_ms"])}


def _finding(v: dict[str, Any]) -> bool:
    """A clean-command reading (one baseline of one pair's ``reference_clean`` entry) above ``REFERENCE_CLEAN_MAX``."""
    return v.get("ratio") is not None and v["ratio"] > REFERENCE_CLEAN_MAX


def clean_reference_on(option: bool | None, device: str) -> bool:
    """Whether each pair's reference gets its clean command: ``option`` (``EvalOptions.clean_reference``), or where
    it is None the device's default (``CLEAN_REFERENCE_DEFAULT``)."""
    if option is not None:
        return option
    return CLEAN_REFERENCE_DEFAULT.get("cuda" if device.startswith("cuda") else "cpu", False)


def at_least_the_outputs(rise: int, output_bytes: int) -> int:
    """A CPU call's peak memory: the parent's reading of the resident set's rise, but never less than the outputs
    the call returned (the reference's, the same for both roles). An output under the measuring allocator's mmap
    threshold comes from heap the process already holds, where the resident set need not rise at all."""
    return max(int(rise), int(output_bytes or 0))


def judged_calls(output_bytes: int) -> int:
    """Timed calls judged per process pair: ``JUDGED_TIMED_CALLS_PER_PAIR``, fewer where their outputs would total
    more than ``JUDGED_TIMED_BYTES_PER_PAIR``, never none."""
    fit = JUDGED_TIMED_BYTES_PER_PAIR // output_bytes if output_bytes > 0 else JUDGED_TIMED_CALLS_PER_PAIR
    return max(1, min(JUDGED_TIMED_CALLS_PER_PAIR, fit))


def timer_understates(candidate_wall_over_timed: float, reference_wall_over_timed: float) -> bool:
    """The clock cross-check's second rule, for any claim: the candidate's wall time per call on back-to-back calls
    is more than ``BURST_MAX_WALL_OVER_TIMED`` times what its timer reported per call, beyond the reference's own
    ratio (time taken off the timer, whatever speedup it then claims)."""
    return candidate_wall_over_timed > BURST_MAX_WALL_OVER_TIMED * max(1.0, reference_wall_over_timed)


def burst_mismatch(claimed: float, wall_speedup: float, reference_device_bound: bool, device: str = "cuda") -> bool:
    """The clock cross-check's rule: a claimed speedup of ``BURST_MIN_CLAIM`` (``BURST_MIN_CLAIM_CPU`` on the CPU,
    where the timings of microsecond kernels on one core are noisier) or more that the parent's clock on
    back-to-back calls shows as at most ``BURST_MAX_WALL_SPEEDUP``, where the reference is device-bound."""
    least = BURST_MIN_CLAIM_CPU if device == "cpu" else BURST_MIN_CLAIM
    return reference_device_bound and claimed >= least and wall_speedup <= BURST_MAX_WALL_SPEEDUP


def roofline_section(ctx: PairContext) -> None:
    """The problem's roofline bound at the timed sizes and the attainment of each timed median (``roofline``).

    Counted once per (problem source, profile, precision) in a fresh process on the meta device (the parent never
    imports problem code) and cached under the cache folder; the ceilings are the device's measured ones (``kbv
    calibrate``) where saved, else its datasheet's, and the section says which."""
    from kbv import roofline
    from kbv.roofline import hardware

    draft = ctx.draft
    try:
        name = (draft.env.get("device") or {}).get("name") if ctx.device == "cuda" else "cpu"
        ceilings = hardware.ceilings_for(name or "unknown", ctx.options.cache_dir)
        counts = roofline.counts_cached(ctx.problem.path, ctx.profile, ctx.options.precision, ctx.options.cache_dir,
                                        shape=ctx.shape)
        roof = roofline.Roofline(counts, ceilings)
    except Exception as exc:  # no ceilings for this device, or a problem that cannot be counted: no section
        draft.roofline = {"error": f"{type(exc).__name__}: {exc}"}
        return
    if counts.profile != ctx.profile:  # counted at another size (a CPU fallback): the bound is not this one
        draft.roofline = {"error": f"counted at profile {counts.profile!r}, timed at {ctx.profile!r}",
                          "counted": roof.to_json()["counted"]}
        return
    draft.roofline = roof.record_section(draft.timing_ms)
    # Flag only on a GPU: kbv's CPU runs use the small profile, whose data stays in the CPU's caches, and the CPU's
    # ceilings are a placeholder unless calibrated, so S > 1 there is not a sign of skipped work.
    if draft.roofline["above_roofline"] and ctx.device == "cuda":
        ctx.evidence.see("above_roofline")
