"""Recording what every timed call launched (issue 12, rule 2): no call is the recorded one.

On a GPU kernel names can only be read inside the process that launches them (CUPTI), so the one profiled call of
the correctness stage is a call a candidate can tell apart. Instead every timing worker of both roles holds a
device-only profiler session (CUDA activity: kernels, copies and sets, no CPU-side events) from its set-up until the
parent asks for the recording after the pair's rounds: one session per worker, so its start and stop are paid once,
outside the timed rounds, and the profiler reads as enabled in every command of a timing worker, the
memory-measured call's too. Its collection is switched on right before each forward of a timing command and off
right after it and its synchronize (``Recording.on``/``off``, which the timer calls): what is recorded is what the
forward launched, on any stream or thread, and none of the harness's own work between calls (the cache flush, the
input draws, the kept copies). Estimate, warm-up and timed calls are all recorded. On the CPU the same mechanism
records CPU operators instead, a stand-in that lets the mechanism be tested there (off by default: the parent's
samples decide rule 2 on the CPU).

The worker returns raw names with call counts and device time; the trusted parent classifies them
(``kbv.fallback.classify_gpu``). Evidence from the candidate's process: it can add a flag, never clear one. A
forward that stops the session, or leaves it empty on a GPU, is ``fallback``; one that switches collection off and
back on around part of its work is a known limit (docs/security.md). The recording also reports the wall time its
windows held collection on (``window_us``) and the timed trials' windows apart (``timed``), against which the parent
sets the recorded device time (``coverage``, ``timed_coverage``).
"""

from __future__ import annotations

import bisect
import time
from typing import Any

import torch

from kbv.worker.recorder import PROFILER as _ENTRY  # captured before any candidate code exists

_now = time.perf_counter_ns
_unix_ns = time.time_ns  # the profiler's events carry Unix-time nanoseconds (kineto's clock): the timed windows' too

#: Distinct names kept per command (by device time); the rest are counted in ``names_dropped``.
MAX_NAMES = 200


class Recording:
    """One timing worker's session. ``start`` at its set-up, ``on``/``off`` around each forward of its timing
    commands (the timer), ``stop`` when the parent asks for the recording (``recorded``), after the pair's rounds: ``{"status": "ok" | ..., "windows": n, "window_us": wall time with collection on,
    "timed": {"windows", "window_us", "device_us"} (the timed trials' windows and the recorded device time inside
    them), "kernels": {name: [calls, total_us]}}``."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")
        self.status: dict[str, Any] = {"status": "not started"}
        self.windows = 0
        self.running = False
        self.lost = 0  # windows after which the session was no longer enabled (the forward stopped it)
        self.window_ns = 0  # wall time with collection on (each window: a forward, or the warm-up, and its sync)
        self._opened = 0
        self.timed_windows: list[tuple[int, int]] = []  # the timed trials' windows, Unix ns: which events are theirs
        self.commands = 0  # timing commands (one per baseline) whose forwards it recorded (counted by the session)

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
            self.activities = {_ENTRY["cuda"] if self.cuda else _ENTRY["cpu"]}
            config = _ENTRY["config"](_ENTRY["kineto"], False, False, False, False, False, _ENTRY["experimental"]())
            _ENTRY["prepare"](config, self.activities)
            _ENTRY["enable"](config, self.activities)
            _ENTRY["toggle"](False, self.activities)  # off until the first forward
        except Exception as exc:  # never fail the timing for want of a recording
            self.status = {"status": "error", "reason": f"start: {type(exc).__name__}: {exc}"[:300]}
            return
        self.running = True
        self.status = {"status": "ok"}

    def on(self, timed: bool = False) -> None:
        """Collection on, for one forward (``timed``: a timed trial's) or the warm-up's calls."""
        if self.running:
            self._toggle(True)
            self.windows += 1
            if timed:
                self.timed_windows.append((_unix_ns(), 0))
            self._opened = _now()

    def off(self) -> None:
        if self.running:
            self.window_ns += _now() - self._opened
            if self.timed_windows and self.timed_windows[-1][1] == 0:
                self.timed_windows[-1] = (self.timed_windows[-1][0], _unix_ns())
            if not _ENTRY["enabled"]():  # type: ignore[index]
                self.lost += 1
                return
            self._toggle(False)

    def _toggle(self, enable: bool) -> None:
        try:
            _ENTRY["toggle"](enable, self.activities)  # type: ignore[index]
        except Exception as exc:  # the timing goes on unrecorded; the parent adds nothing from it
            self.running = False
            self.status = {"status": "error", "reason": f"toggle: {type(exc).__name__}: {exc}"[:300]}
            try:
                _ENTRY["disable"]()  # type: ignore[index]
            except Exception:
                pass

    def stop(self) -> dict[str, Any]:
        if not self.running:
            return {**self.status, "commands": self.commands, "windows": 0, "kernels": {}}
        self.running = False
        try:
            events = _ENTRY["disable"]().events()  # type: ignore[index]
        except Exception as exc:
            return {"status": "stopped", "reason": f"the session was gone at its end: "
                                                   f"{type(exc).__name__}: {exc}"[:300],
                    "commands": self.commands, "windows": self.windows, "kernels": {}}
        totals: dict[str, list[float]] = {}
        wanted = torch.autograd.DeviceType.CUDA if self.cuda else torch.autograd.DeviceType.CPU
        timed = [w for w in self.timed_windows if w[1]]
        opens = [w[0] for w in timed]
        timed_ns = 0  # device time of the events whose middle falls in a timed trial's window
        for event in events:
            if event.device_type() != wanted or event.is_user_annotation() or (
                    not self.cuda and "::" not in event.name()):
                continue  # kernels, copies and sets (on the CPU: operators), not ranges a forward annotated
            entry = totals.setdefault(str(event.name())[:300], [0, 0.0])
            entry[0] += 1
            entry[1] += event.duration_ns() / 1e3
            middle = event.start_ns() + event.duration_ns() // 2
            at = bisect.bisect_right(opens, middle) - 1
            if at >= 0 and middle <= timed[at][1]:
                timed_ns += event.duration_ns()
        ranked = sorted(totals.items(), key=lambda kv: -kv[1][1])
        status = "stopped" if self.lost else "ok"
        return {"status": status, "commands": self.commands, "windows": self.windows, "lost_windows": self.lost,
                "window_us": round(self.window_ns / 1e3, 3),
                "timed": {"windows": len(timed), "window_us": round(sum(b - a for a, b in timed) / 1e3, 3),
                          "device_us": round(timed_ns / 1e3, 3)},
                "kernels": {name: [int(calls), round(us, 3)] for name, (calls, us) in ranked[:MAX_NAMES]},
                "names_dropped": max(0, len(ranked) - MAX_NAMES)}

