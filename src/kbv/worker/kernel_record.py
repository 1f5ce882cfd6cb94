"""Recording what every timed call launched (issue 12, rule 2): no call is the recorded one.

On a GPU kernel names can only be read inside the process that launches them (CUPTI), so the one profiled call of
the correctness stage is a call a candidate can tell apart. Instead every timing worker of both roles holds a
device-only profiler session (CUDA activity: kernels, copies and sets, no CPU-side events) from its set-up until the
parent asks for the recording after the pair's rounds: one session per worker, so its start and stop are paid once,
outside the timed rounds, and the profiler reads as enabled in every command of a timing worker, the
memory-measured call's too. Its collection stays on for the whole session and is never switched: each forward of a
timing command (with its synchronize) is a **window** of the session's clock (``Recording.on``/``off``, which the
timer calls), and at the end only the events whose middle falls in a window are kept. So what is recorded is what
the forwards launched, on any stream or thread, and none of the harness's own work between calls (the cache flush,
the input draws, the kept copies), which ran and finished outside every window. (The first version switched
collection on and off around each forward, ``_toggle_collection_dynamic``: on the H100 with torch 2.11 and CUDA 13
it recorded no kernel in any role, docs/results/h100-2026-12-06, probably the loss of the buffers a switch
flushes that kineto's pull request 1362 fixed in 2026, and each switch cost about 7 ms.) Estimate, warm-up and
timed calls are all recorded. On the CPU the same mechanism records CPU operators instead, a stand-in that lets the
mechanism be tested there (off by default: the parent's samples decide rule 2 on the CPU).

The worker returns raw names with call counts and device time; the trusted parent classifies them
(``kbv.fallback.classify_gpu``). Evidence from the candidate's process: it can add a flag, never clear one. A
forward that stops the session, or leaves it empty on a GPU, is ``fallback``; one that switches collection off and
back on around part of its work is a known limit (docs/security.md). The recording also reports the wall time of its
windows (``window_us``) and the timed trials' windows apart (``timed``), against which the parent sets the recorded
device time (``coverage``, ``timed_coverage``).
"""

from __future__ import annotations

import bisect
import heapq
import time
from typing import Any

import torch

from kbv.worker.recorder import PROFILER as _ENTRY  # captured before any candidate code exists

_unix_ns = time.time_ns  # the profiler's events carry Unix-time nanoseconds (kineto's clock): the timed windows' too

#: What the harness's cache flush (``flush.zero_()``) launches on a GPU: a fill kernel (or a set).
FLUSH_NAMES = ("FillFunctor", "Memset")
#: What the timer launches before it where it records (``torch.cuda._sleep``: ``RECORD_LEAD_CYCLES``), to keep the GPU
#: busy while the forward is launched.
LEAD_NAMES = ("spin_kernel",)

#: Distinct names kept per command (by device time); the rest are counted in ``names_dropped``.
MAX_NAMES = 200


class Recording:
    """One timing worker's session. ``start`` at its set-up, ``on``/``off`` around each forward of its timing
    commands (the timer), ``stop`` when the parent asks for the recording (``recorded``), after the pair's rounds:
    ``{"status": "ok" | ..., "windows": n, "window_us": wall time of the windows, "timed": {"windows", "window_us",
    "device_us"} (the timed trials' windows and the recorded device time inside them), "kernels": {name: [calls,
    total_us]}}`` (the events inside a window only), ``outside_windows`` (how many were not: the harness's own)."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")
        self.status: dict[str, Any] = {"status": "not started"}
        self.windows: list[tuple[int, int, bool, bool]] = []  # (open, close, timed, flushed), events' clock (ns)
        self.running = False
        self.lost = 0  # windows after which the session was no longer enabled (the forward stopped it)
        self.commands = 0  # timing commands (one per baseline) whose forwards it recorded (counted by the session)
        self._open: tuple[int, bool, bool] | None = None

    def start(self) -> None:
        if _ENTRY is None:
            self.status = {"status": "unavailable", "reason": "this torch lacks the profiler entry points"}
            return
        try:
            if _ENTRY["enabled"]():
                self.status = {"status": "unavailable", "reason": "another profiler is active"}
                return
            if not _ENTRY["available"]():
                self.status = {"status": "unavailable", "reason": "kineto is not available"}
                return
            activities = {_ENTRY["cuda"] if self.cuda else _ENTRY["cpu"]}
            config = _ENTRY["config"](_ENTRY["kineto"], False, False, False, False, False, _ENTRY["experimental"]())
            _ENTRY["prepare"](config, activities)
            _ENTRY["enable"](config, activities)  # collection on until ``stop``: never switched (see above)
        except Exception as exc:  # never fail the timing for want of a recording
            self.status = {"status": "error", "reason": f"start: {type(exc).__name__}: {exc}"[:300]}
            return
        self.running = True
        self.status = {"status": "ok"}

    def on(self, timed: bool = False, flushed: bool = False) -> None:
        """A window opens, for one forward (``timed``: a timed trial's) or the warm-up's calls; ``flushed``: the
        harness's cache flush comes first in it (a GPU trial's), after the timer's spin kernel where it records, and
        both are left out (``_harness_lead``)."""
        if self.running:
            self._open = (_unix_ns(), timed, flushed)

    def off(self) -> None:
        """The window closes (after the forward and its synchronize); a session the forward stopped is lost."""
        if self.running and self._open is not None:
            opened, timed, flushed = self._open
            self._open = None
            self.windows.append((opened, _unix_ns(), timed, flushed))
            if not _ENTRY["enabled"]():  # type: ignore[index]
                self.lost += 1

    def stop(self) -> dict[str, Any]:
        if not self.running:
            return {**self.status, "commands": self.commands, "windows": 0, "kernels": {}}
        self.running = False
        try:
            events = _ENTRY["disable"]().events()  # type: ignore[index]
        except Exception as exc:
            return {"status": "stopped", "reason": f"the session was gone at its end: "
                                                   f"{type(exc).__name__}: {exc}"[:300],
                    "commands": self.commands, "windows": len(self.windows), "kernels": {}}
        wanted = torch.autograd.DeviceType.CUDA if self.cuda else torch.autograd.DeviceType.CPU
        windows = sorted(self.windows)
        opens = [w[0] for w in windows]
        inside: list[tuple[int, int, Any]] = []  # (window, start, event)
        outside = 0
        for event in events:
            if event.device_type() != wanted or event.is_user_annotation() or (
                    not self.cuda and "::" not in event.name()):
                continue  # kernels, copies and sets (on the CPU: operators), not ranges a forward annotated
            middle = event.start_ns() + event.duration_ns() // 2
            at = bisect.bisect_right(opens, middle) - 1
            if at < 0 or middle > windows[at][1]:
                outside += 1  # the harness's own work between forwards
                continue
            inside.append((at, event.start_ns(), event))
        leads, flushes = _harness_lead(windows, inside)
        totals: dict[str, list[float]] = {}
        timed_ns = 0  # device time of the events whose middle falls in a timed trial's window
        for at, _, event in inside:
            if id(event) in flushes or id(event) in leads:
                continue
            entry = totals.setdefault(str(event.name())[:300], [0, 0.0])
            entry[0] += 1
            entry[1] += event.duration_ns() / 1e3
            if windows[at][2]:
                timed_ns += event.duration_ns()
        ranked = sorted(totals.items(), key=lambda kv: -kv[1][1])
        timed = [(a, b) for a, b, is_timed, _ in windows if is_timed]
        return {"status": "stopped" if self.lost else "ok", "commands": self.commands, "windows": len(windows),
                "lost_windows": self.lost,
                "window_us": round(sum(b - a for a, b, _, _ in windows) / 1e3, 3),
                "timed": {"windows": len(timed), "window_us": round(sum(b - a for a, b in timed) / 1e3, 3),
                          "device_us": round(timed_ns / 1e3, 3)},
                "kernels": {name: [int(calls), round(us, 3)] for name, (calls, us) in ranked[:MAX_NAMES]},
                "names_dropped": max(0, len(ranked) - MAX_NAMES), "outside_windows": outside,
                "flushes_left_out": len(flushes), "flushes_unseen": sum(w[3] for w in windows) - len(flushes),
                "leads_left_out": len(leads)}


def _harness_lead(windows: list[tuple[int, int, bool, bool]],
                  inside: list[tuple[int, int, Any]]) -> tuple[set[int], set[int]]:
    """The harness's own work that opens each window that starts with a flush (``flushed``), by the events' ids:
    the timer's spin kernel (``LEAD_NAMES``) where it is the window's first event by start, then the flush: the next
    event, where it is a fill or a set. Both are launched first in the window, on an idle GPU, before any forward code
    runs; a window that opens otherwise keeps its events (a flush not seen so is counted as ``flushes_unseen``)."""
    opening: dict[int, list[tuple[int, Any]]] = {}
    for at, start, event in inside:
        if windows[at][3]:
            opening.setdefault(at, []).append((start, event))
    leads: set[int] = set()
    flushes: set[int] = set()
    for events in opening.values():
        first = heapq.nsmallest(2, events, key=lambda e: e[0])
        if any(n in str(first[0][1].name()) for n in LEAD_NAMES):
            leads.add(id(first[0][1]))
            first = first[1:]
        if first and any(n in str(first[0][1].name()) for n in FLUSH_NAMES):
            flushes.add(id(first[0][1]))
    return leads, flushes
