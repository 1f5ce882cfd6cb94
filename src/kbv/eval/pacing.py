"""A timing command's inputs, handed to the worker one call at a time, and the parent's own clock around each call.

The worker asks for call ``j``'s seed and distribution just before it loads call ``j``'s inputs (a ``need``
frame); the parent answers in order only, and for a timed call only once the previous timed call's output has
been committed (``kbv.worker.commit``). The command's key never leaves the parent, so nothing in the worker
predicts an input before its call is due. Every piece of work the worker does for timed call ``j``, timed or not,
therefore happens between the parent handing over its seed and receiving its commitment: the call's *window*,
measured on the parent's clock. The window minus the time the worker reports for the call is the call's untimed
time, which the harness makes the same for both roles (loading the inputs, the cache flush, keeping and digesting
the output); ``untimed_excess`` compares the two roles (flag ``untimed_work``).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kbv.protocol import (FIRST_TIMED_CALL, UNTIMED_WORK_FLOOR_MS, UNTIMED_WORK_OWN, UNTIMED_WORK_REL,
                          UNTIMED_WORK_SHARE, baseline_key, timed_call)


class PacingError(Exception):
    """A worker that asked for inputs out of turn (a protocol failure of that worker)."""


@dataclass
class Pacer:
    """Serves one timing command: ``need`` answers a worker's request for call ``index`` under ``baseline``;
    ``sent`` marks the moment the answer left; ``committed`` closes the call's window when its commitment arrives.
    ``windows[baseline][index]`` holds the windows in milliseconds."""

    key: int
    names: tuple[str, ...]
    baselines: tuple[str, ...]
    round: int
    max_calls: int  # calls one baseline may ask for (estimates, warm-up and timed trials together)
    windows: dict[str, dict[int, float]] = field(default_factory=dict)
    # puts a timed call's inputs where the worker reads them (the judge's lent slot: kbv.eval.lent_timing) before
    # the answer goes; True where it did (the answer then holds no seed), False to hand the seed over instead. Called
    # as fill(baseline, index, seed, distribution, following): ``following`` is the next call's seed and
    # distribution (None past the last call a worker may ask for), for the lender to draw ahead (LEND_PREDRAW)
    fill: Callable[[str, int, int, str, tuple[int, str] | None], bool] | None = None
    fill_error: Exception | None = None  # what ``fill`` raised (the judge's failure, not the worker's): the seed
    # went over instead, and the caller raises it once the command is over
    # the parent's own look at every timed call (``kbv.eval.performance``: the worker's peak memory over it), called
    # with True just before a timed call's answer goes and with False once its commitment has arrived
    around: Callable[[bool], None] | None = None
    _position: int = -1
    _next: int = 0
    _committed: set[tuple[str, int]] = field(default_factory=set)
    _open: tuple[str, int] | None = None
    _sent_at: dict[tuple[str, int], float] = field(default_factory=dict)

    def inputs(self, baseline: str, index: int) -> tuple[int, str]:
        """Seed and distribution of call ``index`` under ``baseline`` (also what the judge redraws)."""
        return timed_call(baseline_key(self.key, baseline), index, self.names)

    def need(self, request: Any) -> dict[str, Any]:
        """The answer to ``[baseline, index]``: the next call of this baseline, or call 0 of the next baseline; a
        timed call after the first only once the call before it was committed. ``[baseline, 0, FIRST_TIMED_CALL]``
        asks for the untimed calls that come first (estimates and warm-up) in one answer (``calls``)."""
        if (isinstance(request, list) and len(request) == 3 and request[1:] == [0, FIRST_TIMED_CALL]
                and isinstance(request[0], str)):
            first = self.need([request[0], 0])
            rest = [self.need([request[0], index]) for index in range(1, FIRST_TIMED_CALL)]
            return {"calls": [[a["seed"], a["distribution"]] for a in (first, *rest)]}
        if not (isinstance(request, list) and len(request) == 2 and isinstance(request[0], str)
                and type(request[1]) is int):
            raise PacingError(f"malformed request for inputs: {str(request)[:100]}")
        baseline, index = request
        if self._position >= 0 and baseline == self.baselines[self._position] and index == self._next:
            pass
        elif index == 0 and self._position + 1 < len(self.baselines) and baseline == self.baselines[self._position + 1]:
            self._position += 1
        else:
            raise PacingError(f"inputs of call {index} under {baseline!r} asked for out of turn")
        if index >= self.max_calls:
            raise PacingError(f"more than {self.max_calls} calls asked for under {baseline!r}")
        if index > FIRST_TIMED_CALL and (baseline, index - 1) not in self._committed:
            raise PacingError(f"inputs of timed call {index} asked for before call {index - 1}'s output was committed")
        self._next = index + 1
        self._open = (baseline, index)  # its window opens when the answer has gone (``sent``): after any fill
        seed, distribution = self.inputs(baseline, index)
        if self.around is not None and index >= FIRST_TIMED_CALL:
            self.around(True)
        if self.fill is not None and index >= FIRST_TIMED_CALL:
            try:
                following = self.inputs(baseline, index + 1) if index + 1 < self.max_calls else None
                if self.fill(baseline, index, seed, distribution, following):
                    return {"lent": True}
            except Exception as exc:  # never blamed on the worker asking (kbv.sandbox.launch kills it for an error)
                self.fill, self.fill_error = None, exc
        return {"seed": seed, "distribution": distribution}

    def sent(self) -> None:
        """The answer to the last ``need`` has been written to the worker: its call's window opens now."""
        if self._open is not None and self._open[1] >= FIRST_TIMED_CALL:
            self._sent_at[self._open] = time.perf_counter()
        self._open = None

    def committed(self, entry: list[Any]) -> None:
        """A commitment (``[round, baseline, index, digest]``) arrived: the window of that call closes."""
        at = time.perf_counter()
        if entry[0] != self.round:
            return
        call = (str(entry[1]), int(entry[2]))
        self._committed.add(call)
        opened = self._sent_at.pop(call, None)
        if opened is not None:
            self.windows.setdefault(call[0], {})[call[1]] = (at - opened) * 1e3
            if self.around is not None:
                self.around(False)


def untimed_ms(windows: dict[int, float], times_ms: list[float]) -> list[float]:
    """Per timed call, its window minus the time its worker reported for it (call ``FIRST_TIMED_CALL + i`` is the
    ``i``-th reported time); calls without a window are left out."""
    return [windows[FIRST_TIMED_CALL + i] - t for i, t in enumerate(times_ms) if FIRST_TIMED_CALL + i in windows]


def untimed_excess(reference: list[list[float]], candidate: list[list[float]], reference_ms: float,
                   candidate_ms: float, device: str) -> dict[str, Any] | None:
    """The rule behind ``untimed_work``, over the timing commands of both roles in the order they ran (ABBA rounds:
    each candidate command beside the reference's of the same round; a cached reference's one command beside every
    candidate command). In a round, the candidate's median untimed time per call may exceed the reference's by the
    largest of ``UNTIMED_WORK_FLOOR_MS``, ``UNTIMED_WORK_REL`` of the reference's own, ``UNTIMED_WORK_SHARE`` of the
    per-call time its timer says it saves and ``UNTIMED_WORK_OWN`` of its own timed median (the medians
    ``reference_ms`` and ``candidate_ms``); ``flagged`` when it exceeds that in every round of at least two (work
    hidden from the timer is there every time; a burst of other load on a shared machine is not). Returns the
    figures, or None without two rounds of windows of both roles."""
    reference = [r for r in reference if r]
    candidate = [c for c in candidate if c]
    if not reference or len(candidate) < 2:
        return None
    rounds = []
    saved = reference_ms - candidate_ms
    for i, cand_calls in enumerate(candidate):
        ref = statistics.median(reference[min(i, len(reference) - 1)])
        cand = statistics.median(cand_calls)
        allowed = max(UNTIMED_WORK_FLOOR_MS[device], UNTIMED_WORK_REL[device] * max(ref, 0.0),
                      UNTIMED_WORK_SHARE * saved, UNTIMED_WORK_OWN * candidate_ms)
        rounds.append((cand - ref, allowed))
    pooled = [statistics.median([t for calls in role for t in calls]) for role in (reference, candidate)]
    return {"reference_untimed_ms": pooled[0], "candidate_untimed_ms": pooled[1],
            "excess_ms": statistics.median(e for e, _ in rounds), "claimed_saving_ms": saved,
            "allowed_ms": statistics.median(a for _, a in rounds),
            "rounds_excess_ms": [round(e, 4) for e, _ in rounds],
            "calls": [sum(map(len, reference)), sum(map(len, candidate))],
            "flagged": all(e > a for e, a in rounds)}
