"""The candidate's timed inputs, lent by the judge: the parent side.

For a process pair, the reference's worker (the judge: it never runs candidate code) makes one shared slot for
the inputs of a timed call, between guard bands (``kbv.worker.lending``), and the candidate's worker maps it
(``borrow_timed``). While the candidate is timed, each timed call's request for its inputs (``kbv.eval.pacing``)
is answered only after the parent has had the judge read the slot back, so whatever the last call did to its
inputs or their bands is seen outside the candidate's process, and fill it with this call's draw. The candidate's
worker never holds a timed call's seed, so it cannot change how timed inputs are drawn (its default dtype, the
problem's ``get_inputs``), and an input written into while timed is ``input_mutated`` whatever it reports.

The untimed calls before the trials (estimates and warm-up) are still drawn in the worker from seeds handed over;
they are neither timed nor judged.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Callable

from kbv.protocol import GUARD_BYTES, LEND_TIMED_MIN_MS, LENT_CHECKS_KEPT

Call = Callable[[dict[str, Any]], dict[str, Any]]


def lends(option: bool | None, device: str, reference_ms: float | None) -> tuple[bool, str | None]:
    """Whether the judge lends a pair's timed inputs (``EvalOptions.lend_timed``: always, never, or None: where the
    reference's median call, ``reference_ms``, takes at least ``LEND_TIMED_MIN_MS`` on ``device``), and if not, why."""
    if option is not None:
        return option, None if option else "off (KBV_LEND_TIMED=0)"
    least = LEND_TIMED_MIN_MS.get("cuda" if device.startswith("cuda") else "cpu")
    if least is None:
        return False, f"not by default on {device} (LEND_TIMED_MIN_MS; KBV_LEND_TIMED=1 lends them)"
    if reference_ms is None or reference_ms < least:
        return False, (f"the reference's call ({reference_ms if reference_ms is None else round(reference_ms, 4)} ms) "
                       f"is under LEND_TIMED_MIN_MS ({least} ms) on {device} (KBV_LEND_TIMED=1 lends them)")
    return True, None


@dataclass
class TimedLoan:
    """One process pair's slot: ``open`` lends it (False where it cannot be: the worker then draws its own timed
    inputs, as before, and ``reason`` says why); ``filler`` serves one candidate timing command's requests
    (``Pacer.fill``) and ``close_command`` reads the slot back after its last call. ``findings`` lists the timed
    calls whose inputs or bands were written to (round, baseline, call index and what ``Lent.check`` saw).
    ``reference`` sends the fills (from inside the candidate's command), ``candidate`` the borrow."""

    reference: Call
    candidate: Call
    lent: bool = False
    reason: str | None = None
    calls: int = 0  # timed calls whose inputs were lent
    findings: list[dict[str, Any]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)  # the flags the read-backs found
    _last: tuple[int, str, int] | None = None

    def open(self, reference: Call) -> bool:
        """Lend the slot (``reference`` sends the command that makes it)."""
        reply = reference({"cmd": "lend_timed", "guard_bytes": GUARD_BYTES, "seed": secrets.randbits(63)})
        if not isinstance(reply.get("lent"), dict):
            self.reason = str(reply.get("lend_error") or "no slot")[:400]
            return False
        self.candidate({"cmd": "borrow_timed", "lent": reply["lent"]})
        self.lent = True
        return True

    def filler(self, round_index: int) -> Callable[[str, int, int, str], bool] | None:
        """``Pacer.fill`` for one of the candidate's timing commands (None where nothing is lent)."""
        if not self.lent:
            return None

        def fill(baseline: str, index: int, seed: int, distribution: str) -> bool:
            reply = self.reference({"cmd": "fill", "seed": seed, "distribution": distribution,
                                    "check": self._last is not None})
            self._note(reply.get("check"))
            self._last = (round_index, baseline, index)
            if reply.get("refill_error"):  # inputs of another layout: this call's seed goes over, nothing more lent
                self.lent, self.reason, self._last = False, str(reply["refill_error"])[:400], None
                return False
            self.calls += 1
            return True
        return fill

    def close_command(self) -> None:
        """After one of the candidate's timing commands: the slot read back for its last call."""
        if self.lent and self._last is not None:
            self._note(self.reference({"cmd": "fill", "check": True}).get("check"))
        self._last = None

    def _note(self, check: Any) -> None:
        if not isinstance(check, dict) or self._last is None:
            return
        mutated, bands = check.get("mutated_inputs") or [], check.get("guard_violations") or []
        if (mutated or bands) and len(self.findings) < LENT_CHECKS_KEPT:
            round_index, baseline, index = self._last
            self.findings.append({"round": round_index, "baseline": baseline, "index": index,
                                  "mutated_inputs": mutated, "guard_violations": bands})
        if mutated:
            self.seen.add("input_mutated")
        if bands:
            self.seen.add("out_of_bounds_write")
