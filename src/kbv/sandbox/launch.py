"""Parent side of the sandbox: starting worker processes, talking to them under deadlines, killing them.

Workers are forked from a fork server that has imported torch (and kbv's worker code) but never initialised CUDA,
so a fresh process per candidate and stage costs milliseconds instead of seconds. Each worker starts a new session
(its own process group), so a timeout kills it and everything it started. Replies are decoded with ``kbv.wire``
(no pickle): a worker can send data, never code.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.spawn
import os
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from kbv import wire
from kbv.protocol import LOG_TAIL_BYTES, REPLY_BYTES_DEFAULT, REPLY_TRANSFER_GRACE_S

_CONTEXT: BaseContext | None = None
_CONTEXT_LOCK = threading.Lock()
LOG_TAIL_CHARS = LOG_TAIL_BYTES


_STARTING = threading.local()
_original_preparation_data = multiprocessing.spawn.get_preparation_data


def _preparation_data(name: str) -> dict[str, Any]:
    """multiprocessing re-imports the parent's ``__main__`` in every child; kbv's workers need only their
    (importable) entry point, so for them the main module is left out: no re-run of a user's script, no
    ``if __name__ == '__main__'`` guard required of library users."""
    data = _original_preparation_data(name)
    if getattr(_STARTING, "worker", False):
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
    return data


def context() -> BaseContext:
    global _CONTEXT
    with _CONTEXT_LOCK:
        if _CONTEXT is None:
            multiprocessing.spawn.get_preparation_data = _preparation_data
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["kbv.worker.session"])
            _CONTEXT = ctx
        return _CONTEXT


def read_tail(path: Path, nbytes: int) -> str:
    """The last ``nbytes`` of a file, read from its end (a worker's log may be huge or sparse), as text."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return ""
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, nbytes, max(0, size - nbytes))
    except OSError:
        return ""
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace")


class WorkerFailure(Exception):
    """A worker that did not answer as asked. ``kind`` is ``timeout``, ``died``, ``error`` or ``protocol``."""

    def __init__(self, kind: str, message: str, log_tail: str = "", detail: dict[str, Any] | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.log_tail = log_tail
        self.detail = detail or {}


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


@dataclass
class WorkerSpec:
    role: str  # "reference" or "candidate"
    device: str  # "cpu" or "cuda" (inside the worker: cuda:0 of its CUDA_VISIBLE_DEVICES)
    problem_path: str
    profile: str | None
    precision: str
    mode: str
    work_dir: Path
    log_path: Path
    candidate_path: str | None = None
    unscaled: tuple[int, ...] = ()
    env: dict[str, str] | None = None
    threads: int | None = None
    confine: dict[str, Any] | None = None  # what kbv.sandbox.confine should apply in the worker
    stage: str = ""  # compile, correctness or performance
    shape: dict[str, Any] | None = None  # one shape's module-constant overrides (multi-shape problems)

    def as_message(self) -> dict[str, Any]:
        return {
            "role": self.role, "device": self.device, "problem_path": self.problem_path, "profile": self.profile,
            "precision": self.precision, "mode": self.mode, "work_dir": str(self.work_dir),
            "log_path": str(self.log_path), "candidate_path": self.candidate_path, "unscaled": list(self.unscaled),
            "env": dict(self.env or {}), "threads": self.threads, "confine": dict(self.confine or {}),
            "stage": self.stage, "shape": self.shape,
        }


class Worker:
    """One worker process. Use as a context manager; every call takes a deadline (``time.monotonic()`` based)."""

    def __init__(self, spec: WorkerSpec, deadline: float):
        from kbv.worker import session as child  # imported by the fork server too; the parent only needs its entry point

        self.spec = spec
        self.tamper: set[str] = set()  # what the worker reported changed in its environment, over all replies
        spec.work_dir.mkdir(parents=True, exist_ok=True)
        ctx = context()
        self._conn, child_conn = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(target=child.main, args=(child_conn, spec.as_message()), daemon=True)
        _STARTING.worker = True
        try:
            self._proc.start()
        finally:
            _STARTING.worker = False
        child_conn.close()
        hello = self._expect(deadline)  # the hello: problem loaded, ready for commands
        self.isolation: dict[str, Any] = hello.get("isolation") if isinstance(hello.get("isolation"), dict) else {}

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def log_tail(self) -> str:
        return read_tail(self.spec.log_path, LOG_TAIL_CHARS)

    def call(self, msg: dict[str, Any], deadline: float, max_bytes: int | None = None) -> dict[str, Any]:
        """Send ``msg`` and return the reply; a reply declaring more than ``max_bytes`` tensor bytes (default
        kbv.protocol.REPLY_BYTES_DEFAULT) is refused before it is allocated: a ``protocol`` failure."""
        try:
            wire.send(self._conn, msg)
        except (BrokenPipeError, OSError):
            raise self._died() from None
        return self._expect(deadline, max_bytes)

    def _expect(self, deadline: float, max_bytes: int | None = None) -> dict[str, Any]:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not self._conn.poll(remaining):
            self.kill()
            raise WorkerFailure("timeout", "time limit exceeded", self.log_tail())
        try:
            reply = wire.recv(self._conn, REPLY_BYTES_DEFAULT if max_bytes is None else max_bytes,
                              max(deadline, time.monotonic()) + REPLY_TRANSFER_GRACE_S)
        except wire.WireTimeout:
            self.kill()
            raise WorkerFailure("timeout", "time limit exceeded (part-way through a reply)", self.log_tail()) from None
        except (EOFError, OSError):
            raise self._died() from None
        except wire.WireError as exc:
            self.kill()
            raise WorkerFailure("protocol", f"malformed reply: {exc}", self.log_tail()) from None
        if not isinstance(reply, dict) or "ok" not in reply:
            self.kill()
            raise WorkerFailure("protocol", "reply is not a status object", self.log_tail())
        if reply.get("tamper"):
            self.tamper.update(str(t) for t in reply["tamper"])
        if not reply["ok"]:
            self._proc.join(5)
            self.kill()
            err = reply.get("error") if isinstance(reply.get("error"), dict) else {}
            message = f"{err.get('type', 'Error')}: {err.get('message', '')}"
            raise WorkerFailure("error", message, self.log_tail(), detail=err)
        return reply

    def _died(self) -> WorkerFailure:
        self._proc.join(5)
        code = self._proc.exitcode
        if code is None:
            self.kill()
            return WorkerFailure("died", "worker closed its channel", self.log_tail())
        how = f"killed by {_signal_name(-code)}" if code < 0 else f"exited with status {code}"
        self.kill()
        return WorkerFailure("died", f"worker process {how}", self.log_tail(), {"exitcode": code})

    def kill(self) -> None:
        pid = self._proc.pid
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join(5)

    def close(self) -> None:
        if self._proc.is_alive():
            try:
                wire.send(self._conn, {"cmd": "exit"})
            except OSError:
                pass
            self._proc.join(2)
        self.kill()
        self._conn.close()
