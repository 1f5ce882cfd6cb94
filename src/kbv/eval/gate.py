"""Sharing one GPU between pairs: correctness runs may overlap, timing always has the device to itself.

A :class:`DeviceGate` is a readers-writer lock per GPU. Correctness stages enter it shared, performance stages
(timing, the memory measure: device memory in use is counted for the whole device) exclusively; a waiting
performance stage holds back new correctness stages, so timing is never starved. With ``EvalOptions.gpu_share``
at 1 (the default) a GPU runs one pair at a time and the gate never waits.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class DeviceGate:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        """A correctness stage: alongside other correctness stages, never during timing."""
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
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
