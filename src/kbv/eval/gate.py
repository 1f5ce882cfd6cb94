"""Sharing one GPU between pairs: correctness runs may overlap, timing always has the device to itself.

A :class:`DeviceGate` is a readers-writer lock per GPU. Correctness stages enter it shared, performance stages
(timing, the memory measure: device memory in use is counted for the whole device) exclusively; a waiting
performance stage holds back new correctness stages, so timing is never starved. A correctness stage also says how
much device memory it is expected to need (``kbv.eval.pair.correctness_memory``): it joins others only while their
needs and its own fit the gate's ``capacity`` (alone it always enters), so pairs with large tensors no longer run
out of memory beside each other and run their correctness again. With ``EvalOptions.gpu_share`` at 1 (the
default) a GPU runs one pair at a time and the gate never waits.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class DeviceGate:
    def __init__(self, capacity: int | None = None) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._used = 0  # the expected device memory of the correctness stages inside
        self._writer = False
        self._writers_waiting = 0
        self._held_back = 0  # correctness stages waiting for memory: no later one overtakes them
        self.capacity = capacity  # bytes the shared stages' expected needs may add up to (None: no bound)

    @contextmanager
    def shared(self, need: int = 0) -> Iterator[None]:
        """A correctness stage expected to need ``need`` bytes of device memory: alongside other correctness
        stages while their needs fit ``capacity`` (alone, whatever its need), never during timing. One held back
        for memory goes before any that arrives after it (a large pair is not starved by a stream of small ones)."""
        with self._cond:
            held_back = False
            while True:
                if not (self._writer or self._writers_waiting):
                    fits = not self._readers or self.capacity is None or self._used + need <= self.capacity
                    if fits and (held_back or not self._held_back):
                        break
                    if not fits and not held_back:
                        held_back = True
                        self._held_back += 1
                self._cond.wait()
            if held_back:
                self._held_back -= 1
            self._readers += 1
            self._used += need
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._used -= need
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """A performance stage: the device to itself."""
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
