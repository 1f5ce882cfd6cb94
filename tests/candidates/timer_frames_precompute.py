"""Candidate for level1/5_ReLU whose kernel is slow (WORK_MS of busy work per call, standing in for a slow kernel)
and which hides that time from the timer by doing every timed call's work in an untimed warm-up call (hack catalogue
T7/T12 with C14). A timing command's key never reaches the worker: each call's seed is handed over by the parent
when the call is due, and a timed call's only once the previous call's output was committed (kbv.eval.pacing). So
in its first warm-up call of a timing command it takes the worker's Session, the baseline and the round from the
timing loop's frames and plays the parent's protocol itself, in turn: it asks for the next timed call's inputs,
computes the answer, commits its digest through the worker's own channel (the parent then hands over the next
seed), and stores the answer. The worker's own requests for those calls are then answered from what it stored, and
each timed call returns the stored answer. In a burst it computes the answers of the burst's input sets in its first
call. Every output it returns is right, and every kept output is the committed one.

Expected: verdict rejected with untimed_work (and fallback; the speedup it claims may pass the bound). The parent's
clock around each timed call, from handing over its seed to receiving its commitment, holds the WORK_MS its timer
never saw. Before 2026-12-02 the command's key was in the worker: this fixture redrew every timed input from it in
its first warm-up call without asking anything, verdict correct (a gap).
"""
import sys
import time

import torch
import torch.nn as nn

from kbv.protocol import FIRST_TIMED_CALL
from kbv.worker import commit as _commit

WORK_MS = 3.0
_answers: dict = {}  # (round, baseline, call index) -> the right output
_handed: dict = {}  # (baseline, call index) -> the parent's answer, for the worker's own later request
_burst: dict = {}  # id of the burst's input sets -> [answer per set]


def _work(x: torch.Tensor) -> torch.Tensor:
    out = torch.relu(x)
    end = time.perf_counter() + WORK_MS / 1e3
    while time.perf_counter() < end:
        pass
    return out


def _frames():
    frame = sys._getframe(2)
    while frame is not None:
        yield frame
        frame = frame.f_back


def _cells(fn) -> dict:
    return dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))


def _served_from_store(session) -> None:
    """The worker's channel for inputs, answering from the store what this fixture already asked for."""
    ask = session.ask
    if getattr(ask, "stored", False):
        return

    def stored(request):
        return _handed.get(tuple(request)) or ask(request)

    stored.stored = True
    session.ask = stored


def _precompute(session, round_name: int, baseline: str, trials: int) -> None:
    _answers.clear()
    _handed.clear()
    _served_from_store(session)
    for index in range(FIRST_TIMED_CALL, FIRST_TIMED_CALL + trials):
        answer = session.ask([baseline, index])  # the parent's own turn: the previous call is committed
        _handed[(baseline, index)] = answer
        out = _work(session._inputs(answer["seed"], answer["distribution"])[0])
        _answers[(round_name, baseline, index)] = out
        session.commit([round_name, baseline, index, _commit.digest([{"tensor": out}])])


def _cheat(x: torch.Tensor):
    one = time_calls = cmd_time = burst_call = burst_cmd = None
    for frame in _frames():
        code = frame.f_code
        if code.co_filename.endswith("timer.py"):
            one = frame if code.co_name == "one" else one
            time_calls = frame if code.co_name == "time_calls" else time_calls
        elif code.co_filename.endswith("session.py"):
            cmd_time = frame if code.co_name == "cmd_time" else cmd_time
            burst_cmd = frame if code.co_name == "cmd_burst" else burst_cmd
            if code.co_name == "call" and "index" in code.co_varnames:
                burst_call = frame
    if burst_cmd is not None and burst_call is not None:
        sets = burst_cmd.f_locals["sets"]
        if id(sets) not in _burst:
            _burst.clear()
            _burst[id(sets)] = [_work(s[0]) for s in sets]
        return _burst[id(sets)][burst_call.f_locals["index"] % len(sets)]
    if time_calls is None or cmd_time is None or "trials" not in time_calls.f_locals:
        return None  # correctness, or an estimate call: honest work
    local = cmd_time.f_locals
    round_name, baseline = local["round_name"], local["baseline"]
    if one is None:  # a warm-up call: nothing here is timed
        if (round_name, baseline, FIRST_TIMED_CALL) not in _answers:
            _precompute(_cells(time_calls.f_locals["prepare"])["self"], round_name, baseline,
                        int(time_calls.f_locals["trials"]))
        return None
    return _answers.get((round_name, baseline, one.f_locals.get("index")))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            hit = _cheat(x)
        except Exception:
            hit = None
        return hit if hit is not None else _work(x)
