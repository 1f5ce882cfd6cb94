"""The parent's side of recording every timed call (``kbv.worker.kernel_record``): whether a pair records, what
each role's timing commands launched summed over the stage, and what that adds to the fallback verdict.

The profiled call of the correctness stage is one call a candidate can tell apart (on a GPU it runs under a full
profiler and a dispatch mode). Where recording is on (``RECORD_TIMED_DEFAULT``: off on both devices: on an H100 a recorded call read
1.115 times an unrecorded one's time over 20 level-1 pairs, h100-2026-12-06-g; ``KBV_RECORD_TIMED=1``), every forward of every timing command is
recorded too, in both roles alike, so a kernel that runs its own code when profiled and a library's when timed is seen where it is timed: the candidate's
recorded kernels are classified as the profiled call's are (``kbv.fallback.classify_gpu``, by name, with no
launcher: the recording has no CPU-side events) and a flag worse than the profiled call's is added. The figures come
from the candidate's process, so they add flags and never clear one. A candidate whose forward stopped the recording,
or whose forwards on a GPU recorded no device work at all, while the reference's recorded is ``fallback`` (what it
hid cannot be known: every forward that computes on a GPU launches a kernel or a copy, and the process's every
launch is recorded unless its collection was switched off). Each role's ``coverage`` (recorded device time over the
wall time of the forwards' windows) and ``timed_coverage`` (the same within the timed trials' windows alone) are recorded
and decide nothing.
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
    """Each role's recordings over the stage: ``add`` each timing worker's ``recorded`` reply, then ``judge``."""

    def __init__(self) -> None:
        self.kernels: dict[str, dict[str, list[float]]] = {role: {} for role in ROLES}
        self.windows = {role: 0 for role in ROLES}
        self.window_us = {role: 0.0 for role in ROLES}
        self.timed = {role: {"windows": 0, "window_us": 0.0, "device_us": 0.0} for role in ROLES}
        self.commands = {role: 0 for role in ROLES}
        self.problems: dict[str, list[str]] = {role: [] for role in ROLES}  # statuses other than ok, with reasons
        self.warm_s: dict[str, float] = {}  # the longest one-time profiler start in each role's set-up

    def warmed(self, role: str, warm: Any) -> None:
        """A timing worker's set-up reply's ``record_warm`` (its session's start, ``Session.cmd_setup``): a
        diagnostic only."""
        seconds = warm.get("seconds") if isinstance(warm, dict) else None
        if isinstance(seconds, (int, float)):
            self.warm_s[role] = max(self.warm_s.get(role, 0.0), float(seconds))

    def add(self, role: str, recorded: Any) -> None:
        if not isinstance(recorded, dict):
            self.problems[role].append("no recording in the reply")
            return
        self.commands[role] += int(recorded.get("commands") or 0)
        self.windows[role] += int(recorded.get("windows") or 0)
        self.window_us[role] += float(recorded.get("window_us") or 0.0)
        timed = recorded.get("timed")
        for key in ("windows", "window_us", "device_us"):
            value = timed.get(key) if isinstance(timed, dict) else None
            if isinstance(value, (int, float)):
                self.timed[role][key] += value
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
        (``profiled_flags``), or ``fallback`` where the candidate's recording was stopped, or on a GPU held no device
        work at all, and the reference's was not. Nothing is added where the reference's own forwards recorded
        nothing (the recording does not work here)."""
        cuda = device.startswith("cuda")
        record: dict[str, Any] = {
            "commands": dict(self.commands), "windows": dict(self.windows),
            "window_ms": {role: round(us / 1e3, 3) for role, us in self.window_us.items()},
            "warm_s": dict(self.warm_s),
            "coverage": {role: self.coverage(role) for role in ROLES},
            "timed_coverage": {role: self.timed_coverage(role) for role in ROLES},
            "problems": {role: p[:8] for role, p in self.problems.items() if p},
            "reference_kernels": _top(self.kernels["reference"])}
        if not self.kernels["reference"] or self.problems["reference"]:
            return record | {"status": "unusable", "reason": "the reference's own recording was empty or failed"}, []
        stopped = [p for p in self.problems["candidate"] if p.startswith("stopped")]
        if stopped:
            return record | {"status": "stopped_by_candidate", "flags": ["fallback"]}, ["fallback"]
        if self.problems["candidate"]:
            return record | {"status": "unusable", "reason": "the candidate's recording failed"}, []
        if cuda and not self.kernels["candidate"] and self.windows["candidate"]:
            # every forward that computes on a GPU launches something, and the session records the whole process's
            # launches: none in any window means its collection was switched off (the CPU stand-in records
            # operators only, which a C++ extension's own loop is not: there an empty recording is no evidence)
            added = [] if any(_RANK.get(f, 0) >= _RANK["fallback"] for f in profiled_flags) else ["fallback"]
            return record | {"status": "empty_for_candidate", "flags": ["fallback"], "flags_added": added}, added
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

    def coverage(self, role: str) -> float | None:
        """Recorded device time over the wall time of the forwards' windows, for ``role`` (a diagnostic: with several
        streams it can exceed 1, and a launch-bound forward's is low)."""
        if self.window_us[role] <= 0:
            return None
        return round(sum(us for _, us in self.kernels[role].values()) / self.window_us[role], 4)


    def timed_coverage(self, role: str) -> float | None:
        """Recorded device time inside the timed trials' windows over those windows' wall time (the estimate and
        warm-up calls, which a candidate can tell apart, left out; a diagnostic)."""
        timed = self.timed[role]
        if timed["window_us"] <= 0:
            return None
        return round(timed["device_us"] / timed["window_us"], 4)


def _top(kernels: dict[str, list[float]], n: int = 10) -> list[dict[str, Any]]:
    ranked = sorted(kernels.items(), key=lambda kv: -kv[1][1])
    return [{"name": name[:200], "calls": int(calls), "us": round(us, 3)} for name, (calls, us) in ranked[:n]]
