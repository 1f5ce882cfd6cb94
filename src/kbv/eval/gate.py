"""Sharing one GPU between pairs: correctness runs may overlap, timing always has the device to itself.

A :class:`DeviceGate` is a readers-writer lock per GPU. Correctness stages enter it shared; a performance stage
enters ``timing``: a shared place (its first pair's set-up and memory measure beside other pairs' correctness) that
becomes the device to itself for timing without letting another holder in between, so no worker with candidate code
is ever idle, or busy, beside another pair's timing. One performance stage holds such a place at a time; one that
holds or awaits it holds back new correctness stages, so timing is never starved and its set-up overlaps the drain
of the correctness stages already inside, not new ones. A correctness stage also says how
much device memory it is expected to need (``kbv.eval.pair.correctness_memory``): it joins others only while their
needs and its own fit the gate's ``capacity`` (alone it always enters), so pairs with large tensors no longer run
out of memory beside each other and run their correctness again; one expected to need nearly all of it
(``alone_above``, ``GATE_ALONE_FRACTION``) runs alone. Processes started ahead wait idle on the GPU,
a CUDA context each (about 0.5-0.6 GiB on the H100): they say how to close them (``hold_idle``), and ``exclusive``
closes them all, so a pair run again alone has the memory too (on an 80 GB H100, fourteen such contexts left a
6 GiB problem's run again out of memory: h100-2026-12-06-c); a stage that runs alone because it nearly fills the GPU
closes others, not its own, until the device has the room it expects (``close_idle_but``). Processes
started outside any stage (``starting``) are up before the next timing has the device alone. With
``EvalOptions.gpu_share`` at 1 (the default) a GPU runs one pair at a time and the gate never waits.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from concurrent import futures
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Callable


class DeviceGate:
    def __init__(self, capacity: int | None = None, alone_above: float = 1.0) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._used = 0  # the expected device memory of the correctness stages inside
        self._writer = False
        self._writers_waiting = 0
        self._held_back = 0  # correctness stages waiting for memory: no later one overtakes them
        self._timing = False  # a performance stage holds its place (``timing``): a second waits
        self._places_waiting = 0  # performance stages waiting for the place: they hold back new correctness stages
        self.capacity = capacity  # bytes the shared stages' expected needs may add up to (None: no bound)
        self.alone_above = alone_above  # a correctness stage expected to need more of ``capacity`` runs alone
        self._idle: dict[int, Callable[[], int]] = {}  # how to close the processes started ahead (``hold_idle``)
        self._starting: list[Future] = []  # processes starting, outside any stage: timing waits for them (``starting``)
        self._idle_keys = itertools.count()

    @contextmanager
    def shared(self, need: int = 0) -> Iterator[None]:
        """A correctness stage expected to need ``need`` bytes of device memory: alongside other correctness
        stages while their needs fit ``capacity`` (alone, whatever its need), never during timing. One held back
        for memory goes before any that arrives after it (a large pair is not starved by a stream of small ones).
        One expected to need more than ``alone_above`` of ``capacity`` is taken to fill it (``nearly_fills``): it
        enters alone and none joins it."""
        if self.nearly_fills(need):
            need = max(need, int(self.capacity or 0) + 1)
        with self._enter_shared(need, timing=False):
            yield

    def close_idle_but(self, own: Callable[[], int] | None = None, room: Callable[[], bool] | None = None) -> int:
        """From a correctness stage that entered alone because it nearly fills the GPU (``shared``): close the
        processes started ahead and still idle but the stage's own (``own``, as given to ``hold_idle``), the latest
        registered first, until ``room()`` says the stage fits (all of them where ``room`` is None); how many. No
        other stage is inside to take them, and one that takes its own later starts its own, a CUDA start on the
        batch's path: with every one closed, 21 pairs' timing stages waited 16.0 s in all for their workers, against
        4.5 s before (h100-2026-12-06-g against -f, two H100 machines), where a context is about 0.5 GiB and what
        level1/30 had lacked (h100-2026-12-06-e and -f) was likely more the other pairs' timing workers still
        exiting (waited for before this)."""
        with self._cond:
            releases = [release for release in self._idle.values() if release is not own]
        closed = 0
        for release in reversed(releases):
            if room is not None and room():
                break
            closed += release()
        return closed

    def nearly_fills(self, need: int) -> bool:
        """A correctness stage expected to need more than ``alone_above`` of ``capacity``: what it leaves beside it
        is less than other pairs and the idle workers started ahead (uncounted, about 0.5 GiB each) take. On the
        80 GB H100 (h100-2026-12-06-e) the two pairs at 0.86 of it ran out of memory beside small pairs and ten idle
        workers in both batches, and ran again alone; those at 0.72 or less, and those above the capacity (alone
        already), never did."""
        return self.capacity is not None and need > self.alone_above * self.capacity

    @contextmanager
    def timing(self, need: int = 0) -> Iterator[Callable[[], AbstractContextManager[int]]]:
        """A performance stage: a shared place as ``shared`` (one such place at a time), yielding ``alone``, whose
        context is the device to itself: it waits for the other shared holders to leave, and no exclusive holder
        gets in between (each waits for this place to be left). A stage expected to need more than ``capacity``
        alone (a problem that fills the GPU) also has the idle workers started ahead closed, as ``exclusive``
        does (on the 80 GB H100 a 6 GiB problem's timing ran out of memory by 0.03 GiB beside twelve:
        h100-2026-12-06-c); ``alone`` yields how many."""
        fills = self.capacity is not None and need > self.capacity
        with self._enter_shared(need, timing=True):
            yield lambda: self._alone(fills)

    def starting(self, started: list[Future]) -> None:
        """Processes started outside any stage (their CUDA starting): the next timing waits for them to be up before it
        has the device alone, so no CUDA start overlaps a pair's timing."""
        with self._cond:
            self._starting = [f for f in self._starting if not f.done()] + list(started)

    @contextmanager
    def _alone(self, release_idle: bool = False) -> Iterator[int]:
        """From a ``timing`` place: the device to itself once every other shared holder has left and every process
        started outside a stage is up (``starting``); with ``release_idle``, every idle worker started ahead closed
        (the count is yielded)."""
        with self._cond:
            starting, self._starting = self._starting, []
        futures.wait(starting)
        with self._cond:
            self._take_device(lambda: self._readers > 1)
            self._readers -= 1
            releases = list(self._idle.values()) if release_idle else []
        try:
            yield sum(release() for release in releases)  # no other holder: none is taking its workers
        finally:
            with self._cond:
                self._readers += 1
                self._give_device()

    @contextmanager
    def _enter_shared(self, need: int, timing: bool) -> Iterator[None]:
        """A shared holder, a correctness stage or (``timing``) a performance stage's place. A correctness stage
        also waits while a place is held or awaited: timing is imminent, and the place's set-up runs while the
        correctness stages already inside drain, not while new ones start."""
        with self._cond:
            held_back = False
            self._places_waiting += timing
            try:
                while True:
                    timing_soon = self._timing or (not timing and self._places_waiting)
                    if not (self._writer or self._writers_waiting or timing_soon):
                        fits = not self._readers or self.capacity is None or self._used + need <= self.capacity
                        # a correctness stage held back for memory is not overtaken by a later one (timing, which
                        # holds them all back, goes first)
                        if fits and (held_back or timing or not self._held_back):
                            break
                        if not fits and not held_back:
                            held_back = True
                            self._held_back += 1
                    self._cond.wait()
            finally:
                self._places_waiting -= timing
            if held_back:
                self._held_back -= 1
            self._readers += 1
            self._used += need
            self._timing = self._timing or timing
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._used -= need
                if timing:
                    self._timing = False
                self._cond.notify_all()

    def hold_idle(self, release: Callable[[], int]) -> Callable[[], None]:
        """Processes started ahead wait idle on this GPU until their stage takes them: ``release()`` closes those
        not yet taken and says how many (their stage, when it comes, starts its own). Returns the callable that
        forgets ``release`` (their owner is done)."""
        with self._cond:
            key = next(self._idle_keys)
            self._idle[key] = release

        def forget() -> None:
            with self._cond:
                self._idle.pop(key, None)
        return forget

    @contextmanager
    def exclusive(self) -> Iterator[int]:
        """The device to itself (a correctness stage run again alone: ``kbv.eval.pair``), once every holder has left;
        a waiting one holds back new shared holders. Every process started ahead and still idle is closed first: the
        count is yielded."""
        with self._cond:
            self._take_device(lambda: self._writer or self._readers > 0)
            releases = list(self._idle.values())
        try:
            yield sum(release() for release in releases)  # no stage holds a place: none is taking its workers
        finally:
            with self._cond:
                self._give_device()

    def _take_device(self, others_inside: Callable[[], bool]) -> None:
        """Under the lock: wait as a waiting writer (new shared holders held back) while ``others_inside()``, then
        hold the device alone."""
        self._writers_waiting += 1
        try:
            while others_inside():
                self._cond.wait()
        finally:
            self._writers_waiting -= 1
        self._writer = True

    def _give_device(self) -> None:
        """Under the lock: the device alone is given back."""
        self._writer = False
        self._cond.notify_all()


@contextmanager
def ungated() -> Iterator[Callable[[], AbstractContextManager[None]]]:
    """A GPU not shared with other pairs: a ``timing`` place that is always the device's alone."""
    yield nullcontext
