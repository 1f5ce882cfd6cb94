"""Sharing a GPU between pairs (``--gpu-share``, kbv.eval.gate): correctness runs overlap, timing has the device to
itself, and a waiting timing stage is not starved. Driven on the CPU with threads and a fake evaluation."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import problem_path
from kbv.eval import EvalOptions, runner
from kbv.eval.gate import DeviceGate
from kbv.eval.options import OptionsError
from kbv.problems import load_problem
from kbv.problems.candidates import Candidate, Pair

CANDIDATE = Path(__file__).parent / "candidates" / "correct_torch.py"


def test_correctness_runs_overlap_and_timing_waits_for_them_to_leave():
    gate, events = DeviceGate(), []
    inside = threading.Barrier(2, timeout=5)

    def correctness(i):
        with gate.shared():
            inside.wait()  # both are inside at once: they overlap
            events.append(("c-in", i))
            time.sleep(0.1)
            events.append(("c-out", i))

    def timing():
        time.sleep(0.03)
        with gate.exclusive():
            events.append(("t-in", 0))

    threads = [threading.Thread(target=correctness, args=(i,)) for i in range(2)] + [threading.Thread(target=timing)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert events[-1] == ("t-in", 0)  # timing entered only once both correctness runs had left


def test_a_waiting_timing_stage_holds_back_new_correctness_runs():
    gate, order = DeviceGate(), []
    first_in, timing_waits = threading.Event(), threading.Event()

    def first():
        with gate.shared():
            first_in.set()
            timing_waits.wait(5)
            time.sleep(0.05)
        order.append("first out")

    def timing():
        first_in.wait(5)
        timing_waits.set()
        with gate.exclusive():
            order.append("timing")

    def late():
        timing_waits.wait(5)
        time.sleep(0.02)  # arrives while timing waits
        with gate.shared():
            order.append("late")

    threads = [threading.Thread(target=f) for f in (first, timing, late)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert order.index("timing") < order.index("late")


def _run_threads(*targets):
    threads = [threading.Thread(target=f) for f in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert not any(t.is_alive() for t in threads)


def test_a_timing_place_overlaps_correctness_and_becomes_the_device_alone_once_they_leave():
    """A performance stage's place (``DeviceGate.timing``) sits beside correctness runs (its set-up and memory
    measure), and its ``alone`` waits for them to leave; one arriving while it waits is held back."""
    gate, order = DeviceGate(), []
    correctness_in, place_in, alone_waits = threading.Event(), threading.Event(), threading.Event()

    def correctness():
        with gate.shared():
            correctness_in.set()
            place_in.wait(5)  # the place entered while this run is inside: they overlap
            alone_waits.wait(5)
            time.sleep(0.05)
            order.append("correctness out")

    def performance():
        correctness_in.wait(5)
        with gate.timing() as alone:
            place_in.set()
            order.append("beside")
            alone_waits.set()
            with alone():
                order.append("alone")

    def late():
        alone_waits.wait(5)
        time.sleep(0.02)
        with gate.shared():
            order.append("late")

    _run_threads(correctness, performance, late)
    assert order == ["beside", "correctness out", "alone", "late"]


def test_no_other_holder_gets_the_device_between_a_timing_place_and_its_alone():
    """A worker set up in a timing place (candidate code loaded) must never sit beside another pair's timing: an
    exclusive holder (a correctness run again alone) or a second performance stage that asks while the place is
    held gets the device only once the place is left, even if it asked before the place asked for ``alone``."""
    gate, order = DeviceGate(), []
    place_in, others_asked = threading.Event(), threading.Event()

    def first():
        with gate.timing() as alone:
            place_in.set()
            others_asked.wait(5)
            time.sleep(0.05)  # the others now wait: the exclusive one asked before ``alone`` below
            with alone():
                order.append("first alone")
            time.sleep(0.02)
            order.append("first leaves")

    def exclusive():
        place_in.wait(5)
        others_asked.set()
        with gate.exclusive():
            order.append("exclusive")

    def second():
        place_in.wait(5)
        with gate.timing() as alone:
            order.append("second beside")
            with alone():
                order.append("second alone")

    _run_threads(first, exclusive, second)
    assert order[:2] == ["first alone", "first leaves"] and set(order[2:]) == {
        "exclusive", "second beside", "second alone"}


def test_a_correctness_stage_waits_while_a_timing_place_is_awaited():
    """Timing is imminent while a performance stage waits for its place (here for memory): a correctness stage that
    arrives then, though it fits, would only make that stage's timing wait for it (the GPU then runs one correctness
    stage at a time between timings), so it waits until the awaited stage's timing is done (here the memory
    ordering alone already holds it back; the next test holds the moment when nothing else does)."""
    gate, order = DeviceGate(capacity=10), []
    inside, place_waits = threading.Event(), threading.Event()

    def running():
        with gate.shared(8):
            inside.set()
            place_waits.wait(5)
            time.sleep(0.1)  # the small correctness stage below arrives now
            order.append("running out")

    def performance():
        inside.wait(5)
        place_waits.set()
        with gate.timing(5) as alone:  # 8 + 5 does not fit: it waits for the running stage to leave
            order.append("beside")
            with alone():
                order.append("alone")

    def small():
        place_waits.wait(5)
        time.sleep(0.03)
        with gate.shared(1):  # 8 + 1 fits, but timing waits
            order.append("small correctness")

    _run_threads(running, performance, small)
    assert order == ["running out", "beside", "alone", "small correctness"]


def test_no_correctness_stage_enters_while_a_timing_place_is_awaited_even_when_nothing_is_held():
    """The moment between one place being left and the next taken: a correctness stage arriving then waits for the
    awaited place (here the awaited place is planted in the gate's state, the one way to hold that moment open)."""
    gate, entered = DeviceGate(), threading.Event()

    def correctness():
        with gate.shared():
            entered.set()

    with gate._cond:
        gate._places_waiting = 1
    thread = threading.Thread(target=correctness)
    thread.start()
    assert not entered.wait(0.1)
    with gate._cond:
        gate._places_waiting = 0
        gate._cond.notify_all()
    assert entered.wait(5)
    thread.join(5)


def test_the_gate_under_a_random_mix_of_holders_never_lets_timing_overlap_anything_and_never_stalls():
    """Many threads entering as correctness runs, timing places (some going alone) and exclusive runs, in a random
    order with random memory needs: whenever a holder has the device alone nobody else is inside, at most one timing
    place is held, the expected memory inside stays within capacity unless one holder is alone in the gate, and
    every thread finishes."""
    import random

    gate, lock = DeviceGate(capacity=10), threading.Lock()
    inside = {"shared": 0, "places": 0, "alone": 0, "used": 0}
    broken: list[str] = []

    def check() -> None:
        with lock:
            if inside["alone"] and (inside["alone"] > 1 or inside["shared"] or inside["places"]):
                broken.append(f"alone beside others: {inside}")
            if inside["places"] > 1:
                broken.append(f"two timing places: {inside}")
            if inside["shared"] + inside["places"] > 1 and inside["used"] > 10:
                broken.append(f"over capacity: {inside}")

    def enter(kind: str, need: int, delta: int) -> None:
        with lock:
            inside[kind] += delta
            inside["used"] += need * delta if kind in ("shared", "places") else 0
        check()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(15):
            kind, need = rng.choice(["shared", "shared", "place", "exclusive"]), rng.randint(0, 8)
            if kind == "shared":
                with gate.shared(need):
                    enter("shared", need, 1)
                    time.sleep(rng.random() / 500)
                    enter("shared", need, -1)
            elif kind == "exclusive":
                with gate.exclusive():
                    enter("alone", 0, 1)
                    time.sleep(rng.random() / 500)
                    enter("alone", 0, -1)
            else:
                with gate.timing(need) as alone:
                    enter("places", need, 1)
                    time.sleep(rng.random() / 500)
                    enter("places", need, -1)
                    with alone():
                        enter("alone", 0, 1)
                        time.sleep(rng.random() / 500)
                        enter("alone", 0, -1)
                    enter("places", need, 1)
                    enter("places", need, -1)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "the gate stalled"
    assert not broken, broken[:3]


def test_correctness_runs_share_the_gpu_only_while_their_expected_memory_fits():
    """Issue 13: a correctness run joins others only while their expected device memory and its own fit the gate's
    capacity (on the H200 two pairs of 12 GiB of tensors each ran out of memory beside each other and ran again
    alone); a small run still joins a large one, and a run larger than the capacity enters alone."""
    gate = DeviceGate(capacity=100)
    big_in, small_in, second_big_in, release = (threading.Event() for _ in range(4))
    order: list[str] = []

    def big():
        with gate.shared(80):
            big_in.set()
            release.wait(5)
            order.append("big out")

    def small():
        big_in.wait(5)
        with gate.shared(15):  # 80 + 15 fits: joins at once
            order.append("small in")
            small_in.set()

    def second_big():
        small_in.wait(5)
        with gate.shared(80):  # 80 + 80 does not: waits for the first to leave
            order.append("second big in")
            second_big_in.set()

    threads = [threading.Thread(target=f) for f in (big, small, second_big)]
    for t in threads:
        t.start()
    assert small_in.wait(5) and not second_big_in.wait(0.2)
    release.set()
    for t in threads:
        t.join(5)
    assert order == ["small in", "big out", "second big in"]
    alone = threading.Thread(target=lambda: gate.shared(500).__enter__())  # larger than the capacity, alone: enters
    alone.start()
    alone.join(2)
    assert not alone.is_alive()
    held, late_in, first_out = DeviceGate(capacity=100), threading.Event(), threading.Event()
    seen: list[str] = []

    def first():
        with held.shared(80):
            seen.append("first in")
            time.sleep(0.3)
            seen.append("first out")
            first_out.set()

    def waiting_big():
        time.sleep(0.05)
        with held.shared(80):  # held back for memory
            seen.append("big in")
            time.sleep(0.05)
        seen.append("big out")

    def late_small():
        time.sleep(0.15)  # arrives while the big one waits: would fit beside the first, but does not overtake
        with held.shared(10):
            seen.append("small in")
            late_in.set()

    threads = [threading.Thread(target=f) for f in (first, waiting_big, late_small)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert seen.index("first out") < seen.index("big in") < seen.index("small in")
    unbounded = DeviceGate()  # no capacity (nvidia-smi could not say): needs never hold a run back
    with unbounded.shared(10**15), unbounded.shared(10**15):
        pass


@pytest.mark.parametrize("alone_above", [0.8, 1.0])
def test_a_correctness_run_that_nearly_fills_the_gpu_runs_alone(alone_above):
    """On the 80 GB H100 (h100-2026-12-06-e) the two pairs expected to need 0.86 of the gate's capacity let small
    pairs in beside them, and with the idle workers started ahead (uncounted) ran out of memory and ran again alone in
    both batches. Above ``alone_above`` (``GATE_ALONE_FRACTION``) a run now waits for the others to leave and lets none
    in; below it, and with the rule off (1.0), it shares as before."""
    gate = DeviceGate(capacity=100, alone_above=alone_above)
    assert gate.nearly_fills(85) is (alone_above < 0.85) and not gate.nearly_fills(70)
    small_in, big_in, late_in, leave = (threading.Event() for _ in range(4))
    order: list[str] = []

    def small():
        with gate.shared(10):
            small_in.set()
            leave.wait(5)
            order.append("small out")

    def big():
        small_in.wait(5)
        with gate.shared(85):
            order.append("big in")
            big_in.set()
            time.sleep(0.2)
            order.append("big out")

    def late():
        big_in.wait(5)
        with gate.shared(10):
            order.append("late in")
            late_in.set()

    threads = [threading.Thread(target=f) for f in (small, big, late)]
    for t in threads:
        t.start()
    entered_beside = big_in.wait(0.3)
    leave.set()
    for t in threads:
        t.join(5)
    if alone_above < 0.85:
        assert not entered_beside and order == ["small out", "big in", "big out", "late in"], order
    else:
        assert entered_beside and order.index("late in") < order.index("big out"), order
    with DeviceGate(capacity=100, alone_above=0.8).shared(70), DeviceGate(capacity=100).shared(10):
        pass


def test_a_pair_expected_to_nearly_fill_the_gpu_records_that_its_correctness_ran_alone(monkeypatch):
    from kbv.eval import pair as pair_mod

    monkeypatch.setattr(pair_mod, "correctness_memory", lambda ctx: 90)
    modes, record = _run_with_correctness(monkeypatch, [None], DeviceGate(capacity=100, alone_above=0.8))
    assert modes == ["shared"] and record.env["correctness_alone"] is True
    monkeypatch.setattr(pair_mod, "correctness_memory", lambda ctx: 50)
    modes, record = _run_with_correctness(monkeypatch, [None], DeviceGate(capacity=100, alone_above=0.8))
    assert "correctness_alone" not in record.env


@pytest.mark.parametrize("need", [90, 50])
def test_a_correctness_run_that_nearly_fills_the_gpu_first_makes_the_room_a_run_again_alone_has(monkeypatch, need):
    """On the 80 GB H100 (h100-2026-12-06-f) level1/30, expected at 0.86 of the gate's capacity, ran alone and still
    ran out of memory beside idle workers started ahead for other pairs (8 when it ran again) and timing workers
    still exiting; run again without them it passed, 40 s later. Such a run now closes the others' idle workers
    (not its own, which it takes), waits for the exiting ones first, and starts none for the next pairs; a run that
    does not nearly fill (50) does none of this. Here (the CPU) no device says what is free, so every idle worker
    of another pair is closed."""
    from kbv.eval import pair as pair_mod
    from kbv.eval.context import PairContext
    from kbv.sandbox import launch

    gate = DeviceGate(capacity=100, alone_above=0.8)
    calls: list[str] = []
    gate.hold_idle(lambda: calls.append("next pairs") or 8)
    monkeypatch.setattr(PairContext, "release_idle", lambda self: calls.append("own") or 2)
    waited: list[int] = []

    class Exiting:
        def close(self, wait: bool = True) -> None:
            if wait:
                waited.append((gate._readers, list(calls)))  # once the run holds its place, before any is closed

    monkeypatch.setattr(pair_mod, "correctness_memory", lambda ctx: need)
    launch.retire([Exiting(), Exiting()])
    try:
        modes, record = _run_with_correctness(monkeypatch, [None], gate)
    finally:
        launch.wait_retired()
    assert modes == ["shared"] and record.verdict == "correct", record.error
    if need == 90:
        assert waited == [(1, [])] * 2 and calls.count("next pairs") == 1
        assert record.env["correctness_alone_room"] == {"idle_workers_closed": 8, "retired_workers_waited": 2,
                                                        "free_bytes": None}
    else:
        assert "next pairs" not in calls and "correctness_alone_room" not in record.env

    # the stage's processes up: its own timing workers start early as ever, the next pairs' only beside a run
    # that does not nearly fill the GPU
    started: list[str] = []

    class Ahead:
        def top_up(self):
            started.append("next pairs")
            return []

    monkeypatch.setattr(pair_mod, "start_early", lambda ctx: started.append("own timing"))
    evaluation = pair_mod.PairEvaluation(load_problem(problem_path("level1/5_ReLU")), Candidate.from_path(CANDIDATE),
                                         EvalOptions(device="cpu", sandbox="off"), "cpu", gate=gate,
                                         lookahead=Ahead())
    evaluation.ctx.draft.env.update(record.env)
    evaluation._started(evaluation.ctx)
    assert started == (["own timing"] if need == 90 else ["own timing", "next pairs"])


def test_a_correctness_run_that_nearly_fills_the_gpu_closes_idle_workers_only_until_it_has_room(monkeypatch):
    """With every other pair's idle worker closed, the next timing stages start theirs again on the batch's path
    (h100-2026-12-06-g). The room made is now read from the driver: the latest registered pair's workers are closed
    first, and closing stops once the device has what the stage expects to need (at most the gate's capacity);
    with no reading, all are closed."""
    from kbv.eval import pair as pair_mod
    from kbv.eval.context import PairContext
    from kbv.sandbox import devmem

    gate = DeviceGate(capacity=100, alone_above=0.8)
    closed: list[str] = []
    free = {"bytes": 40}

    def idle(name: str, frees: int) -> None:
        def release() -> int:
            closed.append(name)
            free["bytes"] += frees
            return 2
        gate.hold_idle(release)

    idle("first", 30)
    idle("second", 30)
    idle("third", 30)
    monkeypatch.setattr(PairContext, "release_idle", lambda self: closed.append("own") or 2)
    monkeypatch.setattr(devmem, "free_bytes", lambda gpu: free["bytes"])
    monkeypatch.setattr(pair_mod, "correctness_memory", lambda ctx: 90)
    evaluation = pair_mod.PairEvaluation(load_problem(problem_path("level1/5_ReLU")), Candidate.from_path(CANDIDATE),
                                         EvalOptions(device="cpu", sandbox="off"), "cuda", gate=gate)
    room = evaluation._make_room(gate, 90)
    assert closed == ["third", "second"], closed  # 40 free, 70 after one, 100 after two: enough
    assert room == {"idle_workers_closed": 4, "retired_workers_waited": 0, "free_bytes": 40}
    free["bytes"], closed[:] = 95, []
    assert evaluation._make_room(gate, 90)["idle_workers_closed"] == 0 and closed == []
    free["bytes"] = 40  # more expected than the gate's capacity (100): closed until that much is free
    assert evaluation._make_room(gate, 150)["idle_workers_closed"] == 4 and closed == ["third", "second"]
    free["bytes"], closed[:] = 40, []
    monkeypatch.setattr(devmem, "free_bytes", lambda gpu: None)  # the driver cannot say: every other one closed
    assert evaluation._make_room(gate, 90)["idle_workers_closed"] == 6 and closed == ["third", "second", "first"]


def test_a_correctness_runs_expected_memory_comes_from_the_problems_cached_counts(tmp_path):
    """``correctness_memory``: the factors times one forward's inputs, outputs and intermediate tensors plus the
    state twice plus the two processes' base, from counts already cached (none counted here: 0 where there are
    none); counts cached before intermediates were counted read them as none."""
    import json

    from kbv import roofline
    from kbv.eval.context import PairContext
    from kbv.eval.pair import correctness_memory
    from kbv.protocol import SHARED_CORRECTNESS_BASE_BYTES, SHARED_CORRECTNESS_MEMORY_FACTORS as F

    problem = load_problem(problem_path("level1/5_ReLU"))
    options = EvalOptions(device="cpu", sandbox="off", cache_dir=tmp_path)
    ctx = PairContext(problem, Candidate.from_path(CANDIDATE), options, "cpu")
    assert correctness_memory(ctx) == 0
    key = roofline.counts_key(problem.path, None if ctx.profile in (None, "default") else ctx.profile,
                              options.precision, "tf32", None)
    (tmp_path / "roofline").mkdir()
    counts = {"problem": "p", "precision": "fp32", "profile": ctx.profile, "device": "meta", "flops": {}, "bytes": 0,
              "bytes_breakdown": {"inputs": 1000, "outputs": 500, "state": 64}}
    (tmp_path / "roofline" / f"{key}.json").write_text(json.dumps({**counts, "intermediate_bytes": 3000}))
    assert correctness_memory(ctx) == (F["inputs"] * 1000 + F["outputs"] * 500 + F["intermediates"] * 3000 + 128
                                       + SHARED_CORRECTNESS_BASE_BYTES)
    (tmp_path / "roofline" / f"{key}.json").write_text(json.dumps(counts))
    assert correctness_memory(ctx) == F["inputs"] * 1000 + F["outputs"] * 500 + 128 + SHARED_CORRECTNESS_BASE_BYTES


@pytest.mark.parametrize("share", [1, 2])
def test_the_runner_keeps_share_pairs_in_flight_per_gpu_and_times_them_alone(tmp_path, monkeypatch, share):
    problem = load_problem(problem_path("level1/5_ReLU"))
    pairs = [Pair(problem, Candidate.from_path(CANDIDATE, sample=i)) for i in range(6)]
    lock, state = threading.Lock(), {"correctness": 0, "timing": 0, "max_correctness": 0, "overlapped_timing": 0}

    def fake_eval(problem, candidate, options, device, gpu, compiled, name, gate=None, **started_ahead):
        assert (gate is None) == (share == 1)
        with gate.shared() if gate else _null():
            with lock:
                state["correctness"] += 1
                state["max_correctness"] = max(state["max_correctness"], state["correctness"])
            time.sleep(0.05)
            with lock:
                state["correctness"] -= 1
        with gate.exclusive() if gate else _null():
            with lock:
                state["timing"] += 1
                state["overlapped_timing"] += state["correctness"] > 0 or state["timing"] > 1
            time.sleep(0.02)
            with lock:
                state["timing"] -= 1
        return _placeholder(problem, candidate)

    _one_gpu(monkeypatch, fake_eval)
    runner.run_pairs(pairs, EvalOptions(device="cuda", sandbox="off", gpu_share=share), tmp_path / "r.jsonl")
    assert state["max_correctness"] == share  # with share 2, two pairs' correctness runs on the one GPU at once
    assert state["overlapped_timing"] == 0  # timing never shares the GPU


def _null():
    from contextlib import nullcontext
    return nullcontext()


def test_gpu_share_below_one_is_refused():
    with pytest.raises(OptionsError, match="--gpu-share"):
        EvalOptions(gpu_share=0).validate()


def test_a_pair_runs_correctness_shared_and_timing_exclusive(tmp_path, monkeypatch):
    from kbv.eval import pair as pair_mod

    seen: list[tuple[str, str]] = []

    class Recording(DeviceGate):
        def shared(self, need=0):
            seen.append(("enter", "shared"))
            return super().shared(need)

        @contextmanager
        def timing(self, need=0):
            seen.append(("enter", "timing"))
            with super().timing(need) as alone:
                yield alone
            seen.append(("leave", "timing"))

    monkeypatch.setattr(pair_mod.CorrectnessStage, "run", lambda self: seen.append(("stage", "correctness")))
    def performance(self, place=None):
        with place as alone:
            seen.append(("stage", "performance set-up and memory"))
            with alone():
                seen.append(("stage", "performance"))
                time.sleep(0.05)
        seen.append(("stage", "performance conclusions"))

    monkeypatch.setattr(pair_mod.PerformanceStage, "run", performance)
    monkeypatch.setattr(pair_mod, "roofline_section", lambda ctx: None)
    monkeypatch.setattr(pair_mod.rules_, "should_time", lambda ev, rules: ("verified",))
    problem = load_problem(problem_path("level1/5_ReLU"))
    record = pair_mod.PairEvaluation(problem, Candidate.from_path(CANDIDATE), EvalOptions(device="cpu", sandbox="off"),
                                     "cpu", gate=Recording()).run(pair_mod.CompileResult(ok=True))
    assert seen == [("enter", "shared"), ("stage", "correctness"), ("enter", "timing"),
                    ("stage", "performance set-up and memory"), ("stage", "performance"), ("leave", "timing"),
                    ("stage", "performance conclusions")]
    assert "performance/waiting_for_gpu" in record.wall_seconds and "correctness/waiting_for_gpu" in record.wall_seconds
    assert record.timing_ms["device_alone_s"] >= 0.04  # the time the timing held the GPU alone: the batch's floor


def test_correctness_waiting_for_another_pairs_timing_is_charged_to_waiting_for_gpu(monkeypatch):
    gate, holding = DeviceGate(), threading.Event()

    def other_pairs_timing():
        with gate.exclusive():
            holding.set()
            time.sleep(0.2)

    thread = threading.Thread(target=other_pairs_timing)
    thread.start()
    holding.wait(5)
    modes, record = _run_with_correctness(monkeypatch, [None], gate)
    thread.join(5)
    assert modes == ["shared"] and record.wall_seconds["correctness/waiting_for_gpu"] >= 0.1


def test_the_runner_raises_a_low_open_file_limit_towards_the_hard_one():
    """The parent keeps descriptors of every pair in flight (the reference's state, relayed outputs)."""
    import resource

    from kbv.eval.runner import raise_open_file_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = 256 if hard == resource.RLIM_INFINITY else min(256, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        raised = raise_open_file_limit(4096)
        now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert raised == now and now == (4096 if hard == resource.RLIM_INFINITY else min(4096, hard)) and now >= low
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


OOM = "OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB."


def _run_with_correctness(monkeypatch, outcomes, gate, cache_dir=None, held=None):
    """A pair whose correctness stage yields ``outcomes`` in turn (None: passes; (role, message): that role's
    failure, the reference's raised as ReferenceFailed as the stage does), the modes it ran under, and the record."""
    from kbv.eval import pair as pair_mod
    from kbv.eval.context import ReferenceFailed
    from kbv.eval.evidence import Failure
    from kbv.sandbox.launch import WorkerFailure

    modes: list[str] = []

    def run(self) -> None:
        modes.append("exclusive" if gate is not None and gate._writer else "shared" if gate is not None else "none")
        outcome = outcomes[len(modes) - 1]
        if held is not None:  # what the parent saw both processes hold (NVML, on a GPU)
            self.ctx.draft.memory_bytes["correctness_stage"] = {"together_max": held}
        if outcome is None:
            self.ctx.evidence.distributions = {"D1": "passed"}
            self.ctx.evidence.d1_complete = True
            self.ctx.evidence.standard_d1 = [True]
            return
        role, message = outcome
        if role == "judge":  # the judge could not take the candidate's output: the distribution fails
            self.ctx.draft.correctness["distributions"] = {"D1": {"status": "passed"},
                                                           "D2": {"status": "failed", "reason": message}}
            self.ctx.evidence.distributions = {"D1": "passed", "D2": "failed"}
            self.ctx.evidence.d1_complete = True
            self.ctx.evidence.standard_d1 = [True]
            return
        if role == "reference":
            raise ReferenceFailed(WorkerFailure("error", message), "correctness")
        self.ctx.evidence.fail(Failure("correctness", "candidate", "error", {"stage": "correctness", "kind": "error",
                                                                             "message": message}))

    monkeypatch.setattr(pair_mod.CorrectnessStage, "run", run)
    monkeypatch.setattr(pair_mod.rules_, "should_time", lambda ev, rules: ())
    problem = load_problem(problem_path("level1/5_ReLU"))
    record = pair_mod.PairEvaluation(problem, Candidate.from_path(CANDIDATE),
                                     EvalOptions(device="cpu", sandbox="off", protocol="standard",
                                                 **({"cache_dir": cache_dir} if cache_dir else {})), "cpu",
                                     gate=gate).run(pair_mod.CompileResult(ok=True))
    return modes, record


@pytest.mark.parametrize("role", ["candidate", "reference"])
def test_out_of_memory_beside_other_pairs_runs_correctness_again_with_the_gpu_to_itself(monkeypatch, role):
    """On the H200 (2026-12-02) two 6 GiB elementwise pairs in correctness at once ran out of device memory and got
    runtime_error: another pair's doing, not the candidate's. The stage runs again, once, exclusively."""
    modes, record = _run_with_correctness(monkeypatch, [(role, OOM), None], DeviceGate())
    assert modes == ["shared", "exclusive"]
    assert record.verdict == "correct", record.error
    assert record.env["correctness_rerun"]["role"] == role
    assert record.wall_seconds["correctness/rerun"] >= 0  # the discarded first run's time, under its own name
    # the batch's GPU timeline: when it asked, when the first run was inside the gate, and the run again alone
    line = record.env["timeline"]
    assert line["correctness_asked"] <= line["correctness_in"] <= line["correctness_out"]
    assert line["correctness_out"] <= line["correctness_rerun_in"] <= line["correctness_rerun_out"]


def test_out_of_memory_with_the_gpu_to_itself_stands(monkeypatch):
    modes, record = _run_with_correctness(monkeypatch, [("candidate", OOM), ("candidate", OOM)], DeviceGate())
    assert modes == ["shared", "exclusive"]
    assert record.verdict == "runtime_error" and "out of memory" in record.error["message"]


def test_a_pair_run_again_alone_first_closes_every_worker_started_ahead_and_still_idle(monkeypatch):
    """On an 80 GB H100 (h100-2026-12-06-c, --gpu-share 5) a 6 GiB problem's correctness stage, run again alone,
    ran out of memory again beside fourteen idle workers started ahead (0.5-0.6 GiB of CUDA context each): an
    honest pair recorded ``reference_error``. ``exclusive`` now closes them first; shared and timing holders don't."""
    gate = DeviceGate()
    calls: list[str] = []
    gate.hold_idle(lambda: calls.append("next pairs") or 4)
    forget = gate.hold_idle(lambda: calls.append("a finished pair") or 2)
    forget()  # its owner is done: never asked
    with gate.shared():
        pass
    with gate.timing() as alone, alone():
        pass
    assert calls == []
    with gate.exclusive() as closed:
        assert closed == 4 and calls == ["next pairs"]
    calls.clear()
    modes, record = _run_with_correctness(monkeypatch, [("reference", OOM), None], gate)
    assert modes == ["shared", "exclusive"] and record.verdict == "correct", record.error
    assert record.env["correctness_rerun"]["idle_workers_closed"] == 4 and calls == ["next pairs"]


def test_a_pair_run_again_alone_waits_for_other_pairs_timing_workers_still_exiting(monkeypatch):
    """On the 80 GB H100 (h100-2026-12-06-e, --gpu-share 5) level1/30's correctness, run again alone right after
    other 6 GiB pairs were timed, ran out of memory again with 60 GiB held by other processes: those pairs' timing
    workers, asked to exit (``launch.retire``) and not yet gone. The run again now waits for them, as timing does,
    with the GPU already its own."""
    from kbv.sandbox import launch

    gate = DeviceGate()
    waited: list[bool] = []

    class Exiting:
        def close(self, wait: bool = True) -> None:
            if wait:
                waited.append(gate._writer)  # gone once the run again holds the GPU, before it runs

    launch.retire([Exiting()])
    try:
        modes, record = _run_with_correctness(monkeypatch, [("reference", OOM), None], gate)
    finally:
        launch.wait_retired()
    assert modes == ["shared", "exclusive"] and record.verdict == "correct", record.error
    assert waited == [True] and record.env["correctness_rerun"]["retired_workers_waited"] == 1


@pytest.mark.parametrize("need", [150, 50])
def test_a_timing_that_closed_the_idle_workers_starts_the_next_pairs_again_and_the_next_timing_waits_for_them(need):
    """On the 80 GB H100 (h100-2026-12-06-f) 14 timings of pairs that fill the GPU each closed every idle worker
    started ahead, and the pairs that entered correctness right after them all started CUDA in their own stage: 13
    of 50 found workers waiting. Such a timing now starts the next pairs' workers again once the device is no
    longer its own, without waiting for them; the next timing waits for them to be up before it has the device
    alone (no CUDA start beside a pair's timing). A timing that closed none (50) starts none."""
    from concurrent.futures import Future

    from kbv.eval import pair as pair_mod

    gate = DeviceGate(capacity=100)
    gate.hold_idle(lambda: 4)
    up_while: list[bool] = []  # whether a timing had the device alone when the started workers came up

    class Ahead:
        def top_up(self):
            future: Future = Future()

            def later() -> None:
                time.sleep(0.2)
                up_while.append(gate._writer)
                future.set_result(None)
            threading.Thread(target=later).start()
            return [future]

    evaluation = pair_mod.PairEvaluation(load_problem(problem_path("level1/5_ReLU")), Candidate.from_path(CANDIDATE),
                                         EvalOptions(device="cpu", sandbox="off"), "cpu", gate=gate,
                                         lookahead=Ahead())
    ctx = evaluation.ctx
    ctx.draft.env["correctness_memory_expected"] = need
    t0 = time.monotonic()
    with evaluation._timing_place(ctx) as alone:
        with alone() as closed:
            assert closed == (4 if need == 150 else 0)
    assert time.monotonic() - t0 < 0.15 and up_while == []  # the place left without waiting for them
    with gate.timing() as alone, alone():  # the next pair's timing
        assert up_while == ([False] if need == 150 else []), up_while
    time.sleep(0.25)
    assert up_while == ([False] if need == 150 else []), up_while


def test_timing_alone_closes_the_idle_workers_only_for_a_problem_that_fills_the_gpu():
    """On the 80 GB H100 (h100-2026-12-06-c) a 6 GiB problem's timing, whose correctness was expected to need more
    than the gate's capacity, ran out of memory by 0.03 GiB beside twelve idle workers started ahead: its ``alone``
    closes them. Any other pair's timing keeps them (they save the next pairs' CUDA starts)."""
    gate = DeviceGate(capacity=100)
    calls: list[str] = []
    gate.hold_idle(lambda: calls.append("idle") or 12)
    with gate.timing(need=100) as alone, alone() as closed:
        assert closed == 0 and calls == []
    with gate.timing(need=101) as alone, alone() as closed:
        assert closed == 12 and calls == ["idle"]


def test_a_pairs_own_idle_workers_are_offered_while_it_runs_and_forgotten_after(monkeypatch):
    """A pair offers its workers started ahead (``PairContext.release_idle``) while it runs; once done, a later pair
    run again alone no longer asks it."""
    from kbv.eval import pair as pair_mod
    from kbv.eval.context import PairContext

    gate = DeviceGate()
    monkeypatch.setattr(PairContext, "release_idle", lambda self: 3)
    seen: list[int] = []

    def run(self) -> None:
        self.ctx.evidence.distributions = {"D1": "passed"}
        self.ctx.evidence.d1_complete = True
        self.ctx.evidence.standard_d1 = [True]

    monkeypatch.setattr(pair_mod.CorrectnessStage, "run", run)
    # between its stages, outside the gate, another pair runs again alone
    monkeypatch.setattr(pair_mod.rules_, "should_time", lambda ev, rules: seen.append(_exclusive(gate)) or ())
    problem = load_problem(problem_path("level1/5_ReLU"))
    evaluation = pair_mod.PairEvaluation(problem, Candidate.from_path(CANDIDATE),
                                         EvalOptions(device="cpu", sandbox="off", protocol="standard"), "cpu",
                                         gate=gate)
    assert evaluation.run(pair_mod.CompileResult(ok=True)).verdict == "correct"
    assert seen == [3]
    assert _exclusive(gate) == 0  # done: forgotten


def _exclusive(gate: DeviceGate) -> int:
    with gate.exclusive() as closed:
        return closed


def _run_with_performance(monkeypatch, outcomes, gate, idle=0):
    """A pair that passes correctness and whose performance stage yields ``outcomes`` in turn (None: passes;
    (role, message): a failure of that role, the reference's raised as ReferenceFailed as the stage does), with
    ``idle`` workers started ahead by other pairs; the modes each run had (a timing place, or the GPU alone
    through ``exclusive``) and the record."""
    from kbv.eval import pair as pair_mod
    from kbv.eval.context import ReferenceFailed
    from kbv.eval.evidence import Failure
    from kbv.sandbox.launch import WorkerFailure

    modes: list[str] = []
    if idle:
        gate.hold_idle(lambda: idle)

    def correctness(self) -> None:
        self.ctx.evidence.distributions = {"D1": "passed"}
        self.ctx.evidence.d1_complete = True
        self.ctx.evidence.standard_d1 = [True]

    def performance(self, place=None) -> None:
        modes.append("place" if place is not None else "exclusive" if gate is not None and gate._writer else "alone")
        outcome = outcomes[len(modes) - 1]
        self.draft.timing_ms["run"] = len(modes)
        if len(modes) == 1:
            self.ev.see("idle_work")  # what the first run saw of the candidate
        if outcome is None:
            return
        role, message = outcome
        if role == "reference":
            raise ReferenceFailed(WorkerFailure("error", message), "performance")
        self.ev.fail(Failure("performance", role, "error", {"stage": "performance", "kind": "error",
                                                              "message": message}))

    monkeypatch.setattr(pair_mod.CorrectnessStage, "run", correctness)
    monkeypatch.setattr(pair_mod.PerformanceStage, "run", performance)
    monkeypatch.setattr(pair_mod.rules_, "should_time", lambda ev, rules: ("standard",))
    monkeypatch.setattr(pair_mod, "roofline_section", lambda ctx: None)
    problem = load_problem(problem_path("level1/5_ReLU"))
    record = pair_mod.PairEvaluation(problem, Candidate.from_path(CANDIDATE),
                                     EvalOptions(device="cpu", sandbox="off", protocol="standard"), "cpu",
                                     gate=gate).run(pair_mod.CompileResult(ok=True))
    return modes, record


@pytest.mark.parametrize("role", ["reference", "harness"])
def test_out_of_memory_not_the_candidates_in_timing_beside_other_pairs_runs_it_again_alone(monkeypatch, role):
    """On the 80 GB H100 (h100-2026-12-06-c, --gpu-share 5) level1/25's timing ran out of memory by 0.03 GiB beside
    twelve idle workers started ahead by other pairs: an honest pair recorded ``reference_error`` (or, where kbv's
    own buffers ran out, ``harness_error``). The stage runs again, once, with the GPU to itself and the idle workers
    closed; its times replace the first run's, and what the first run saw of the candidate stands."""
    modes, record = _run_with_performance(monkeypatch, [(role, OOM), None], DeviceGate(), idle=12)
    assert modes == ["place", "exclusive"]
    assert record.error is None, record.error
    assert record.env["performance_rerun"]["role"] == role
    assert record.env["performance_rerun"]["idle_workers_closed"] == 12
    assert record.timing_ms["run"] == 2 and record.wall_seconds["performance/rerun"] >= 0
    assert "idle_work" in record.flags and record.verdict == "rejected"  # the first run's finding stands
    modes, record = _run_with_performance(monkeypatch, [(role, OOM), (role, OOM)], DeviceGate())
    assert modes == ["place", "exclusive"] and "out of memory" in record.error["message"]  # alone too: it stands


def test_a_candidates_out_of_memory_in_timing_and_unshared_gpus_get_no_second_run(monkeypatch):
    modes, record = _run_with_performance(monkeypatch, [("candidate", OOM), None], DeviceGate())
    assert modes == ["place"] and "out of memory" in record.error["message"]  # its own: no second chance
    modes, record = _run_with_performance(monkeypatch, [("reference", "CUDA error: an illegal memory access"), None],
                                          DeviceGate())
    assert modes == ["place"] and "performance_rerun" not in record.env
    modes, record = _run_with_performance(monkeypatch, [("reference", OOM), None], None)
    assert modes == ["alone"] and "performance_rerun" not in record.env


HANDOFF_OOM = ("output 0 is a output handoff failed: HandoffError: OutOfMemoryError: CUDA out of memory. Tried to "
               "allocate 4.00 GiB., not exactly a torch.Tensor")


def test_a_judge_out_of_memory_for_the_candidates_output_beside_other_pairs_runs_again(monkeypatch):
    """On the H200 (2026-12-04, --gpu-share 4) the judge could not import a correct level1/9's 4 GiB output while
    other pairs held the memory, and the pair was recorded incorrect. Beside other pairs it runs again alone; with
    the GPU to itself the same failure stands (the output is judged wrong)."""
    modes, record = _run_with_correctness(monkeypatch, [("judge", HANDOFF_OOM), None], DeviceGate())
    assert modes == ["shared", "exclusive"] and record.verdict == "correct"
    assert "OutOfMemoryError" in record.env["correctness_rerun"]["message"]
    modes, record = _run_with_correctness(monkeypatch, [("judge", HANDOFF_OOM), ("judge", HANDOFF_OOM)],
                                          DeviceGate())
    assert modes == ["shared", "exclusive"] and record.verdict == "incorrect"
    modes, record = _run_with_correctness(monkeypatch, [("judge", "output 0 differs: max abs error 3.0"), None],
                                          DeviceGate())
    assert modes == ["shared"] and record.verdict == "incorrect"  # a wrong output is not retried


@pytest.mark.parametrize("gate", [None, DeviceGate()])
def test_other_failures_and_unshared_gpus_get_no_second_run(monkeypatch, gate):
    modes, record = _run_with_correctness(monkeypatch, [("candidate", "ValueError: bad shape"), None], gate)
    assert len(modes) == 1 and record.verdict == "runtime_error"
    if gate is None:
        modes, record = _run_with_correctness(monkeypatch, [("candidate", OOM), None], None)
        assert modes == ["none"] and record.verdict == "runtime_error"



def test_the_gate_expects_what_a_problems_correctness_stage_was_seen_to_hold(monkeypatch, tmp_path):
    """Issue 13: the static reckoning missed by up to 3x on the H200 (level1/9: 68 GiB held, 24 expected). Once a
    problem's correctness stage has been measured, its next pairs are expected to need the most seen, with a margin;
    a smaller figure later does not lower it."""
    from kbv.eval import memory_needs
    from kbv.protocol import GATE_MEASURED_MARGIN

    _, first = _run_with_correctness(monkeypatch, [None], DeviceGate(), cache_dir=tmp_path, held=4000)
    assert first.env["correctness_memory_expected"] == 0  # nothing counted or measured yet: no bound
    _, second = _run_with_correctness(monkeypatch, [None], DeviceGate(), cache_dir=tmp_path, held=1000)
    assert second.env["correctness_memory_expected"] == int(GATE_MEASURED_MARGIN * 4000)
    _, third = _run_with_correctness(monkeypatch, [None], DeviceGate(), cache_dir=tmp_path, held=None)
    assert third.env["correctness_memory_expected"] == int(GATE_MEASURED_MARGIN * 4000)  # the most seen stays
    assert memory_needs.expected(123, None) == 123 and memory_needs.expected(123, 10) == int(GATE_MEASURED_MARGIN * 10)


def test_pairs_sharing_a_gpu_start_longest_first_as_their_problems_last_took(tmp_path, monkeypatch):
    """Issue 13: a batch's last pairs run beside fewer others, so a long one among them leaves the GPU underused.
    Each pair's device seconds (its stages less their waits) are kept per problem beside its memory need, and a
    batch sharing a GPU starts the pairs never timed first, then the longest as their problems last took. With one
    pair in flight the given order stands."""
    from kbv.eval import memory_needs
    from kbv.eval.context import PairContext
    from kbv.eval.pair import remember_seconds, remembered_seconds

    names = ["level1/5_ReLU", "level1/6_GELU", "level1/1_Square_Matmul", "level1/7_Softmax"]
    problems = [load_problem(problem_path(n)) for n in names]
    options = EvalOptions(device="cuda", sandbox="off", cache_dir=tmp_path, start_ahead=False)
    for problem, seconds in zip(problems[:3], (2.0, None, 9.0)):
        if seconds is not None:  # as a finished pair keeps it: its stages less their waits for the GPU
            ctx = PairContext(problem, Candidate.from_path(CANDIDATE), options, "cuda", gpu=0)
            remember_seconds(ctx, {"correctness": seconds + 4.0, "correctness/waiting_for_gpu": 4.0,
                                   "performance": 1.0, "performance/waiting_for_gpu": 1.0})
    pairs = [Pair(p, Candidate.from_path(CANDIDATE, sample=i)) for i, p in enumerate(problems)]
    assert [remembered_seconds(p, options, "cuda") for p in pairs] == [2.0, None, 9.0, None]
    seen: list[list[str]] = []

    def order(todo, *args):
        seen.append([p.problem.key for p in todo])
        return None

    _one_gpu(monkeypatch, lambda problem, candidate, *a, **k: _placeholder(problem, candidate))
    monkeypatch.setattr(runner, "lookahead_of", order)
    for share, expected in ((2, [names[1], names[3], names[2], names[0]]), (1, names)):
        runner.run_pairs(pairs, EvalOptions(device="cuda", sandbox="off", cache_dir=tmp_path, gpu_share=share,
                                            start_ahead=False), tmp_path / f"r{share}.jsonl")
        assert seen.pop() == expected
    key = "k"
    memory_needs.remember_seconds(tmp_path, key, 3.0)
    memory_needs.remember(tmp_path, key, 5000)  # both figures share the problem's file: neither loses the other
    assert (memory_needs.remembered(tmp_path, key), memory_needs.remembered_seconds(tmp_path, key)) == (5000, 3.0)


def _one_gpu(monkeypatch, evaluate) -> None:
    """The runner on one CUDA slot, with nothing built or counted, each pair evaluated by ``evaluate``."""
    monkeypatch.setattr(runner.envinfo, "resolve_device", lambda d: "cuda")
    monkeypatch.setattr(runner, "device_slots", lambda d: [0])
    monkeypatch.setattr(runner, "build_candidates", lambda *a, **k: {})
    monkeypatch.setattr(runner, "count_problems", lambda *a, **k: None)
    monkeypatch.setattr(runner, "evaluate_shapes", evaluate)


def _placeholder(problem, candidate):
    rec = runner.not_run(Pair(problem, candidate), str(candidate.path), "placeholder")
    rec.error, rec.flags = None, []
    return rec


def test_the_lookahead_depth_is_the_protocols_unless_set_and_never_above_the_gpu_share(monkeypatch):
    """``KBV_LOOKAHEAD_DEPTH`` sets how many pairs keep correctness workers started ahead (an A/B knob for the GPU
    batches); unset it is ``LOOKAHEAD_DEPTH``, and never more than ``--gpu-share`` pairs."""
    from kbv.eval import runner
    from kbv.protocol import LOOKAHEAD_DEPTH

    def depth(share: int) -> int:
        ahead = runner.lookahead_of([], {}, EvalOptions(device="cuda", gpu_share=share), "cuda", [0])
        assert ahead is not None
        return ahead._depth

    monkeypatch.delenv("KBV_LOOKAHEAD_DEPTH", raising=False)
    assert depth(5) == LOOKAHEAD_DEPTH == 2
    monkeypatch.setenv("KBV_LOOKAHEAD_DEPTH", "4")
    assert depth(5) == 4 and depth(3) == 3
    monkeypatch.setenv("KBV_LOOKAHEAD_DEPTH", "x")  # not a count: the protocol's
    assert depth(5) == LOOKAHEAD_DEPTH
