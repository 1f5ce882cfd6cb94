"""Both roles' timed inputs, lent by a third process: the parent side.

For a process pair, a *lender* (a third worker of the reference's role: it never runs candidate code and is never
timed) makes one shared slot per role, between guard bands (``kbv.worker.lending``), and the reference's and the
candidate's timing workers each map their own (``borrow_timed``). While a role is timed, each timed call's request
for its inputs (``kbv.eval.pacing``) is answered only after the parent has had the lender read that role's slot back
(whatever the last call did to its inputs or their bands is seen outside the candidate's process) and fill it with
this call's draw. So neither worker holds a timed call's seed: the candidate cannot change how its timed inputs are
drawn (its default dtype, the problem's ``get_inputs``), and an input written into while timed is
``input_mutated`` whatever it reports. Both roles read their inputs the same way, from a slot another process has
just filled: on the CPU a call on such inputs costs some microseconds more than on a worker's own, and lending the
candidate's alone slowed it against the reference (docs/results/cpu-2026-12-04, cpu-2026-12-04-c).

The untimed calls before the trials (estimates and warm-up) are still drawn in the worker from seeds handed over;
they are neither timed nor judged.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Callable

from kbv.protocol import GUARD_BYTES, LEND_TIMED_DEFAULT, LENT_CHECKS_KEPT

Call = Callable[[dict[str, Any]], dict[str, Any]]
ROLES = ("reference", "candidate")


def lends(option: bool | None, device: str) -> tuple[bool, str | None]:
    """Whether a pair's timed inputs are lent (``EvalOptions.lend_timed``: always, never, or None for the device's
    default, ``LEND_TIMED_DEFAULT``), and if not, why."""
    if option is not None:
        return option, None if option else "off (KBV_LEND_TIMED=0)"
    if LEND_TIMED_DEFAULT.get("cuda" if device.startswith("cuda") else "cpu"):
        return True, None
    return False, f"not by default on {device} (LEND_TIMED_DEFAULT; KBV_LEND_TIMED=1 lends them)"


@dataclass
class TimedLoan:
    """One role's slot in one process pair: ``open`` lends it (False where it cannot be: that role's worker then
    draws its own timed inputs, and ``reason`` says why); ``filler`` serves one timing command's requests
    (``Pacer.fill``) and ``close_command`` reads the slot back after its last call. ``lender`` sends the lender
    its commands from inside the borrower's (no clock of their own), ``borrower`` the borrow. For the candidate's
    slot, ``findings`` lists the timed calls whose inputs or bands were written to (round, baseline, call index and
    what ``Lent.check`` saw) and ``seen`` the flags; inputs in ``excused`` (those the reference's own calls wrote
    into) are not compared. For the reference's slot the inputs its calls wrote into are collected in ``wrote``."""

    slot: str
    lender: Call
    borrower: Call
    excused: set[int] = field(default_factory=set)
    lent: bool = False
    reason: str | None = None
    calls: int = 0  # timed calls whose inputs were lent
    findings: list[dict[str, Any]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    wrote: set[int] = field(default_factory=set)
    predraw: bool = False  # the lender draws each next call's inputs ahead, into its own memory (LEND_PREDRAW)
    _last: tuple[int, str, int] | None = None

    def open(self, lender: Call) -> bool:
        """Lend the slot (``lender`` sends the command that makes it, on the stage's clock)."""
        reply = lender({"cmd": "lend_timed", "slot": self.slot, "guard_bytes": GUARD_BYTES,
                        "seed": secrets.randbits(63)})
        if not isinstance(reply.get("lent"), dict):
            self.reason = str(reply.get("lend_error") or "no slot")[:400]
            return False
        self.borrower({"cmd": "borrow_timed", "lent": reply["lent"]})
        self.lent = True
        return True

    def filler(self, round_index: int) -> Callable[[str, int, int, str, tuple[int, str] | None], bool] | None:
        """``Pacer.fill`` for one of the borrower's timing commands (None where nothing is lent). Where the lender
        draws ahead (``predraw``), each fill also hands it the next call's seed and distribution."""
        if not self.lent:
            return None

        def fill(baseline: str, index: int, seed: int, distribution: str,
                 following: tuple[int, str] | None = None) -> bool:
            msg = {"cmd": "fill", "slot": self.slot, "seed": seed, "distribution": distribution,
                   "check": self._last is not None, "excused": sorted(self.excused)}
            if self.predraw and following is not None:
                msg["next"] = [following[0], following[1]]
            reply = self.lender(msg)
            self._note(reply.get("check"))
            self._last = (round_index, baseline, index)
            if reply.get("refill_error"):  # inputs of another layout: this call's seed goes over, nothing more lent
                self.lent, self.reason, self._last = False, str(reply["refill_error"])[:400], None
                return False
            self.calls += 1
            return True
        return fill

    def close_command(self) -> None:
        """After one of the borrower's timing commands: the slot read back for its last call."""
        if self.lent and self._last is not None:
            self._note(self.lender({"cmd": "fill", "slot": self.slot, "check": True,
                                    "excused": sorted(self.excused)}).get("check"))
        self._last = None

    def _note(self, check: Any) -> None:
        if not isinstance(check, dict) or self._last is None:
            return
        mutated, bands = check.get("mutated_inputs") or [], check.get("guard_violations") or []
        if self.slot == "reference":  # trusted: what its own calls write into is allowed the candidate too
            self.wrote.update(i for i in mutated if isinstance(i, int))
            return
        if (mutated or bands) and len(self.findings) < LENT_CHECKS_KEPT:
            round_index, baseline, index = self._last
            self.findings.append({"round": round_index, "baseline": baseline, "index": index,
                                  "mutated_inputs": mutated, "guard_violations": bands})
        if mutated:
            self.seen.add("input_mutated")
        if bands:
            self.seen.add("out_of_bounds_write")


def open_loans(lender: Call, clocked: Call, borrowers: dict[str, Call], predraw: bool = False) -> dict[str, TimedLoan]:
    """Both roles' slots, lent by the same lender; where either cannot be lent, neither role's inputs are (the two
    roles always read their timed inputs the same way). ``clocked`` sends the lender the commands that make them;
    ``predraw``: the lender draws each next call's inputs ahead (``LEND_PREDRAW``), for both roles alike."""
    loans = {role: TimedLoan(role, lender, borrowers[role], predraw=predraw) for role in ROLES}
    loans["candidate"].excused = loans["reference"].wrote  # the same set: filled as the reference's calls run
    for role in ROLES:
        if not loans[role].open(clocked):
            reason = loans[role].reason
            for loan in loans.values():
                loan.lent, loan.reason = False, f"the {role}'s slot: {reason}"
            break
    return loans
