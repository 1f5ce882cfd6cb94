"""The parent's side of recording every timed call (``kbv.worker.kernel_record``): whether a pair records, what
each role's timing commands launched summed over the stage, and what that adds to the fallback verdict.

The profiled call of the correctness stage is one call a candidate can tell apart (on a GPU it runs under a full
profiler and a dispatch mode). Every forward of every timing command is recorded too, in both roles alike, so a
kernel that runs its own code when profiled and a library's when timed is seen where it is timed: the candidate's
recorded kernels are classified as the profiled call's are (``kbv.fallback.classify_gpu``, by name, with no
launcher: the recording has no CPU-side events) and a flag worse than the profiled call's is added. The figures come
from the candidate's process, so they add flags and never clear one. A candidate whose forward stopped the recording
while the reference's recorded is ``fallback`` (what it hid cannot be known).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from kbv import fallback as fallback_check
from kbv.protocol import RECORD_TIMED_DEFAULT

ROLES = ("reference", "candidate")
_RANK = {"partial_fallback": 1, "fallback": 2}


def records(option: bool | None, device: str) -> bool:
    """Whether timing commands record (``EvalOptions.record_timed``: always, never, or None for the device's
    default, ``RECORD_TIMED_DEFAULT``)."""
    if option is not None:
        return option
    return RECORD_TIMED_DEFAULT.get("cuda" if device.startswith("cuda") else "cpu", False)


class TimedRecords:
    """Each role's recordings over the stage: ``add`` each timing reply's ``recorded``, then ``judge``."""

    def __init__(self) -> None:
        self.kernels: dict[str, dict[str, list[float]]] = {role: {} for role in ROLES}
        self.windows = {role: 0 for role in ROLES}
        self.commands = {role: 0 for role in ROLES}
        self.problems: dict[str, list[str]] = {role: [] for role in ROLES}  # statuses other than ok, with reasons

    def add(self, role: str, recorded: Any) -> None:
        if not isinstance(recorded, dict):
            self.problems[role].append("no recording in the reply")
            return
        self.commands[role] += 1
        self.windows[role] += int(recorded.get("windows") or 0)
        if recorded.get("status") != "ok":
            self.problems[role].append(f"{recorded.get('status')}: {recorded.get('reason', '')}"[:300])
        kernels = recorded.get("kernels")
        for name, value in (kernels.items() if isinstance(kernels, dict) else ()):
            if isinstance(value, list) and len(value) == 2:
                entry = self.kernels[role].setdefault(str(name)[:300], [0, 0.0])
                entry[0] += int(value[0])
                entry[1] += float(value[1])

    def judge(self, own_roots: Iterable[Path], device: str, profiled_flags: Iterable[str]) -> tuple[dict[str, Any],
                                                                                                    list[str]]:
        """The record's ``fallback.timed_calls`` and the flags to add: a fallback flag worse than the profiled call's
        (``profiled_flags``), or ``fallback`` where the candidate's recording was stopped and the reference's was
        not. Nothing is added where the reference's own forwards recorded nothing (the recording does not work
        here)."""
        cuda = device.startswith("cuda")
        record: dict[str, Any] = {
            "commands": dict(self.commands), "windows": dict(self.windows),
            "problems": {role: p[:8] for role, p in self.problems.items() if p},
            "reference_kernels": _top(self.kernels["reference"])}
        if not self.kernels["reference"] or self.problems["reference"]:
            return record | {"status": "unusable", "reason": "the reference's own recording was empty or failed"}, []
        stopped = [p for p in self.problems["candidate"] if p.startswith("stopped")]
        if stopped:
            return record | {"status": "stopped_by_candidate", "flags": ["fallback"]}, ["fallback"]
        if self.problems["candidate"]:
            return record | {"status": "unusable", "reason": "the candidate's recording failed"}, []
        own = fallback_check.own_kernel_names(list(own_roots)) if cuda else {"defined": [], "triton": []}
        entries = [{"name": name, "us": us, "calls": calls, "launcher": None if cuda else name}
                   for name, (calls, us) in self.kernels["candidate"].items()]  # the CPU stand-in: ops launch themselves
        verdict = fallback_check.classify_gpu(entries, own)
        worst = max((_RANK.get(f, 0) for f in profiled_flags), default=0)
        added = [f for f in verdict["flags"] if _RANK.get(f, 0) > worst]
        return record | {"status": "ok", "library_share_time": verdict["library_share_time"],
                         "own_us": verdict["own_us"], "library_us": verdict["library_us"],
                         "data_movement_us": verdict["data_movement_us"], "flags": verdict["flags"],
                         "flags_added": added, "kernels": verdict["kernels"][:20]}, added


def _top(kernels: dict[str, list[float]], n: int = 10) -> list[dict[str, Any]]:
    ranked = sorted(kernels.items(), key=lambda kv: -kv[1][1])
    return [{"name": name[:200], "calls": int(calls), "us": round(us, 3)} for name, (calls, us) in ranked[:n]]
