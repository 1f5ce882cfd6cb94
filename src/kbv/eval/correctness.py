"""The correctness stage of one pair: every distribution's trials, the poisoned and profiled D1 trials, the
float64 precision check and the rule checks on how forward treats its inputs, all as evidence.

The candidate runs in a fresh worker; the reference in another that never imports it and judges the candidate's
outputs (relayed as data) against outputs that never left it. Findings go to ``ctx.evidence``; details to the
record's ``correctness`` section (``ctx.draft``). No verdict is decided here.
"""

from __future__ import annotations

import secrets
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable

from kbv import fallback as fallback_check
from kbv import judge, wire
from kbv.eval.context import PairContext, ReferenceFailed, failure_dict
from kbv.eval.evidence import PART_OF, Failure, out_of_memory_is_kbvs
from kbv.eval import workspace
from kbv.eval.params import map_parameters
from kbv.protocol import DISTRIBUTIONS, GUARD_BYTES, PIPELINE_MAX_BYTES, POISON_BYTES, PRECISION_CHECK, TOLERANCES
from kbv.sandbox import devmem, observe
from kbv.sandbox.launch import Worker, WorkerFailure

Call = Callable[[Worker, dict[str, Any]], dict[str, Any]]


POISON_SHORT_KEPT = 8  # calls whose poison did not all fit, kept in the record


def as_float(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) else float("inf")


def note_recheck(result: dict[str, Any], cmp: dict[str, Any]) -> None:
    """Count into a distribution's result a trial the judge judged again with the reference's own precision noise
    allowed for (``kbv.judge.recheck_with_noise``): trials, those that passed so, and per output the largest noise
    seen, [largest difference, centred error]."""
    recheck = cmp.get("precision_recheck")
    if not isinstance(recheck, dict):
        return
    seen = result.setdefault("precision_recheck", {"trials": 0, "passed": 0, "noise": []})
    seen["trials"] += 1
    seen["passed"] += int(bool(recheck.get("passed")))
    for i, own in enumerate(recheck.get("noise") or []):
        if i == len(seen["noise"]):
            seen["noise"].append(None)
        if own is not None:
            seen["noise"][i] = [max(a, b) for a, b in zip(seen["noise"][i] or own, own)]


def poisoned(ref_out: dict[str, Any], which: int) -> dict[str, Any]:
    """What a candidate forward in correctness is sent beside the seed: poison for the freed blocks of the sizes the
    call will allocate (its outputs, as the reference's are, plus small-pool blocks) and guard bands around its
    inputs."""
    sizes = [int(n) for n in ref_out.get("nbytes", []) if int(n) > 0] + [2 * 2**20] * 4
    return {"poison": {"byte": POISON_BYTES[which], "sizes": sizes}, "guard_bytes": GUARD_BYTES}


_STARTER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kbv-start-ahead")  # candidates' processes
_CANDIDATE_CALLS = ThreadPoolExecutor(max_workers=64, thread_name_prefix="kbv-candidate-trial")  # one per pair in flight


@dataclass(frozen=True)
class _Trial:
    """A correctness trial whose reference forward has run: its place in the stage's order (the reference's tag
    for its outputs), distribution, seed, the forward command and the reference's reply (lent inputs)."""

    n: int
    distribution: str
    seed: int
    msg: dict[str, Any]
    ref_out: dict[str, Any]


def _discard(starting: Future) -> None:
    """Close a worker started ahead that will not be used (its start's own failure is moot)."""
    try:
        starting.result().close()
    except BaseException:  # noqa: BLE001 - the pair already failed for another reason
        pass


def _described(own: list[Any]) -> list[Any]:
    """A worker's ``own`` list (name, shape, dtype per tensor) as ``kbv.eval.params`` takes it."""
    return [(str(n), tuple(int(s) for s in shape), str(dtype)) for n, shape, dtype in own]


class CorrectnessStage:
    def __init__(self, ctx: PairContext):
        self.ctx = ctx
        self.options = ctx.options
        self.ev = ctx.evidence
        self.notes = ctx.draft.correctness
        self.spent = 0.0  # time charged to the candidate; waiting for the reference is not
        self.trials_seen = 0
        self.lent_trials = 0  # trials whose inputs the judge lent (kbv.worker.lending)
        self.ref_own: list[Any] = []  # (name, shape, dtype) of the reference's tensors, in its order

    # -- calls ----------------------------------------------------------------------------------------------------

    def cand_call(self, worker: Worker, msg: dict[str, Any], charged: bool = True) -> dict[str, Any]:
        """A command to the candidate's worker, its time charged to the candidate's limit and (unless ``charged``
        is False: a call running beside the reference's, whose wait the caller charges) to the record's parts."""
        t0 = time.monotonic()
        try:
            with self.ctx.clock("correctness", PART_OF.get(msg.get("cmd", ""), "other")) if charged else nullcontext():
                reply = worker.call(msg, t0 + max(0.0, self.options.timeout - self.spent),
                                    max_bytes=self.ctx.budget(msg.get("cmd", "")))
        finally:
            self.spent += time.monotonic() - t0
        if msg.get("cmd") == "forward":  # not the profiled call: kbv's profiler may start threads of its own
            self.ctx.note_forward("candidate", reply)
            self.ctx.watch(worker, msg.get("distribution", ""))
        elif msg.get("cmd") == "setup":
            self.ctx.split_cuda_init("correctness", reply)
        return reply

    def ref_call(self, worker: Worker, msg: dict[str, Any]) -> dict[str, Any]:
        try:
            with self.ctx.clock("correctness", PART_OF.get(msg.get("cmd", ""), "other")):
                reply = worker.call(msg, time.monotonic() + self.options.timeout)
        except WorkerFailure as failure:
            raise ReferenceFailed(failure, "correctness") from None
        held = reply.get("device_memory")
        if isinstance(held, list) and len(held) == 2 and all(isinstance(b, int) for b in held):
            most = self.notes.setdefault("judge_memory", {}).setdefault(str(msg.get("cmd")), [0, 0])
            most[:] = [max(most[0], held[0]), max(most[1], held[1])]  # a diagnostic: what each command left held
        if msg.get("cmd") == "setup":
            self.ctx.split_cuda_init("correctness", reply)
        elif msg.get("cmd") == "judge":
            self.ctx.note_judge_split("correctness", reply)
        if msg.get("cmd") == "forward":
            self.ctx.saw_reference_output(reply)
            self.ctx.note_forward("reference", reply)
            self.ctx.watch(worker, msg.get("distribution", ""))
        elif msg.get("cmd") == "buffers":
            self.ctx.output_bytes = max(self.ctx.output_bytes, sum(
                int(b.numel() * b.element_size()) for b in (reply.get("buffers") or {}).values()))
        return reply

    def judge_msg(self, candidate_reply: dict[str, Any], ref_out: dict[str, Any] | None = None,
                  trial: int | None = None) -> dict[str, Any]:
        """The judge's command for a candidate's reply to trial ``trial`` (the tag of the reference's forward);
        it also reads back the inputs it lent for the trial."""
        return {"cmd": "judge", "candidate": candidate_reply, "precision": self.options.precision,
                "standard_tolerance": self.options.standard_tolerance_value,
                "lent": bool(ref_out and ref_out.get("lent")), "trial": trial}

    def lend(self, msg: dict[str, Any]) -> dict[str, Any]:
        """A reference forward that also lends the trial's inputs to the candidate (``kbv.worker.lending``)."""
        return msg | {"lend": GUARD_BYTES} if self.options.lend_inputs else msg

    def trial(self, candidate: Worker, msg: dict[str, Any], ref_out: dict[str, Any],
              extra: dict[str, Any], charged: bool = True) -> dict[str, Any]:
        """The candidate's side of a trial: on the inputs the reference lent (no seed: the judge holds the inputs),
        or, where it lent none, on inputs it draws from the trial's seed itself. The relayed descriptor is closed
        once sent."""
        lent = ref_out.get("lent")
        if isinstance(lent, dict):
            self.lent_trials += 1
            cand_msg = {"cmd": msg["cmd"], "distribution": msg["distribution"], "lent": lent, **extra}
        else:
            if ref_out.get("lend_error"):
                self.notes.setdefault("input_use", {})["lend_error"] = str(ref_out["lend_error"])[:400]
            cand_msg = msg | extra
        try:
            reply = self.cand_call(candidate, cand_msg, charged)
        finally:
            for handle in wire.handles_in(lent):
                handle.close()
        self._note_poison(reply)
        return reply

    def _note_poison(self, reply: dict[str, Any]) -> None:
        """A GPU's poison blocks that did not all fit (``poison_freed`` places what the device has room for):
        ``correctness.poison_short`` keeps the bytes placed and asked per call. Recorded, deciding nothing: the
        poison is best effort on a GPU (the caching allocator may hand out other blocks), and kbv's own blocks
        running out of room is not the candidate's error."""
        figures = reply.get("poisoned_bytes")
        if self.ctx.device == "cpu" or not (isinstance(figures, list) and len(figures) == 2
                                            and all(isinstance(n, int) for n in figures)):
            return
        placed, asked = figures
        if placed < asked:
            short = self.notes.setdefault("poison_short", [])
            if len(short) < POISON_SHORT_KEPT:
                short.append({"placed": placed, "asked": asked})

    def check_lent(self, judged: dict[str, Any], distribution: str) -> None:
        """What the judge read back from the inputs it lent: a changed band is ``out_of_bounds_write``, a changed
        input ``input_mutated`` (where the reference's own call left it as drawn)."""
        check = judged.get("lent_check")
        if not isinstance(check, dict):
            return
        if check.get("guard_violations"):
            self.ev.see("out_of_bounds_write")
            self.ctx.note("input_use", "guard_violations", distribution, check["guard_violations"])
        if check.get("mutated_inputs"):
            self.ev.see("input_mutated")
            self.ctx.note("input_use", "mutated_inputs", distribution, check["mutated_inputs"])

    # -- the stage ------------------------------------------------------------------------------------------------

    def run(self) -> None:
        ctx, options, ev = self.ctx, self.options, self.ev
        per_dist: dict[str, dict[str, Any]] = {}
        first_d1: tuple[int, dict[str, Any]] | None = None  # (seed, candidate reply) of a D1 trial, drawn after
        seeds: dict[str, list[int]] = {}
        failure: WorkerFailure | None = None
        collected = False  # the reference's report taken (kbv.eval.context.PairContext.collect: once per worker)
        # the candidate's process starts while the reference's starts and is set up (no candidate code runs
        # before its setup command); only the time spent waiting for it afterwards is charged. Both may have been
        # started ahead, while an earlier pair's correctness ran (kbv.eval.lookahead): the wait for them is charged
        with ctx.clock("correctness", "process_start"):
            ahead = ctx.take_correctness_ahead()
        if ahead is not None:
            ctx.draft.env["correctness_started_ahead"] = True
            starting: Future = Future()
            starting.set_result(ahead["candidate"])
            reference = ahead["reference"]
        else:
            starting = _STARTER.submit(ctx.start, "candidate", "correctness", time.monotonic() + options.timeout,
                                       False)
            try:
                reference = ctx.start("reference", "correctness", time.monotonic() + options.timeout)
            except BaseException as exc:
                _discard(starting)
                if isinstance(exc, WorkerFailure):
                    raise ReferenceFailed(exc, "correctness") from None
                raise
        with reference:
            try:
                setup = self.ref_call(reference, {"cmd": "setup", "init_seed": ctx.init_seed, "describe": True})
                self.ref_own = _described(setup.get("own", []))
                ctx.draft.shapes = setup.get("shapes", {})
                ctx.draft.env["device"] = setup.get("device", {}) | ctx.draft.env.get("device", {})
            except BaseException:
                _discard(starting)
                raise
            try:
                t0 = time.monotonic()
                with ctx.clock("correctness", "process_start"):
                    candidate = starting.result()
                self.spent += time.monotonic() - t0
                if ctx.on_correctness_started is not None:  # both processes up (CUDA started): timing workers
                    ctx.on_correctness_started()  # may start now (kbv.eval.performance.start_early)
            except WorkerFailure as exc:
                failure = exc
            else:
                pids = {"reference": reference.pid, "candidate": candidate.pid}
                watch = devmem.Watch({r: p for r, p in pids.items() if p is not None}, tree=observe.tree) if (
                    ctx.device == "cuda" and devmem.available()) else None
                with candidate, watch or nullcontext():
                    try:
                        self._setup(reference, candidate)
                        first_d1 = self._distributions(reference, candidate, per_dist, seeds)
                        if not any(r["status"] == "failed" for r in per_dist.values()) and first_d1:
                            self._poison_trial(reference, candidate, per_dist, first_d1)
                        if not any(r["status"] == "failed" for r in per_dist.values()) and first_d1:
                            self._precision_check(reference, first_d1)
                        if not any(r["status"] == "failed" for r in per_dist.values()):
                            self._fallback_trial(reference, candidate, per_dist)
                        self._compare_buffers(self.ref_call(reference, {"cmd": "buffers"}),
                                              self.cand_call(candidate, {"cmd": "buffers"}))
                    except WorkerFailure as exc:
                        failure = exc
                    finally:
                        ctx.collect(candidate)
                        ctx.collect(reference)
                        reference.close(wait=False)  # both exit at once; each block's end waits for its own
                collected = True
                held = watch.result() if watch else None
                if held is not None:  # what the stage really needed beside other pairs' (kbv.eval.gate)
                    ctx.draft.memory_bytes["correctness_stage"] = {
                        **held, "expected": ctx.draft.env.get("correctness_memory_expected")}
            if not collected:
                ctx.collect(reference)
        self.notes["distributions"] = per_dist
        self.notes["trials_per_distribution"] = options.trials
        self.notes.setdefault("input_use", {})["lent_trials"] = self.lent_trials
        self.notes["tolerance"] = dict(vars(TOLERANCES[options.precision]))
        self.notes["standard_tolerance"] = {"version": options.standard_tolerance,
                                            "atol": options.standard_tolerance_value,
                                            "rtol": options.standard_tolerance_value}
        ctx.draft.seeds = {"init": ctx.init_seed, "correctness": seeds}
        d1 = per_dist.get("D1", {})
        ev.d1_complete = d1.get("trials", 0) == options.trials or d1.get("status") == "failed"
        if failure is not None:
            running = next((n for n, r in per_dist.items() if r.get("status") == "passed"
                            and r["trials"] < options.trials), None)
            if running:
                per_dist[running]["status"] = "error"
            error = failure_dict("correctness", failure)
            kbvs = out_of_memory_is_kbvs(  # kbv's buffers in both workers (lent inputs, snapshots, poison blocks)
                error, ctx.draft.memory_bytes, ctx.device,  # did not fit: 6 GiB activations on an 80 GB card
                "the correctness stage ran out of device memory; the candidate's processes held no more than the "
                "reference's")
            if kbvs is not None:
                error |= {"kind": "harness", "out_of_memory": kbvs}
            ev.fail(Failure("correctness", "harness" if kbvs else "candidate", failure.kind, error))
        ev.distributions = {name: r["status"] for name, r in per_dist.items()}
        self.notes["failed_distributions"] = [n for n, r in per_dist.items() if r["status"] == "failed"]

    def _setup(self, reference: Worker, candidate: Worker) -> None:
        """Build the candidate from the same seed and pair its tensors with the reference's (``kbv.eval.params``);
        where every tensor pairs, fresh noise on the reference's parameters goes to both (identity defaults then
        matter), copied through the pairing."""
        ctx, ev = self.ctx, self.ev
        # built from the seed with no state: its own names, shapes and dtypes are all the pairing needs, and the
        # state then travels once (a 256 MiB weight was sent, imported and loaded twice)
        built = self.cand_call(candidate, {"cmd": "setup", "init_seed": ctx.init_seed})
        if built.get("started_threads"):  # alive before any forward: work can be handed to them
            ev.see("background_threads")
            self.notes.setdefault("input_use", {})["started_threads"] = built["started_threads"]
        mapping = map_parameters(self.ref_own, _described(built.get("own", [])))
        ctx.mapping = mapping
        unmatched = {"candidate_only": mapping.candidate_only, "reference_only": mapping.reference_only}
        if mapping.renamed:
            self.notes["parameter_mapping"] = mapping.renamed
        self.notes["unmatched"] = unmatched
        if not mapping.unique:
            ev.see("unmatched_params")  # keep the seeded initialisation on both sides
            ctx.ref_state = self.ref_call(reference, {"cmd": "state"})["state"]
            self.cand_call(candidate, {"cmd": "load", "state": ctx.ref_state})  # what pairs by name and shape
            self.notes["parameters_perturbed"] = []
            self.notes["affine_defaults_exercised"] = False
            return
        perturbed = self.ref_call(reference, {"cmd": "perturb", "seed": secrets.randbits(63)})
        ctx.ref_state = perturbed["state"]
        self.cand_call(candidate, {"cmd": "load", "state": ctx.candidate_state()})
        self.notes["parameters_perturbed"] = perturbed["perturbed"]

    def _distributions(self, reference: Worker, candidate: Worker, per_dist: dict[str, dict[str, Any]],
                       seeds: dict[str, list[int]]) -> tuple[int, dict[str, Any]] | None:
        """Every distribution's trials, pipelined where a trial's tensors are small (``PIPELINE_MAX_BYTES``): while
        the candidate runs trial k, the reference judges trial k - 1 and runs trial k + 1's forward (its outputs and
        lent inputs kept by trial, ``KEPT_TRIALS``). A trial is drawn only once the trials before the running one
        are judged, so a distribution stops at its first failure as it would one trial at a time; a trial of it
        already running then is not judged."""
        ctx, options, ev = self.ctx, self.options, self.ev
        d1_trials: list[tuple[int, dict[str, Any]]] = []
        if ctx.device == "cpu":  # the thread and process baseline before any forward: a pool or child started in
            ctx.watch(reference, "before the first forward")  # the first forward is growth (on a GPU the first
            ctx.watch(candidate, "before the first forward")  # call's own start-up threads make it after it)
        plan: list[str] = []
        for dist in DISTRIBUTIONS:
            if dist.name in ctx.problem.skip:
                per_dist[dist.name] = {"status": "skipped", "reason": ctx.problem.skip[dist.name], "trials": 0}
                ev.see("skipped_distribution")
                continue
            per_dist[dist.name] = {"status": "passed", "trials": 0, "max_abs_error": 0.0, "max_rel_error": 0.0,
                                   "error_ratio": 0.0, "centred_error": None}
            seeds[dist.name] = []
            plan += [dist.name] * options.trials
        order = iter(range(len(plan)))

        def draw() -> _Trial | None:
            """The next trial of a distribution that has not failed, the reference's forward run (lending)."""
            for n in order:
                if per_dist[plan[n]]["status"] == "failed":
                    continue
                seed = secrets.randbits(63)
                seeds[plan[n]].append(seed)
                msg = {"cmd": "forward", "seed": seed, "distribution": plan[n]}
                return _Trial(n, plan[n], seed, msg, self.ref_call(reference, self.lend(msg | {"trial": n})))
            return None

        ready, done = draw(), None
        pipelined = ready is not None and sum(int(n) for key in ("nbytes", "input_nbytes")
                                              for n in ready.ref_out.get(key) or []) <= PIPELINE_MAX_BYTES
        self.notes["pipelined_trials"] = pipelined
        try:
            while ready is not None or done is not None:
                running = None
                if ready is not None:
                    running = ready, _CANDIDATE_CALLS.submit(self.trial, candidate, ready.msg, ready.ref_out,
                                                             poisoned(ready.ref_out, 0), False)
                    ready = None
                if pipelined or running is None:  # the reference's work while the candidate's call runs
                    if done is not None:
                        self._judge_trial(reference, *done, per_dist, d1_trials)
                        done = None
                    ready = draw()
                if running is not None:
                    with ctx.clock("correctness", "trials"):
                        cand_out = running[1].result()
                    if per_dist[running[0].distribution]["status"] != "failed":
                        done = running[0], cand_out
                if not pipelined and done is not None:  # one trial at a time: judged before the next is drawn
                    self._judge_trial(reference, *done, per_dist, d1_trials)
                    done = None
                    ready = draw()
        finally:
            if ready is not None:  # drawn, never sent: its lent descriptors are the parent's to close
                for handle in wire.handles_in(ready.ref_out.get("lent")):
                    handle.close()
        # the D1 trial the poisoned re-run and the precision check use, drawn once every trial has run: no trial
        # can know it is the one (kbv.protocol rule "no secret before use")
        return secrets.SystemRandom().choice(d1_trials) if d1_trials else None

    def _judge_trial(self, reference: Worker, trial: _Trial, cand_out: dict[str, Any],
                     per_dist: dict[str, dict[str, Any]], d1_trials: list[tuple[int, dict[str, Any]]]) -> None:
        """The rule checks on a trial's candidate forward, then the judge's comparison, into its distribution's
        result."""
        name, result = trial.distribution, per_dist[trial.distribution]
        if name == "D1":
            d1_trials.append((trial.seed, cand_out))
        self.check_input_use(cand_out, trial.ref_out, name)
        judged = self.ref_call(reference, self.judge_msg(cand_out, trial.ref_out, trial.n))
        self.check_lent(judged, name)
        cmp = judged["comparison"]
        result["trials"] += 1
        for key in ("max_abs_error", "max_rel_error", "error_ratio"):
            result[key] = max(result[key], as_float(cmp[key]))
        if cmp["centred_error"] is not None:
            result["centred_error"] = max(result["centred_error"] or 0.0, cmp["centred_error"])
        if name == "D1":
            self.ev.standard_d1.append(bool(judged["standard"]))
        note_recheck(result, cmp)
        if not cmp["passed"]:
            result["status"] = "failed"
            result["reason"] = cmp["reason"]

    def _poison_trial(self, reference: Worker, candidate: Worker, per_dist: dict[str, dict[str, Any]],
                      first_d1: tuple[int, dict[str, Any]]) -> None:
        """A D1 trial again (drawn after all trials), with the other poison in freed memory: the outputs must pass again and should
        be the same bits. Failing only here means the kernel reads memory it never wrote."""
        seed, first = first_d1
        msg = {"cmd": "forward", "seed": seed, "distribution": "D1"}
        ref_out = self.ref_call(reference, self.lend(msg))
        again = self.trial(candidate, msg, ref_out, poisoned(ref_out, 1))
        self.check_input_use(again, ref_out, "D1")
        judged = self.ref_call(reference, self.judge_msg(again, ref_out))
        self.check_lent(judged, "D1")
        same = self.ref_call(reference, {"cmd": "same", "a": first, "b": again})  # the judge compares the bits
        identical, max_diff = bool(same["identical"]), same["max_abs_difference"]
        self.notes["poison"] = {
            "bytes": [f"0x{b:02X}" for b in POISON_BYTES], "seed": seed, "passed": bool(judged["comparison"]["passed"]),
            "identical": identical, "max_abs_difference": max_diff}
        if not judged["comparison"]["passed"]:
            self.ev.see("uninitialized_read")
            per_dist["D1"].update(status="failed", reason=f"poisoned trial (freed memory 0x{POISON_BYTES[1]:02X}): "
                                                          + str(judged["comparison"]["reason"]))
        elif not identical:
            self.ev.see("nondeterministic")

    def _precision_check(self, reference: Worker, first_d1: tuple[int, dict[str, Any]]) -> None:
        """Error against float64 of the candidate's outputs of a D1 trial (drawn after all trials: every trial's
        outputs are judged alike, so none can tell it is this one) and of the verified baseline's own run."""
        seed, first = first_d1
        reply = self.ref_call(reference, {"cmd": "precision", "seed": seed, "distribution": "D1", "candidate": first})
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
        self.notes["precision"] = result
        if result["low"]:
            self.ev.see("low_precision")

    def _fallback_trial(self, reference: Worker, candidate: Worker, per_dist: dict[str, dict[str, Any]]) -> None:
        """One more D1 trial under the fallback recorder, judged like the others (a kernel that behaves differently
        while profiled fails D1); the symbol route runs here in the parent, on the candidate's build folder."""
        seed = secrets.randbits(63)
        msg = {"cmd": "forward", "seed": seed, "distribution": "D1"}
        ref_out = self.ref_call(reference, self.lend(msg))  # the same forward: BatchNorm buffers stay in step
        reply = self.trial(candidate, msg | {"cmd": "fallback"}, ref_out, {"guard_bytes": GUARD_BYTES})
        judged = self.ref_call(reference, self.judge_msg(reply, ref_out))
        self.check_lent(judged, "D1 (fallback trial)")
        if reply.get("guard_violations"):
            self.ev.see("out_of_bounds_write")
            self.ctx.note("input_use", "guard_violations", "D1 (fallback trial)", reply["guard_violations"])
        roots = workspace.own_roots(candidate.spec)
        self.ctx.own_roots = roots
        modules: dict[str, Any] = reply["modules"] if isinstance(reply.get("modules"), dict) else {}
        mapped = observe.foreign_objects(candidate.pid)  # the parent's own view: renamed or deleted ones too
        symbols = fallback_check.extension_symbols(roots, objects=[*(str(p) for p in modules.values()),
                                                                   *(str(m["read_as"]) for m in mapped)])
        profile: dict[str, Any] = reply["fallback"] if isinstance(reply.get("fallback"), dict) else {}
        verdict = fallback_check.classify(profile, symbols)
        gpu = None
        if isinstance(reply.get("gpu_kernels"), list):  # on a GPU: device time per kernel decides when any ran
            gpu = fallback_check.classify_gpu(reply["gpu_kernels"], fallback_check.own_kernel_names(roots))
            if gpu["library_share_time"] is not None:
                verdict["flags"] = gpu["flags"]
        self.ctx.draft.fallback = {k: verdict.get(k) for k in (
            "library_share", "library_units", "own_units", "compute_ops", "own_calls", "libraries",
            "library_symbols", "library_backed_modules", "mixed_modules", "unattributed_objects",
            "no_work_observed", "thresholds")} | {"seed": seed, "aten_ops": profile.get("aten_ops", {}),
                                                  "profiled_call_passed": bool(judged["comparison"]["passed"]),
                                                  "symbol_errors": symbols.get("errors"), "gpu": gpu,
                                                  "mapped_objects": mapped,
                                                  "decided_by": "gpu device time" if gpu and
                                                  gpu["library_share_time"] is not None else "dispatch and symbols"}
        self.ev.see(*verdict.get("flags", []))
        if not judged["comparison"]["passed"]:
            per_dist["D1"].update(status="failed", reason="profiled trial: " + str(judged["comparison"]["reason"]))

    # -- rule checks on one forward -------------------------------------------------------------------------------

    def check_input_use(self, cand: dict[str, Any], ref: dict[str, Any], distribution: str) -> None:
        """Rules on how forward treats its inputs, judged against what the reference itself does: writing into an
        input (the reference's inputs are its own; an in-place kernel corrupts a caller's) and returning an output
        that shares storage with an input. Outputs may be right and still break these: verdict ``rejected``."""
        self._check_threads(cand, ref, distribution)
        self._check_strides(cand, ref, distribution)
        if ref.get("mutated_inputs"):  # the reference's own writes, which excuse the same in the candidate
            self.ctx.note("input_use", "reference_mutated_inputs", distribution, ref["mutated_inputs"])
        mutated = sorted(set(cand.get("mutated_inputs", [])) - set(ref.get("mutated_inputs", [])))
        ref_aliases = {tuple(a) for a in ref.get("aliased_outputs", [])}
        aliased = [a for a in cand.get("aliased_outputs", []) if tuple(a) not in ref_aliases]
        if mutated:
            self.ev.see("input_mutated")
            self.ctx.note("input_use", "mutated_inputs", distribution, mutated)
        if aliased:
            self.ev.see("output_aliases_input")
            self.ctx.note("input_use", "aliased_outputs", distribution, aliased)
        if cand.get("guard_violations"):
            self.ev.see("out_of_bounds_write")
            self.ctx.note("input_use", "guard_violations", distribution, cand["guard_violations"])

    def _check_threads(self, cand: dict[str, Any], ref: dict[str, Any], distribution: str) -> None:
        """Threads still alive after forward returned can carry work past the timer's end. The first trial of a
        worker may start a library's thread pool; after that, the thread count must not grow across a call where
        the reference's does not."""
        self.trials_seen += 1
        if self.trials_seen == 1:
            return
        c_before, c_after = (cand.get("threads") or [0, 0])[:2]
        r_before, r_after = (ref.get("threads") or [0, 0])[:2]
        if c_after - c_before > max(0, r_after - r_before):
            self.ev.see("background_threads")
            self.ctx.note("input_use", "thread_growth", distribution, [c_before, c_after])

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
            self.ev.see("degenerate_output")
            self.ctx.note("input_use", "zero_stride_outputs", distribution, bad)

    def _compare_buffers(self, ref_reply: dict[str, Any], cand_reply: dict[str, Any]) -> None:
        tol = TOLERANCES[self.options.precision]
        mismatched = []
        cand_buffers = cand_reply.get("buffers", {})
        names = {r: c for c, r in self.ctx.mapping.pairs.items()}
        for name, ref in ref_reply.get("buffers", {}).items():
            cand = cand_buffers.get(names.get(name, name))
            if cand is None or tuple(cand.shape) != tuple(ref.shape):
                continue
            if cand.dtype != ref.dtype or not judge.compare_tensor(cand, ref, tol).passed:
                mismatched.append(name)
        if mismatched:
            self.ev.see("buffer_mismatch")
            self.notes["buffer_mismatch"] = mismatched
