"""Parent side of the sandbox: starting worker processes, talking to them under deadlines, killing them.

Workers are forked by kbv's own launcher (``kbv.sandbox.zygote``: a process that has imported torch and kbv's worker
code but never initialised CUDA, controlled over an anonymous socketpair only the parent holds), so a fresh process
per candidate and stage costs milliseconds instead of seconds, and no worker can reach whatever launched it. Each
worker talks to the parent over its own socketpair, starts a new session (its own process group), so a timeout
kills it and everything it started. Replies are decoded with ``kbv.wire``
(no pickle): a worker can send data, never code.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import os
import socket
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable, Protocol

from kbv import wire
from kbv.protocol import (COMMITS_MAX, LOG_TAIL_BYTES, REPLY_BYTES_DEFAULT, REPLY_TRANSFER_GRACE_S, WORKER_EXIT_WAIT_S,
                          ask_spin_s)

LOG_TAIL_CHARS = LOG_TAIL_BYTES


_LIVE: set["Worker"] = set()  # every started, not yet closed worker (for stop_all)
_LIVE_LOCK = threading.Lock()
_STOPPED = threading.Event()
_RETIRED: list["Worker"] = []  # asked to exit and not yet waited for (retire, wait_retired)


def retire(workers: list["Worker"]) -> None:
    """Ask each worker to exit and leave the wait for later (:func:`wait_retired`): a pair's last timing workers
    exit (on a GPU their CUDA context's teardown, about a third of a second) while the next pair's correctness
    runs, instead of on the pair's clock."""
    for worker in workers:
        worker.close(wait=False)
    with _LIVE_LOCK:
        _RETIRED.extend(workers)


def wait_retired() -> int:
    """Wait until every retired worker is gone (killing what does not exit in time); returns how many there were.
    Every timing waits for this before it starts (it has the device to itself), and every run before it returns."""
    with _LIVE_LOCK:
        retired = list(_RETIRED)
        _RETIRED.clear()
    for worker in retired:
        worker.close()
    return len(retired)


def _at_exit() -> None:
    """Nothing kbv started outlives it: the workers still exiting first (their exits are told by the launcher), then
    the launchers."""
    from kbv.sandbox import zygote

    wait_retired()
    zygote.shut_down()


atexit.register(_at_exit)


def stop_all() -> int:
    """Ctrl-C: refuse new workers and kill the process group of every live one; returns how many were live."""
    from kbv.sandbox import zygote

    with _LIVE_LOCK:
        _STOPPED.set()
        live = list(_LIVE)
    for worker in live:
        worker.kill()
    zygote.kill_starting()  # a launcher still importing torch: its waiter would hold the stop for seconds
    return len(live)


def refuse_workers() -> None:
    """Refuse new workers from now on (safe in a signal handler: it kills nothing); :func:`stop_all` kills."""
    _STOPPED.set()


def stopped() -> bool:
    """Whether :func:`stop_all` ran (and no new run has started since)."""
    return _STOPPED.is_set()


def allow_workers() -> None:
    """Undo :func:`stop_all` (a new run starts)."""
    _STOPPED.clear()


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


class Pacing(Protocol):
    """What serves a worker's requests for inputs during one command (``kbv.eval.pacing.Pacer``): the answer to a
    ``need`` frame, the moment it was sent, and each commitment as it arrives."""

    def need(self, request: Any) -> dict[str, Any]: ...

    def sent(self) -> None: ...

    def committed(self, entry: list[Any]) -> None: ...


class WorkerFailure(Exception):
    """A worker that did not answer as asked. ``kind`` is ``timeout``, ``died``, ``error``, ``protocol`` or
    ``interrupted`` (Ctrl-C: kbv refused to start it)."""

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
    problem_sha256: str = ""  # Problem.source_sha256: the worker runs exactly these bytes (checked when set)
    handoff: tuple[str, ...] = ("host",)  # kinds of output descriptors the worker sends or accepts (kbv.wire)
    judge_kernels: bool = False  # reference role: load the judge's fused kernels as it starts (large outputs)

    def as_message(self) -> dict[str, Any]:
        return {
            "role": self.role, "device": self.device, "problem_path": self.problem_path, "profile": self.profile,
            "precision": self.precision, "mode": self.mode, "work_dir": str(self.work_dir),
            "log_path": str(self.log_path), "candidate_path": self.candidate_path, "unscaled": list(self.unscaled),
            "env": dict(self.env or {}), "threads": self.threads, "confine": dict(self.confine or {}),
            "stage": self.stage, "shape": self.shape, "handoff": list(self.handoff),
            "judge_kernels": self.judge_kernels,
        }


def _spec_message(spec: WorkerSpec) -> dict[str, Any]:
    """The spec as sent to the worker, with the problem's source: the bytes the parent hashed (the worker compiles
    these, never the file or a ``__pycache__`` next to it)."""
    try:
        source = Path(spec.problem_path).read_bytes()
    except OSError as exc:
        raise WorkerFailure("error", f"cannot read the problem file: {exc}") from None
    if spec.problem_sha256 and hashlib.sha256(source).hexdigest() != spec.problem_sha256:
        raise WorkerFailure("error", f"the problem file changed since it was read: {spec.problem_path}")
    return {**spec.as_message(), "problem_source": base64.b64encode(source).decode("ascii")}


class _Process:
    """A worker forked by a zygote: its pid, and its exit code as the zygote reports it."""

    def __init__(self, launcher: Any, pid: int):
        self._launcher = launcher
        self.pid: int | None = pid
        self.exitcode: int | None = None
        self._join_lock = threading.Lock()  # two threads may join (Ctrl-C's stop_all and the worker's own thread):
        # the first to see the exit forgets it at the launcher, so the other must wait for it here, not there

    def join(self, timeout: float | None = None) -> None:
        with self._join_lock:
            if self.exitcode is None and self.pid is not None:
                self.exitcode = self._launcher.wait(self.pid, 5.0 if timeout is None else timeout)
                if self.exitcode is not None:
                    self._launcher.forget(self.pid)

    def is_alive(self) -> bool:
        self.join(0)
        return self.exitcode is None and self._launcher.alive

    def kill(self) -> None:
        if self.pid is not None and self.exitcode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` as /proc lists them (the parent reads this itself)."""
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _exited(pid: int) -> bool:
    """Gone, or a zombie: a process's memory (device memory included) is released before it becomes one."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:][:1] in ("Z", "X")


def _wait_exited(pids: list[int], deadline: float) -> None:
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if not _exited(p)]
        if pids:
            time.sleep(0.005)


def _start(spec: WorkerSpec, message: dict[str, Any], deadline: float) -> tuple[Connection, _Process]:
    """Fork a worker from the zygote for this device kind and environment; send it its spec."""
    from kbv.sandbox import plan, zygote

    kind = "cuda" if str(spec.device).startswith("cuda") else "cpu"
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        env = plan.worker_environment()
        if kind == "cpu":  # the launcher imports Triton (through torch._dynamo): in interpreter mode from the start
            env["TRITON_INTERPRET"] = "1"
        launcher = zygote.zygote(kind, env)
        pid = launcher.fork(theirs)
    except zygote.LauncherError as exc:
        ours.close()
        raise WorkerFailure("died", str(exc)) from None
    finally:
        theirs.close()
    conn = Connection(ours.detach())
    try:
        wire.send(conn, message, deadline)
    except (OSError, wire.WireTimeout):
        pass  # a worker that died at once: the hello's wait reports it
    return conn, _Process(launcher, pid)


class Worker:
    """One worker process. Use as a context manager; every call takes a deadline (``time.monotonic()`` based)."""

    def __init__(self, spec: WorkerSpec, deadline: float, on_close: Callable[[float], None] | None = None):
        self.spec = spec
        self._on_close = on_close  # told the seconds close() waited (the record's process_exit part)
        self._exit_asked = False
        self.commits: dict[tuple[int, str, int], list[Any]] = {}  # kept outputs' digests (_note_commit)
        self.tamper: set[str] = set()  # what the worker reported changed in its environment, over all replies
        self.handoffs: dict[str, dict[str, int]] = {}  # outputs received as descriptors, by kind: count and bytes
        self.handoff_failure: str | None = None  # why the worker stopped exporting device outputs (its own word)
        spec.work_dir.mkdir(parents=True, exist_ok=True)
        if _STOPPED.is_set():
            raise WorkerFailure("interrupted", "kbv was interrupted")
        message = _spec_message(spec)
        self._conn, self._proc = _start(spec, message, deadline)
        with _LIVE_LOCK:
            _LIVE.add(self)
            stopped = _STOPPED.is_set()
        if stopped:  # stop_all ran while this one started
            self.close()
            raise WorkerFailure("interrupted", "kbv was interrupted")
        try:
            hello = self._expect(deadline, 0)  # the hello (problem loaded, ready for commands) carries no tensors
        except BaseException:
            self.close()  # no longer live: never killed by pid later
            raise
        self.isolation: dict[str, Any] = hello["isolation"] if isinstance(hello.get("isolation"), dict) else {}
        init = hello.get("cuda_init_s")  # the worker's own clock: a diagnostic of the time breakdown only
        self.cuda_init_s = float(init) if isinstance(init, (int, float)) and init > 0 else 0.0

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def log_tail(self) -> str:
        return read_tail(self.spec.log_path, LOG_TAIL_CHARS)

    def call(self, msg: dict[str, Any], deadline: float, max_bytes: int | None = None,
             pacer: Pacing | None = None, spin: bool = False) -> dict[str, Any]:
        """Send ``msg`` and return the reply; a reply declaring more than ``max_bytes`` tensor bytes (default
        kbv.protocol.REPLY_BYTES_DEFAULT) is refused before it is allocated: a ``protocol`` failure. ``pacer``
        answers the worker's requests for inputs while the command runs (a request without one, or one it refuses,
        is a ``protocol`` failure). ``spin``: a reply due within a timed call's time (the judge's fills) is polled
        for as a timing command's requests are (``ASK_SPIN_S``) before this process sleeps."""
        try:
            wire.send(self._conn, msg, deadline)
        except wire.WireTimeout:  # a worker that stopped reading (stopped, or its reader starved)
            self.kill()
            raise WorkerFailure("timeout", "time limit exceeded (the worker stopped reading)", self.log_tail()) from None
        except (BrokenPipeError, OSError):
            raise self._died() from None
        return self._expect(deadline, max_bytes, pacer, spin)

    def _expect(self, deadline: float, max_bytes: int | None = None, pacer: Pacing | None = None,
                spin: bool = False) -> dict[str, Any]:
        """The reply to the command in flight; the frames a worker may send before it (a kept output's commitment,
        a request for the next call's inputs) are handled on the way."""
        spin_s = ask_spin_s(self.spec.device) if pacer is not None or spin else 0.0
        while True:
            wire.spin(self._conn, spin_s)  # a timing command: its next request comes within a trial's time
            reply = self._frame(deadline, max_bytes)
            if not isinstance(reply, dict) or "ok" in reply:
                break
            if "commit" not in reply and ("need" not in reply or pacer is None):
                break
            if "commit" in reply:
                self._note_commit(reply["commit"])
                if pacer is not None:
                    pacer.committed(reply["commit"])
            if "need" in reply:
                if pacer is None:
                    break
                self._serve(pacer, reply["need"], deadline)
        if not isinstance(reply, dict) or "ok" not in reply:
            self.kill()
            raise WorkerFailure("protocol", "reply is not a status object", self.log_tail())
        return self._reply(reply)

    def _serve(self, pacer: Pacing, request: Any, deadline: float) -> None:
        """Answer a request for a call's inputs (``kbv.eval.pacing``); one out of turn is a protocol failure."""
        try:
            answer = pacer.need(request)
        except Exception as exc:
            self.kill()
            raise WorkerFailure("protocol", f"inputs asked for out of turn: {exc}", self.log_tail()) from None
        try:
            wire.send(self._conn, answer, deadline)
        except wire.WireTimeout:
            self.kill()
            raise WorkerFailure("timeout", "time limit exceeded (the worker stopped reading)", self.log_tail()) from None
        except OSError:
            raise self._died() from None
        pacer.sent()

    def _note_commit(self, entry: Any) -> None:
        """A kept timed output's digest, sent by the worker as its trial ended (``kbv.worker.commit``): kept here,
        outside the candidate's process, by (round, baseline, call index); at most ``COMMITS_MAX`` per worker."""
        ok = (isinstance(entry, list) and len(entry) == 4 and all(isinstance(v, int) for v in (entry[0], entry[2]))
              and isinstance(entry[1], str) and isinstance(entry[3], list))
        if not ok or len(self.commits) >= COMMITS_MAX:
            self.kill()
            raise WorkerFailure("protocol", "malformed or too many kept-output commitments", self.log_tail())
        self.commits.setdefault((entry[0], entry[1], entry[2]), entry[3])  # the first word stands

    def _frame(self, deadline: float, max_bytes: int | None) -> Any:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not self._conn.poll(remaining):
            self.kill()
            raise WorkerFailure("timeout", "time limit exceeded", self.log_tail())
        try:
            return wire.recv(self._conn, REPLY_BYTES_DEFAULT if max_bytes is None else max_bytes,
                             max(deadline, time.monotonic()) + REPLY_TRANSFER_GRACE_S, relay=True)
        except wire.WireTimeout:
            self.kill()
            raise WorkerFailure("timeout", "time limit exceeded (part-way through a reply)", self.log_tail()) from None
        except (EOFError, OSError):
            raise self._died() from None
        except wire.WireError as exc:
            self.kill()
            raise WorkerFailure("protocol", f"malformed reply: {exc}", self.log_tail()) from None

    def _reply(self, reply: dict[str, Any]) -> dict[str, Any]:
        for handle in wire.handles_in(reply):
            if handle.kind.startswith("lent-"):  # inputs a reference's worker lends (kbv.worker.lending), not outputs
                if self.spec.role != "reference":  # a reference worker would map it live, not as a snapshot
                    self.kill()
                    raise WorkerFailure("protocol", "a candidate's reply held a lent buffer", self.log_tail())
                continue
            seen = self.handoffs.setdefault(handle.kind, {"outputs": 0, "bytes": 0})
            seen["outputs"] += 1
            seen["bytes"] += handle.nbytes
        if reply.get("tamper"):
            self.tamper.update(str(t) for t in reply["tamper"])
        if reply.get("handoff_failure") and self.handoff_failure is None:
            self.handoff_failure = str(reply["handoff_failure"])[:400]
        if not reply["ok"]:
            self._proc.join(5)
            self.kill()
            err: dict[str, Any] = reply["error"] if isinstance(reply.get("error"), dict) else {}
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
        """Kill the worker's process group and wait until every process of it has exited, the inner one of a PID
        namespace too (the launcher reports only the outer one): a dead worker's device memory is released
        before the next worker measures the device's memory in use."""
        pid = self._proc.pid
        inner = _children(pid) if pid is not None else []
        for target in ([pid] if pid is not None else []) + inner:  # the inner one even if it left the group
            try:
                (os.killpg if target == pid else os.kill)(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join(5)
        _wait_exited(inner, time.monotonic() + WORKER_EXIT_WAIT_S)

    def close(self, wait: bool = True) -> None:
        """Ask the worker to exit, then (``wait``) wait until every process of it is gone and kill what is left.
        ``close(wait=False)`` only asks: the worker exits while the parent goes on, and a later ``close()`` waits
        (until then it stays among the workers Ctrl-C stops)."""
        t0 = time.monotonic()
        if not self._exit_asked and self._proc.is_alive():
            self._exit_asked = True
            try:
                wire.send(self._conn, {"cmd": "exit"})
            except OSError:
                pass
        if not wait:
            return
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if self._exit_asked:
            self._proc.join(2)
        self.kill()
        self._conn.close()
        on_close, self._on_close = self._on_close, None  # once: close() may run again
        if on_close is not None:
            on_close(time.monotonic() - t0)
