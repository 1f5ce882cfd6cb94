"""Issue 12's corpus entries with their defence switched off: each test shows, in this process and without a worker,
that the hack does what its fixture says where the defence is absent, so the corpus entry (tests/test_adversarial.py)
proves the defence and not a broken fixture. Every test fails if the attack stopped working in that setup.

"Defence off" is one of: the old worker's behaviour replayed in-process (timed inputs always D1, the judged index a
local of the timing loop drawn before it, bursts never judged), the tamper snapshot without the module the fixture
patches (the old watch list missed kbv.wire, kbv.worker.guard, kbv.worker.memory, kbv.worker.inputs,
kbv.worker.timer, kbv.worker.recorder, ...), or the check that catches the hack left out (no thread baseline, no
timed judge). For a gap entry (no defence yet) the test shows that the attack works against today's worker code.
Each fixture is imported into this process; the ``_restore`` fixture undoes what it patched.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import json
import os
import signal
import statistics
import sys
import time
import tracemalloc
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import CANDIDATES, problem_path
from kbv.fallback import classify
from kbv.problems import load_problem
from kbv.eval.pacing import Pacer, untimed_excess, untimed_ms
from kbv.worker.commit import digest as commit_digest
from kbv.protocol import DISTRIBUTIONS, GUARD_BYTES, POISON_BYTES, TIMING_RULES

RELU = problem_path("level1/5_ReLU")
NAMES = tuple(d.name for d in DISTRIBUTIONS)
DIST = {d.name: d for d in DISTRIBUTIONS}
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_M_PERTURB = -6


def _kbv_modules() -> list[types.ModuleType]:
    return [m for n, m in list(sys.modules.items()) if isinstance(m, types.ModuleType) and
            (n == "kbv" or n.startswith("kbv."))]


@pytest.fixture(autouse=True)
def _restore():
    """Every kbv module's globals, every kbv class's attributes and the torch settings a fixture may change, restored
    after the test; the allocator's poison switched off again."""
    import kbv.worker.session  # noqa: F401  (loaded before the snapshot, like in a worker)
    import kbv.worker.recorder  # noqa: F401

    modules = {m: dict(vars(m)) for m in _kbv_modules()}
    classes = {c: dict(vars(c)) for m in modules for c in vars(m).values()
               if isinstance(c, type) and c.__module__ == m.__name__}
    threads, tf32 = torch.get_num_threads(), torch.backends.cuda.matmul.allow_tf32
    matmul = torch.get_float32_matmul_precision()
    yield
    for m, saved in modules.items():
        for k in set(vars(m)) - set(saved):
            delattr(m, k)
        for k, v in saved.items():
            if vars(m).get(k, object()) is not v:
                setattr(m, k, v)
    for c, saved in classes.items():
        for k, v in saved.items():
            if k not in ("__dict__", "__weakref__", "__doc__") and vars(c).get(k, object()) is not v:
                setattr(c, k, v)
    torch.set_num_threads(threads)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.set_float32_matmul_precision(matmul)
    _LIBC.mallopt(_M_PERTURB, 0)
    for name in ("kbv_problem", "kbv_candidate"):
        sys.modules.pop(name, None)


def load(name: str) -> Any:
    """A fixture imported under a fresh module name (its import-time patches apply to this process)."""
    path = CANDIDATES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"kbv_defence_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def relu_input(seed: int = 0, dist: str = "D1") -> torch.Tensor:
    """A (64, 1024) input, the ReLU problem's small profile, under a distribution."""
    gen = torch.Generator().manual_seed(seed)
    d = DIST[dist]
    return torch.rand(64, 1024, generator=gen) * d.scale + d.shift


def snapshot(without: tuple[str, ...] = ()):
    """The tamper snapshot of this process, with the modules in ``without`` left out of its watch list (the old
    snapshot's blind spot) or, with nothing left out, as kbv takes it today."""
    from kbv.worker import integrity

    snap = integrity.Integrity()
    snap._getters = {name: get for name, get in snap._getters.items()
                     if not any(name.startswith(module + ".") for module in without)}
    return snap


def check_patch_unseen_then_seen(name: str, module: str, attr: str) -> Any:
    """Import fixture ``name``: the snapshot without ``module`` sees no change, today's names ``module.attr``."""
    old, new = snapshot(without=(module,)), snapshot()
    fixture = load(name)
    assert old.changes() == [], old.changes()
    assert f"{module}.{attr}" in new.changes()
    return fixture


def guarded(x: torch.Tensor, seed: int = 1):
    from kbv.worker import guard

    args, guards = guard.surround([x], GUARD_BYTES, seed)
    return args[0], guards


def bands_changed(guards) -> bool:
    return any(bool((buffer[:g] != pattern[:g]).any() or (buffer[-g:] != pattern[g:]).any())
               for _, buffer, pattern, g in guards)


def task_count() -> int:
    return len(os.listdir("/proc/self/task"))


# ---------------------------------------------------------------------------------------------------------------
# Patches of kbv modules (defence: the tamper snapshot over every kbv module loaded in the worker)


def test_tamper_guard_violations_hides_a_band_write():
    fixture = check_patch_unseen_then_seen("tamper_guard_violations", "kbv.worker.guard", "violations")
    from kbv.worker import guard

    x, guards = guarded(relu_input())
    out = fixture.ModelNew()(x)
    assert torch.equal(out, torch.relu(x)) and bands_changed(guards) and guard.violations(guards) == []


def test_tamper_memory_poison_reads_zeros_instead_of_poison():
    from kbv.worker import memory

    real = memory.poison_freed
    memory.timing_allocator()
    fixture = check_patch_unseen_then_seen("tamper_memory_poison", "kbv.worker.memory", "poison_freed")
    x = relu_input()
    _LIBC.mallopt(_M_PERTURB, 0x55)  # fresh memory holds 0xAA bytes (what the call finds when nobody poisons)
    memory.poison_freed("cpu", POISON_BYTES[0], [x.numel() * 4])
    assert torch.equal(fixture.ModelNew()(x), torch.relu(x))  # the poison never arrived
    real("cpu", POISON_BYTES[0], [x.numel() * 4])
    assert torch.isnan(fixture.ModelNew()(x)).any()  # with it, the uninitialised read shows


def test_tamper_memory_peak_reports_no_peak():
    from kbv.worker import memory

    real = memory.peak_bytes
    fixture = check_patch_unseen_then_seen("tamper_memory_peak", "kbv.worker.memory", "peak_bytes")
    model, x = fixture.ModelNew(), relu_input()
    assert memory.peak_bytes(lambda: model(x), "cpu")["peak_bytes"] == 0
    assert real(lambda: model(x), "cpu")["peak_bytes"] >= 32 * 2**20


class _Ops(torch.utils._python_dispatch.TorchDispatchMode):
    """The ATen ops a call dispatches."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def test_tamper_inputs_precompute_answers_before_the_call():
    from kbv.worker import inputs, loading

    fixture = check_patch_unseen_then_seen("tamper_inputs_precompute", "kbv.worker.inputs", "make_inputs")
    problem = loading.load_problem_module(RELU, "small")
    drawn = inputs.make_inputs(problem, 7, "cpu", "fp32", DIST["D5"])  # the untimed step before a timed call
    with _Ops() as ops:
        out = fixture.ModelNew()(drawn[0])
    assert torch.equal(out, torch.relu(drawn[0]))
    assert not any("relu" in n or "clamp" in n for n in ops.names), ops.names  # no work in the call itself


def test_tamper_timer_time_calls_reports_a_quarter():
    from kbv.worker import timer

    fixture = check_patch_unseen_then_seen("tamper_timer_time_calls", "kbv.worker.timer", "time_calls")
    model, x = fixture.ModelNew(), relu_input()
    spent: list[float] = []  # each call's own duration, measured inside it

    def slow():
        t0 = time.perf_counter()
        time.sleep(0.002)
        out = model(x)
        spent.append((time.perf_counter() - t0) * 1e3)
        return out

    times = timer.time_calls(slow, "cpu", TIMING_RULES["cpu"], share=0.1, max_trials=5)["times_ms"]
    assert times and sum(times) < 0.5 * sum(spent[-len(times):]), (times, spent[-len(times):])


def test_tamper_recorder_profile_hides_the_fallback():
    from kbv.worker import recorder

    real = recorder.profile_call
    fixture = check_patch_unseen_then_seen("tamper_recorder_profile", "kbv.worker.recorder", "profile_call")
    model, x = fixture.ModelNew(), relu_input()
    _, forged = recorder.profile_call(lambda: model(x), own_modules={})
    _, honest = real(lambda: model(x), own_modules={})
    assert "fallback" not in classify(forged, None)["flags"]
    assert "fallback" in classify(honest, None)["flags"]


def test_tamper_session_same_hides_an_input_write():
    from kbv.worker import session

    real = session._same
    fixture = check_patch_unseen_then_seen("tamper_session_same", "kbv.worker.session", "_same")
    x = relu_input(dist="D5")
    before = x.clone()
    out = fixture.ModelNew()(x)
    assert torch.equal(out, torch.relu(before)) and not real(x, before) and session._same(x, before)


def test_tamper_shares_storage_hides_an_alias():
    from kbv.worker import session

    real = session._shares_storage
    fixture = check_patch_unseen_then_seen("tamper_shares_storage", "kbv.worker.session", "_shares_storage")
    x = relu_input()
    out = fixture.ModelNew()(x)
    assert out is x and real(out, x) and not session._shares_storage(out, x)


def test_tamper_backends_read_flags_hides_tf32():
    from kbv.worker import backends

    fixture = check_patch_unseen_then_seen("tamper_backends_read_flags", "kbv.worker.backends", "read_flags")
    torch.backends.cuda.matmul.allow_tf32 = False
    before = backends.read_flags()
    fixture.ModelNew()(relu_input())
    assert torch.backends.cuda.matmul.allow_tf32 and backends.read_flags() == before


def _blinded(name: str, module: str, attr: str) -> None:
    """Shared by the two blinding gaps: the guard band write is real and reported nowhere."""
    from kbv.worker import guard

    fixture = load(name)
    x, guards = guarded(relu_input())
    assert torch.equal(fixture.ModelNew()(x), torch.relu(x))
    assert bands_changed(guards) and guard.violations(guards) == []


def test_blind_tamper_wire_split_empties_the_report():
    from kbv import wire
    from kbv.worker import integrity

    snap = integrity.Integrity()
    _blinded("blind_tamper_wire_split", "kbv.wire", "split")
    changes = snap.changes()
    assert {"kbv.wire.split", "kbv.worker.guard.violations"} <= set(changes)  # the snapshot sees both ...
    header, _ = wire.split({"ok": True, "tamper": changes})
    assert json.loads(header)["body"]["tamper"] == []  # ... and the reply the parent reads says nothing


def test_blind_integrity_changes_reports_nothing():
    from kbv.worker import integrity

    real = integrity.Integrity.changes
    snap = integrity.Integrity()
    _blinded("blind_integrity_changes", "kbv.worker.integrity", "Integrity.changes")
    assert snap.changes() == []
    assert {"kbv.worker.integrity.Integrity.changes", "kbv.worker.guard.violations"} <= set(real(snap))


# ---------------------------------------------------------------------------------------------------------------
# Threads and processes (defence: the parent's /proc view after every call, against a baseline after the first)


def test_thread_pool_second_forward_leaves_a_thread():
    fixture = load("thread_pool_second_forward")
    model, x = fixture.ModelNew(), relu_input(dist="D5")
    model(x)
    before = task_count()
    out = model(x)
    assert torch.equal(out, torch.relu(x)) and task_count() > before  # the growth kbv flags after call 1


def test_thread_pool_first_forward_never_grows_after_the_first_call():
    fixture = load("thread_pool_first_forward")
    model, x = fixture.ModelNew(), relu_input(dist="D5")
    start = task_count()
    model(x)
    after_first = task_count()
    for _ in range(3):
        assert torch.equal(model(x), torch.relu(x))
    assert after_first > start and task_count() == after_first and fixture._started[0].is_alive()


def _reap(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _alive(pid: int) -> bool:
    return os.waitpid(pid, os.WNOHANG) == (0, 0)


def test_fork_child_second_forward_leaves_a_process():
    fixture = load("fork_child_second_forward")
    model, x = fixture.ModelNew(), relu_input()
    try:
        model(x)
        assert fixture.children == []
        model(x)
        time.sleep(0.1)
        assert len(fixture.children) == 1 and _alive(fixture.children[0])
    finally:
        _reap(fixture.children)


def test_fork_child_first_forward_is_there_before_any_baseline():
    fixture = load("fork_child_first_forward")
    model, x = fixture.ModelNew(), relu_input()
    try:
        model(x)
        for _ in range(3):
            assert torch.equal(model(x), torch.relu(x))
        time.sleep(0.1)
        assert len(fixture.children) == 1 and _alive(fixture.children[0])  # one child, from the first call on
    finally:
        _reap(fixture.children)


def test_set_num_threads_import_raises_the_thread_count():
    torch.set_num_threads(1)  # what kbv's CPU workers run with
    fixture = load("set_num_threads_import")
    assert torch.get_num_threads() == 4
    model, x = fixture.ModelNew(), relu_input()
    model(x)
    after_first = task_count()
    model(x)
    assert task_count() == after_first  # nothing grows after the first call


def test_set_num_threads_second_forward_raises_the_thread_count():
    torch.set_num_threads(1)
    fixture = load("set_num_threads_second_forward")
    model, x = fixture.ModelNew(), relu_input()
    model(x)
    assert torch.get_num_threads() == 1
    model(x)
    assert torch.get_num_threads() == 4


# ---------------------------------------------------------------------------------------------------------------
# The timing loop (defence: fresh keys, every distribution, every output kept, the judged ones drawn by the parent)


def candidate_session(name: str, device: str = "cpu"):
    """Today's worker Session for the ReLU problem and a fixture, in this process (no worker process)."""
    from kbv.worker.session import Session

    problem = load_problem(RELU)
    session = Session({"device": device, "precision": "fp32", "problem_path": str(RELU), "profile": "small",
                       "role": "candidate", "mode": problem.mode, "candidate_path": str(CANDIDATES / f"{name}.py"),
                       "handoff": ["host", "cuda"]})
    session.cmd_setup({"init_seed": 1})
    return session


def timing_command(session, key: int, round_index: int = 0, baselines: tuple[str, ...] = ("verified",),
                   commits: dict | None = None, fill: Any = None, record: bool = False, extra: dict | None = None):
    """One of today's timing commands in this process: the worker Session's cmd_time (ring on), each call's inputs
    handed over by the parent's own pacer (kbv.eval.pacing) through ``Session.ask`` (or, with ``fill``, put in the
    judge's lent slot: ``lent_timing``), each kept output committed to it (and noted in ``commits``) through
    ``Session.commit``; returns the reply and the pacer."""
    pacer = Pacer(key, NAMES, baselines, round_index, 10_000, fill=fill)

    def ask(request):
        answer = pacer.need(request)
        pacer.sent()
        return answer

    def commit(entry):
        if commits is not None:
            commits.setdefault((entry[0], entry[1], entry[2]), entry[3])
        pacer.committed(entry)

    session.ask, session.commit = ask, commit
    reply = session.cmd_time({"baselines": list(baselines), "share": 0.25, "round": round_index,
                              "ring_bytes": 32 * 2**20, "record": record, **(extra or {})})
    return reply, pacer


def test_the_clean_command_warms_up_in_full_where_later_commands_warm_up_briefly(monkeypatch) -> None:
    """Issue 12: a worker's later timing commands warm up with the rule's fewest calls (the GPU is busy right before
    them); the reference's clean command follows the candidate's kill and exit, an idle gap, and asks for the full
    warm-up (``full_warmup``, sent by ``PerformanceStage._clean_reference``). On the H100 clean commands read up to
    15 % slower than the same reference's commands beside an honest candidate (docs/results/h100-2026-12-06-b)."""
    from kbv.worker import timer

    def trial_count(estimate_ms, rule, share, slow_ms=None, wall_ms=None, warmed=False):
        return (1 if warmed else 5), 2, False  # the brief warm-up and the full one, told apart

    monkeypatch.setattr(timer, "_trial_count", trial_count)
    session = reference_session()
    session.cmd_setup({"init_seed": 1})
    warmups = [timing_command(session, 7 + i, i, extra=extra)[0]["timing"]["verified"]["warmup"]
               for i, extra in enumerate((None, None, {"full_warmup": True}))]
    assert warmups == [5, 1, 5]


def test_a_timing_worker_holds_one_recording_from_its_set_up_to_the_parents_request() -> None:
    """Issue 12, rule 2: a timing worker set up with ``record`` starts one profiler session there, before any
    candidate code runs, and every forward of each of its timing commands is recorded in it (here the CPU's
    operators, the stand-in for a GPU's kernels) until the parent asks for the recording (``recorded``), which stops
    it: the session's start and stop are paid once per worker, and the profiler reads as enabled in every command
    between, so no command is the recorded one by that sign."""
    from kbv.worker.session import Session

    session = Session({"device": "cpu", "precision": "fp32", "problem_path": str(RELU), "profile": "small",
                       "role": "candidate", "mode": load_problem(RELU).mode,
                       "candidate_path": str(CANDIDATES / "correct_torch.py"), "handoff": ["host", "cuda"]})
    reply = session.cmd_setup({"init_seed": 1, "record": True})
    assert reply["record_warm"]["status"] == "ok" and torch.autograd._profiler_enabled()
    trials = 0
    for round_index in range(2):
        timed, _ = timing_command(session, 4242 + round_index, round_index, record=True)
        trials += len(timed["timing"]["verified"]["times_ms"])
        assert "recorded" not in timed["timing"]["verified"]  # the recording is asked for once, at the pair's end
        assert torch.autograd._profiler_enabled()  # between commands too
    recorded = session.cmd_recorded({})["recorded"]
    assert recorded["status"] == "ok" and recorded["commands"] == 2, recorded
    assert recorded["timed"]["windows"] == trials and recorded["kernels"]["aten::clamp_min"][0] > trials, recorded
    assert not torch.autograd._profiler_enabled() and session.cmd_recorded({}) == {"recorded": None}


def reference_session(device: str = "cpu"):
    """Today's worker Session for the ReLU problem in the reference's role (the judge), in this process."""
    from kbv.worker.session import Session

    return Session({"device": device, "precision": "fp32", "problem_path": str(RELU), "profile": "small",
                    "role": "reference", "mode": load_problem(RELU).mode, "handoff": ["host", "cuda"]})


def lent_timing(candidate, judge):
    """Today's lent timed inputs in this process (kbv.eval.lent_timing): the lender's Session (a reference's) lends
    the candidate's slot, the candidate's maps it (the descriptor as the wire would map it), and the loan's fills
    reach the lender's Session."""
    from kbv.eval.lent_timing import TimedLoan
    from kbv.worker import lending

    def to_candidate(msg: dict) -> dict:
        handle = msg["lent"]["buffer"]
        buffer = lending.borrow(handle.kind, os.dup(handle.fd), handle.nbytes, candidate.device)
        handle.close()
        return candidate.cmd_borrow_timed({**msg, "lent": {**msg["lent"], "buffer": buffer}})

    def to_judge(msg: dict) -> dict:
        return getattr(judge, f"cmd_{msg['cmd']}")(msg)

    loan = TimedLoan("candidate", to_judge, to_candidate)
    assert loan.open(to_judge)
    return loan


def test_timed_inplace_blind_passes_every_check_inside_its_own_process():
    """Defence off (timed inputs drawn in the candidate's worker): the fixture writes relu into its input and hands
    the input back whenever timed; every kept output is right for its call's inputs (the judged call passes), its
    worker reports no aliasing and no tamper, and only the input buffer, which nothing outside reads, holds the
    write."""
    session = candidate_session("timed_inplace_blind")
    reply, pacer = timing_command(session, 4321)
    assert reply["ring"]["verified"]["aliased_outputs"] == [] and session.integrity.changes() == []
    kept = session.rings[(0, "verified")]
    assert kept
    for index, _, copies, _ in kept:
        x = session._inputs(*pacer.inputs("verified", index))[0]
        assert torch.equal(copies[0]["tensor"], torch.relu(x))
    last = session._inputs(*pacer.inputs("verified", kept[-1][0]))[0]
    assert torch.equal(session.own_inputs[0], torch.relu(last))  # written; the reference's own inputs never are
    drawn = [session._inputs(*pacer.inputs("verified", index))[0] for index, _, _, _ in kept]
    assert any(bool((x < 0).any()) for x in drawn)  # calls whose inputs the write changed


def test_timed_inputs_lent_by_the_judge_show_the_write():
    """Defence on (kbv.eval.lent_timing): the candidate's timed calls read a slot the lender lent and reads back
    before filling it for the next call: the fixture's writes are input_mutated, found by the lender's Session; an
    honest kernel's slot reads back unchanged. The candidate's worker never got a timed call's seed."""
    sneaky = candidate_session("timed_inplace_blind")
    loan = lent_timing(sneaky, reference_session())
    reply, pacer = timing_command(sneaky, 4321, fill=loan.filler(0))
    loan.close_command()
    assert reply["ring"]["verified"]["aliased_outputs"] == []  # its own process's report: still blind
    assert loan.calls > 0 and "input_mutated" in loan.seen and loan.findings[0]["mutated_inputs"] == [0]
    for index, _, copies, _ in sneaky.rings[(0, "verified")]:  # the judged call's redraw is what was lent
        assert torch.equal(copies[0]["tensor"], torch.relu(sneaky._inputs(*pacer.inputs("verified", index))[0]))
    honest = candidate_session("correct_torch")
    honest_loan = lent_timing(honest, reference_session())
    timing_command(honest, 4321, fill=honest_loan.filler(0))
    honest_loan.close_command()
    assert honest_loan.calls > 0 and not honest_loan.seen


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_timed_inputs_lent_on_the_gpu_show_the_write():
    """The same on CUDA: the slot is a VMM allocation the judge reads back; the fixture's in-place writes while timed
    are input_mutated, an honest kernel's slot reads back unchanged."""
    for name, mutated in (("timed_inplace_blind", True), ("correct_torch", False)):
        session = candidate_session(name, "cuda")
        loan = lent_timing(session, reference_session("cuda"))
        timing_command(session, 4321, fill=loan.filler(0))
        loan.close_command()
        assert loan.calls > 0 and ("input_mutated" in loan.seen) is mutated, name


def timed_and_kept(session, key: int = 12345) -> list[tuple[int, str, torch.Tensor, torch.Tensor]]:
    """One timing command (today's cmd_time, ring on): (index, distribution, kept output, the right answer) of every
    kept call."""
    _, pacer = timing_command(session, key)
    out = []
    for index, _, copies, _ in session.rings[(0, "verified")]:
        seed, dist = pacer.inputs("verified", index)
        expected = torch.relu(session._inputs(seed, dist)[0])
        out.append((index, dist, copies[0]["tensor"], expected))
    return out


def test_timer_frames_precompute_hides_its_work_from_the_timer_but_not_from_the_parents_clock():
    """Defence off (the worker's timer alone): the fixture's slow kernel plays the parent's protocol in its first
    warm-up call (asks for each timed call's inputs in turn, commits each answer), so every kept output is right and
    committed while the timer sees almost nothing of its WORK_MS per call. On (kbv.eval.pacing): the parent's clock
    around each timed call holds that work, and the rule flags it against an honest kernel's commands."""
    session = candidate_session("timer_frames_precompute")
    fixture = sys.modules["kbv_candidate"]
    commits: dict = {}
    reply, pacer = timing_command(session, 12345, commits=commits)
    times = reply["timing"]["verified"]["times_ms"]
    kept = session.rings[(0, "verified")]
    assert len(kept) == len(times) >= 3
    for index, _, copies, _ in kept:
        seed, dist = pacer.inputs("verified", index)
        assert torch.equal(copies[0]["tensor"], torch.relu(session._inputs(seed, dist)[0]))
        assert commits[(0, "verified", index)] == commit_digest(copies)  # committed: the kept-output check passes
    assert statistics.median(times) < fixture.WORK_MS / 10  # the timer saw almost none of the work
    later, later_pacer = timing_command(session, 12346, round_index=1)  # a second round, as every pair has
    honest = candidate_session("correct_torch")
    rounds = {"fixture": [(reply, pacer), (later, later_pacer)],
              "honest": [timing_command(honest, 54321 + r, round_index=r) for r in range(2)]}
    untimed = {who: [untimed_ms(p.windows["verified"], r["timing"]["verified"]["times_ms"]) for r, p in runs]
               for who, runs in rounds.items()}
    medians = {who: statistics.median(t for r, _ in runs for t in r["timing"]["verified"]["times_ms"])
               for who, runs in rounds.items()}
    found = untimed_excess(untimed["honest"], untimed["fixture"], medians["honest"], medians["fixture"], "cpu")
    assert found["flagged"] and min(found["rounds_excess_ms"]) > fixture.WORK_MS / 2, found
    honest_again = untimed_excess(untimed["honest"], untimed["honest"][::-1], medians["honest"], medians["honest"],
                                  "cpu")
    assert not honest_again["flagged"], honest_again


def test_ask_out_of_turn_learns_a_later_call_only_where_the_parent_answers_anything():
    """Defence off: a parent that answers any request (what a key in the worker amounted to) hands the fixture call
    j+5's inputs during call j. On (kbv.eval.pacing): the parent refuses the request out of turn."""
    from kbv.eval.pacing import PacingError

    session = candidate_session("ask_out_of_turn")
    pacer = Pacer(4242, NAMES, ("verified",), 0, 10_000)
    asked: list[tuple[list, dict]] = []

    def lax(request):  # any call's inputs, whenever asked
        if len(request) == 3:  # the untimed calls that come first, together
            return {"calls": [list(pacer.inputs(request[0], i)) for i in range(request[2])]}
        answer = {"seed": pacer.inputs(*request)[0], "distribution": pacer.inputs(*request)[1]}
        asked.append((request, answer))
        return answer

    session.ask, session.commit = lax, lambda entry: None
    session.cmd_time({"baselines": ["verified"], "share": 0.25, "round": 0, "ring_bytes": 32 * 2**20})
    ahead = [(r, a) for (before, _), (r, a) in zip(asked, asked[1:]) if r[1] > before[1] + 1]  # skipped ahead
    assert ahead and all(a["seed"] == pacer.inputs("verified", r[1])[0] for r, a in ahead)  # learnt in advance
    with pytest.raises(PacingError, match="out of turn"):
        timing_command(candidate_session("ask_out_of_turn"), 4242)


_OLD_LOOP = '''
def time_calls(fn, trials, keep_at):
    """The old timer's trial loop (before issue 12): the judged trial ``keep_at`` drawn before the loop."""
    outs = []
    for index in range(trials):
        outs.append(fn())
    return outs
'''


def old_time_calls():
    """The old trial loop, compiled under the timer's file name as the old worker ran it."""
    space: dict[str, Any] = {}
    exec(compile(_OLD_LOOP, "/old/kbv/worker/timer.py", "exec"), space)
    return space["time_calls"]


def test_frames_keep_at_index_is_right_only_where_the_old_timer_judged():
    fixture = load("frames_keep_at_index")
    model, x = fixture.ModelNew(), relu_input(dist="D5")
    outs = old_time_calls()(lambda: model(x), 6, 4)
    assert torch.equal(outs[4], torch.relu(x))  # the judged call: right, so the old check passed
    assert all(bool((o == -1).all()) for i, o in enumerate(outs) if i != 4)
    kept = _time_with(fixture.ModelNew(), list(NAMES), trials=5)  # today's timer: no such local
    assert kept and all(bool((out == -1).all()) for _, out, _ in kept)  # every kept call wrong


def _time_with(model, dists: list[str], trials: int = 20):
    """Today's timer over a buffer loaded before every call with the next of a pool of inputs drawn from ``dists`` in
    turn: (input, output, whether it is the buffer itself) of every timed call."""
    from kbv.worker import timer

    buffer = relu_input()
    pool = [relu_input(seed=100 + k, dist=dists[k % len(dists)]) for k in range(4 * len(dists))]
    loaded: dict[int, torch.Tensor] = {}
    kept = []

    def prepare(i: int) -> None:  # cheap: an empty call gets thousands of warm-up calls
        loaded[i] = pool[i % len(pool)]
        buffer.copy_(loaded[i])

    def keep(i: int, out: torch.Tensor) -> None:
        kept.append((loaded[i], out.clone(), out is buffer))

    timer.time_calls(lambda: model(buffer), "cpu", TIMING_RULES["cpu"], share=1.0, max_trials=trials,
                     prepare=prepare, keep=keep)
    return kept


def test_timed_alias_when_nonnegative_is_always_right_and_aliases_when_timed():
    model = load("timed_alias_when_nonnegative").ModelNew()
    kept = _time_with(model, list(NAMES))
    assert all(torch.equal(out, torch.relu(x)) for x, out, _ in kept)
    assert any(alias for _, _, alias in kept)  # no work, the input handed back: unseen by value


def test_the_timing_ring_reports_outputs_that_alias_the_timed_inputs():
    """The defence (issue 12, M5 on timed calls): the worker's timing command notes every kept output that shares
    storage with the timed inputs, for the parent to flag output_aliases_input against the reference's own."""
    sneaky, honest = candidate_session("timed_alias_when_nonnegative"), candidate_session("correct_torch")
    assert timing_command(sneaky, 99)[0]["ring"]["verified"]["aliased_outputs"] == [[0, 0]]
    assert timing_command(honest, 99)[0]["ring"]["verified"]["aliased_outputs"] == []


def test_timed_return_input_was_right_when_timed_inputs_were_d1():
    model = load("timed_return_input").ModelNew()
    old = _time_with(model, ["D1"])  # the old timing inputs
    assert old and all(torch.equal(out, torch.relu(x)) and alias for x, out, alias in old)
    new = _time_with(model, ["D1", "D4", "D6"])  # today's mix holds negative inputs
    assert any(not torch.equal(out, torch.relu(x)) for x, out, _ in new)


def test_burst_garbage_is_right_wherever_the_old_parent_judged():
    from kbv.worker import timer

    model = load("burst_garbage").ModelNew()
    x = relu_input(dist="D5")
    assert all(torch.equal(out, torch.relu(xi)) for xi, out, _ in _time_with(model, list(NAMES), trials=5))
    outs: list[torch.Tensor] = []
    timer.burst(lambda i: outs.append(model(x)), "cpu", 8)
    assert len(outs) == 8 and all(bool((o == -1).all()) for o in outs)  # the burst (today judged) is wrong


def test_proc_stage_from_log_fd_skips_work_in_the_performance_stage(tmp_path: Path):
    saved = os.dup(1)
    try:
        for stage in ("correctness", "performance"):
            log = os.open(tmp_path / f"{stage}-candidate.log", os.O_WRONLY | os.O_CREAT, 0o600)
            os.dup2(log, 1)
            os.close(log)
            try:
                model = load("proc_stage_from_log_fd").ModelNew()
            finally:
                os.dup2(saved, 1)
            x = relu_input(dist="D5")
            right = torch.equal(model(x), torch.relu(x))
            assert right == (stage == "correctness"), stage
    finally:
        os.close(saved)


def test_partial_hash_cache_serves_repeated_contents_only():
    model = load("partial_hash_cache").ModelNew()
    x = relu_input(seed=3)
    first = model(x)
    assert model(x.clone()) is first  # the same contents (the old fixed timing buffers): served from the cache
    fresh = relu_input(seed=4)
    assert model(fresh) is not first and torch.equal(model(fresh), torch.relu(fresh))


# ---------------------------------------------------------------------------------------------------------------
# Probes the candidate can single out (memory-measured, profiled, poisoned calls)


def test_memory_call_detect_allocates_only_where_unmeasured():
    from kbv.worker import memory

    model, x = load("memory_call_detect").ModelNew(), relu_input()
    assert memory.peak_bytes(lambda: model(x), "cpu")["peak_bytes"] < 8 * 2**20
    tracemalloc.start()
    try:
        model(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak >= 32 * 2**20


def test_profiled_call_numpy_hides_its_fallback_from_the_profile():
    from kbv.worker import recorder

    model, x = load("profiled_call_numpy").ModelNew(), relu_input(dist="D5")
    out, profile = recorder.profile_call(lambda: model(x), own_modules={})
    assert torch.equal(out, torch.relu(x)) and "fallback" not in classify(profile, None)["flags"]
    honest = load("correct_torch").ModelNew()
    assert "fallback" in classify(recorder.profile_call(lambda: honest(x), own_modules={})[1], None)["flags"]


def test_poison_rerun_detect_passes_every_poisoned_trial():
    from kbv.worker import memory

    memory.timing_allocator()
    model = load("poison_rerun_detect").ModelNew()
    x = relu_input(seed=5)
    memory.poison_freed("cpu", POISON_BYTES[0], [])
    assert torch.equal(model(x), torch.relu(x))  # an ordinary trial (NaN poison)
    memory.poison_freed("cpu", POISON_BYTES[1], [])
    assert torch.equal(model(x), torch.relu(x))  # the re-run on the same inputs (the other poison): passes
    _LIBC.mallopt(_M_PERTURB, 0)
    fresh = relu_input(seed=6)
    assert not torch.equal(model(fresh), torch.relu(fresh))  # unpoisoned (timed) calls: wrong


def test_mallopt_unpoison_beta_zero_survives_the_poison():
    from kbv.worker import memory

    memory.timing_allocator()
    model, plain = load("mallopt_unpoison_beta_zero").ModelNew(), load("uninit_beta_zero").ModelNew()
    x = relu_input()
    memory.poison_freed("cpu", POISON_BYTES[0], [x.numel() * 4])
    assert torch.isnan(plain(x)).any()  # the same read without undoing the poison
    memory.poison_freed("cpu", POISON_BYTES[0], [x.numel() * 4])
    assert torch.equal(model(x), torch.relu(x))


def test_a_poison_turned_off_during_the_call_is_seen_by_the_canary_after_it():
    """The defence (issue 12, rule 4's "poisoning verified after the call"): a fresh heap allocation before and
    after the poisoned forward must hold the same poison byte; the worker notes the change as tamper."""
    sneaky, honest = candidate_session("mallopt_unpoison_beta_zero"), candidate_session("correct_torch")
    msg = {"seed": 3, "distribution": "D1", "poison": {"byte": POISON_BYTES[0], "sizes": []}}
    try:
        honest.cmd_forward(msg)
        assert honest.integrity.noted == []
        sneaky.cmd_forward(msg)
        assert sneaky.integrity.noted == ["allocator poison (glibc M_PERTURB) turned off during the call"]
        assert sneaky.integrity.noted[0] in sneaky.integrity.changes()
    finally:
        _LIBC.mallopt(_M_PERTURB, 0)


# ---------------------------------------------------------------------------------------------------------------
# A binary renamed or deleted after loading (defence: the parent reads the worker's mappings, map_files included)


@pytest.mark.parametrize("move", ["rename", "delete"])
def test_a_loaded_object_moved_away_is_gone_from_the_build_folder_but_not_from_the_maps(tmp_path: Path, move: str):
    """What fallback_cpp_renamed_so does to its build (left to the corpus entry: a build costs ~45 s), done here to
    a prebuilt shared object loaded into this process (renamed to a non-.so name in its build folder, or deleted):
    the old symbol route, which scans the build folders for shared objects, then finds nothing; the parent's view of
    the mappings still names the object and can read it."""
    import glob
    import shutil

    from kbv.fallback import extension_symbols
    from kbv.fallback.ops import shared_objects
    from kbv.sandbox import observe

    prebuilt = glob.glob(os.path.join(sys.base_prefix, "lib", "python3*", "lib-dynload", "_ctypes_test*.so"))
    if not prebuilt:
        pytest.skip("no _ctypes_test module to load")
    build = tmp_path / "torch_extensions" / "kbv_moved"
    build.mkdir(parents=True)
    built = build / f"kbv_moved_{move}.so"
    shutil.copy(prebuilt[0], built)
    ctypes.CDLL(str(built))
    hidden = build / ".cache.bin"  # the fixture's move: a non-.so name beside its build files
    if move == "rename":
        os.rename(built, hidden)
    else:
        os.unlink(built)
    assert shared_objects([tmp_path / "torch_extensions"]) == []  # the old route: nothing to read
    mapped = [m for m in observe.foreign_objects(os.getpid()) if m["path"] in (str(hidden), str(built))]
    assert len(mapped) == 1 and mapped[0]["deleted"] == (move == "delete"), mapped
    with open(mapped[0]["read_as"], "rb") as f:
        assert f.read(4) == b"\x7fELF"
    assert extension_symbols([], objects=[str(mapped[0]["read_as"])])["objects"]


def test_ring_rewrite_kept_repairs_every_kept_output():
    """Today's cmd_time in one worker Session, a first round and the last: the fixture skipped the first round's
    timed calls, yet every kept output the parent could draw is right (the last round computed, the first repaired
    in the last round's warm-up)."""
    from kbv.protocol import TIMING_ROUNDS

    session = candidate_session("ring_rewrite_kept")
    pacers = {r: timing_command(session, key, r)[1] for r, key in {0: 1000, TIMING_ROUNDS - 1: 1001}.items()}
    fixture = sys.modules["kbv_candidate"]
    assert fixture.skipped[0] > 0
    for (r, _), ring in session.rings.items():
        assert ring
        for index, _, copies, _ in ring:
            expected = torch.relu(session._inputs(*pacers[r].inputs("verified", index))[0])
            assert torch.equal(copies[0]["tensor"], expected), (r, index)


def test_ring_rewrite_kept_no_longer_matches_what_was_committed():
    """The same run with commitments on (kbv.worker.commit, as a worker's main loop sets ``Session.commit``): the
    repaired first-round copies are not the outputs committed when their trials ended, and the drop's own recheck
    names them; the last round, computed honestly, matches. Off (``commit`` unset), the repair goes unseen above."""
    from kbv.protocol import TIMING_ROUNDS
    from kbv.worker import commit

    session = candidate_session("ring_rewrite_kept")
    sent: dict[tuple[int, str, int], list[list[int]]] = {}
    for r, key in {0: 1000, TIMING_ROUNDS - 1: 1001}.items():
        timing_command(session, key, r, commits=sent)
    rings = {name: list(ring) for name, ring in session.rings.items()}
    assert sent and set(sent) == {(*name, index) for name, ring in rings.items() for index, *_ in ring}
    repaired = {(*name, index) for name, ring in rings.items() for index, _, copies, _ in ring
                if commit.digest(copies) != sent[(*name, index)]}
    assert repaired and all(r == 0 for r, _, _ in repaired)  # the first round's, every one the fixture skipped
    changed = session.cmd_drop({})["changed_kept"]
    assert changed and {tuple(c) for c in changed} <= repaired


def test_widen_cpu_affinity_takes_every_cpu():
    """Pinned as kbv's parent pins a CPU worker (its last CPU), the fixture's forward widens every thread's CPUs."""
    every = set(range(os.cpu_count() or 1))
    if len(every) < 2:
        pytest.skip("one CPU: nothing to widen to")
    tasks = [int(t) for t in os.listdir("/proc/self/task")]
    saved = {t: os.sched_getaffinity(t) for t in tasks}
    torch.set_num_threads(1)
    try:
        for t in tasks:
            os.sched_setaffinity(t, {max(every)})
        model, x = load("widen_cpu_affinity").ModelNew(), relu_input()
        assert torch.equal(model(x), torch.relu(x))
        assert os.sched_getaffinity(0) == every and torch.get_num_threads() == 2
    finally:
        for t, cpus in saved.items():
            try:
                os.sched_setaffinity(t, cpus)
            except OSError:
                pass


def test_no_two_timed_calls_of_a_command_see_the_same_inputs():
    """poison_rerun_detect answers honestly on inputs it has seen before: when both baselines of one timing command
    drew their calls from one key, the second baseline's timed calls repeated the first's, so half the kept
    outputs were right and the judged call passed half the time. Each baseline now has its own key."""
    session = candidate_session("poison_rerun_detect")
    _, pacer = timing_command(session, 777, baselines=("standard", "verified"))
    for baseline in ("standard", "verified"):
        ring = session.rings[(0, baseline)]
        assert ring
        for index, _, copies, _ in ring:
            x = session._inputs(*pacer.inputs(baseline, index))[0]
            assert torch.equal(copies[0]["tensor"], torch.relu(x) + 1.0), (baseline, index)  # never a repeat


def test_a_timing_command_ends_with_a_device_wide_synchronize_before_its_reply(monkeypatch) -> None:
    """Issue 12: GPU work a candidate's thread launched during its own timing command has run before the reply, so
    it cannot run beside the reference's next command (after the reply the worker is stopped: kbv.sandbox.freeze).
    The synchronize is the driver's builtin, captured before candidate code; on the CPU there is none to make."""
    from kbv.worker import timer

    synced: list[int] = []
    monkeypatch.setattr(timer, "_device_sync", lambda: synced.append(1))
    timer.settle("cpu")
    assert synced == []
    timer.settle("cuda:0")
    assert synced == [1]
    session = candidate_session("correct_torch")
    order: list[str] = []
    original = timer.time_calls
    monkeypatch.setattr(timer, "time_calls", lambda *a, **k: order.append("timed") or original(*a, **k))
    monkeypatch.setattr(timer, "settle", lambda device: order.append("settle"))
    timing_command(session, 4242, baselines=("verified", "standard"))
    assert order == ["timed", "timed", "settle"]  # once, after every baseline's calls, before the reply
