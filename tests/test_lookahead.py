"""Correctness workers started ahead (``kbv.eval.lookahead``): which pair's, when, and that none is left behind.

Unit tests with stand-in contexts; one end-to-end run on the CPU with the look-ahead forced on (by default it is on
only on a GPU, where starting CUDA is what it saves)."""

from __future__ import annotations

import os
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace


from conftest import problem_path
from kbv.eval import EvalOptions, lookahead, runner
from kbv.problems import load_problem
from kbv.problems.candidates import Candidate, Pair
from kbv.records import read_records

CANDIDATE = Path(__file__).parent / "candidates" / "correct_torch.py"


def _children() -> set[int]:
    found: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        try:
            found |= {int(p) for p in Path(f"/proc/self/task/{task}/children").read_text().split()}
        except OSError:
            pass
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""  # exited meanwhile


class _Ctx(SimpleNamespace):
    def discard_correctness_ahead(self) -> int:
        self.discarded = True
        return 2


def _pairs(n: int) -> list[Pair]:
    relu = load_problem(problem_path("level1/5_ReLU"))
    return [Pair(relu, Candidate.from_path(CANDIDATE, sample=i)) for i in range(n)]


def _ahead(pairs, monkeypatch, eligible=lambda p: True):
    made: list[_Ctx] = []

    def context(pair, gpu):
        ctx = _Ctx(pair=pair, gpu=gpu, correctness_ahead=None, discarded=False, scratch=Path("/nonexistent"),
                   options=SimpleNamespace(keep_scratch=True))
        made.append(ctx)
        return ctx

    monkeypatch.setattr(lookahead, "launch_correctness", lambda ctx, deadline: {"reference": "r", "candidate": "c"})
    return lookahead.Lookahead(pairs, 0, eligible, context, 10.0), made


def test_the_next_pair_no_evaluation_has_begun_is_started_in_order(monkeypatch) -> None:
    pairs = _pairs(4)
    ahead, made = _ahead(pairs, monkeypatch, eligible=lambda p: p.candidate.sample != 2)
    assert ahead.begin(pairs[0], 0) is None  # nothing started for the first pair
    first = ahead.start_next()
    assert isinstance(first, Future) and first.result() == {"reference": "r", "candidate": "c"}
    assert made[-1].pair is pairs[1]
    ahead.start_next()
    assert made[-1].pair is pairs[3]  # pairs[2] is not eligible (a failed build, several shapes)
    assert ahead.start_next() is None  # nothing left to start
    ctx = ahead.begin(pairs[1], 0)
    assert ctx is made[0] and ctx.correctness_ahead is first
    assert ahead.begin(pairs[2], 0) is None


def test_workers_for_another_gpu_or_a_pair_never_begun_are_closed(monkeypatch) -> None:
    pairs = _pairs(3)
    ahead, made = _ahead(pairs, monkeypatch)
    ahead.begin(pairs[0], 0)
    ahead.start_next()
    ahead.start_next()
    assert ahead.begin(pairs[1], 1) is None and made[0].discarded  # began on another GPU: its workers closed
    ahead.close()
    assert made[1].discarded  # pairs[2] never began
    assert ahead.start_next() is None  # closed: nothing more starts


def test_release_closes_the_workers_of_pairs_not_yet_begun_and_later_starts_go_on(monkeypatch) -> None:
    """``DeviceGate.exclusive`` (a pair run again alone) wants their memory: closed, and the pair may be started
    ahead again later."""
    pairs = _pairs(3)
    ahead, made = _ahead(pairs, monkeypatch)
    ahead.begin(pairs[0], 0)
    ahead.start_next()
    ahead.start_next()
    assert ahead.release() == 4 and made[0].discarded and made[1].discarded
    assert ahead.begin(pairs[1], 0) is None  # its workers went: its stage starts its own
    ahead.start_next()
    assert made[-1].pair is pairs[2] and not made[-1].discarded  # started ahead again
    ahead.close()


def test_top_up_keeps_depth_pairs_waiting_and_recovers_after_a_release(monkeypatch) -> None:
    """``top_up`` starts the next pairs until ``depth`` have workers waiting, so after a ``release`` (a pair that
    fills the GPU is timed) the next correctness stage starts them again: with one start per stage and one taken per
    pair, 7 of 50 reward pairs on the H100 found workers waiting (h100-2026-12-06-e)."""
    pairs = _pairs(6)
    ahead, made = _ahead(pairs, monkeypatch)
    ahead._depth = 2
    ahead.begin(pairs[0], 0)
    assert len(ahead.top_up()) == 2 and [c.pair for c in made] == pairs[1:3]
    assert ahead.top_up() == []  # two waiting already
    assert ahead.begin(pairs[1], 0) is made[0]
    assert len(ahead.top_up()) == 1 and made[-1].pair is pairs[3]
    assert ahead.release() == 4  # pairs 2 and 3: both closed
    assert len(ahead.top_up()) == 2 and [c.pair for c in made[-2:]] == [pairs[2], pairs[3]]  # back to two
    ahead.close()


def test_a_run_with_correctness_workers_started_ahead_is_judged_as_without(monkeypatch, tmp_path) -> None:
    """Forced on for the CPU: every pair after the first takes workers started during an earlier pair's correctness
    stage, every verdict is what it is without them, and no worker outlives the run."""
    monkeypatch.setattr(runner, "LOOKAHEAD_DEVICES", {"cpu": True, "cuda": True})
    out = tmp_path / "r.jsonl"
    before = _children()
    summary = runner.run_pairs(_pairs(4), EvalOptions(device="cpu", timing_pairs=1, protocol="verified"), out)
    left = [cmd for cmd in (_cmdline(pid) for pid in _children() - before) if cmd]
    assert all("kbv.worker.zygote" in cmd for cmd in left), left  # the launcher kbv keeps, and no worker
    records = sorted(read_records(out), key=lambda r: r["sample"])
    assert summary.evaluated == 4 and [r["verdict"] for r in records] == ["correct"] * 4, records[0].get("error")
    ahead = [bool(r["env"].get("correctness_started_ahead")) for r in records]
    assert ahead == [False, True, True, True]
    assert all(r["wall_seconds"].get("correctness/process_start", 0) < 5 for r in records)
