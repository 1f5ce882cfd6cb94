"""Parent side of kbv's worker launcher: starting zygotes (``kbv.worker.zygote``), asking them for workers, and
learning the workers' exit statuses.

A zygote is controlled over an anonymous socketpair only the parent holds: there is no address a worker could find
and connect to. One zygote serves each (device kind, environment); it is started from a thread that lives as long
as the parent (``PR_SET_PDEATHSIG`` is tied to the thread that started a process), with the environment
``kbv.sandbox.plan.worker_environment`` allows, and is replaced if it dies.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from typing import Any

from kbv import proc

ZYGOTE_START_TIMEOUT_S = 120.0  # importing torch on a cold, busy machine


class LauncherError(Exception):
    """The launcher could not start a worker."""


class _Starter:
    """One long-lived thread that starts every zygote, so their parent-death signal fires only with the process."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[Future, list[str], dict[str, str], int]] = queue.Queue()
        threading.Thread(target=self._run, name="kbv-zygote-starter", daemon=True).start()

    def _run(self) -> None:
        while True:
            future, argv, env, fd = self._jobs.get()
            try:  # its own session: a Ctrl-C at the terminal never reaches it (the parent stops what it must)
                future.set_result(subprocess.Popen(argv, env=env, pass_fds=(fd,), stdin=subprocess.DEVNULL,
                                                   stdout=subprocess.DEVNULL, close_fds=True,
                                                   start_new_session=True))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                future.set_exception(exc)

    def start(self, argv: list[str], env: dict[str, str], fd: int) -> subprocess.Popen:
        future: Future = Future()
        self._jobs.put((future, argv, env, fd))
        return future.result(timeout=60)


_STARTER: _Starter | None = None
_LOCK = threading.Lock()
_ZYGOTES: dict[tuple[Any, ...], "Zygote"] = {}
_STARTING: set[subprocess.Popen] = set()  # zygotes not ready yet (each importing torch: seconds)


def kill_starting() -> None:
    """Ctrl-C: kill the zygotes still starting, so no thread waits seconds for one to be ready (their starters get
    ``LauncherError``); those already serving stay for the next run."""
    with _LOCK:
        starting = list(_STARTING)
    for process in starting:
        try:
            process.kill()
        except OSError:
            pass


def shut_down(timeout: float = 5.0) -> int:
    """Close every zygote's control socket (a zygote exits at its end of file) and wait until each has exited,
    killing one that has not within ``timeout``: at exit, so no launcher outlives kbv (its parent-death signal
    alone would kill it only after kbv is gone). Returns how many there were."""
    with _LOCK:
        zygotes = list(_ZYGOTES.values())
        _ZYGOTES.clear()
    for each in zygotes:
        each.close()
    for each in zygotes:
        try:
            each.process.wait(timeout)
        except subprocess.TimeoutExpired:
            each.process.kill()
            each.process.wait()
    return len(zygotes)


class Zygote:
    """One zygote process and the parent's end of its control socket."""

    def __init__(self, env: dict[str, str]):
        global _STARTER
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        parent_end.set_inheritable(False)
        args = {"fd": child_end.fileno(), "parent": os.getpid(), "sys_path": list(sys.path)}
        with _LOCK:
            if _STARTER is None:
                _STARTER = _Starter()
            starter = _STARTER
        try:
            self.process = starter.start([sys.executable, "-m", "kbv.worker.zygote", json.dumps(args)],
                                         proc.kbv_env(env),
                                         child_end.fileno())
        finally:
            child_end.close()
        with _LOCK:
            _STARTING.add(self.process)
        self._control = parent_end
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self.exits: dict[int, int] = {}
        self._next = 0
        self.alive = True
        self.pid: int | None = None
        parent_end.settimeout(ZYGOTE_START_TIMEOUT_S)
        try:
            ready = json.loads(parent_end.recv(4096) or b"{}")
        except (OSError, ValueError):
            ready = {}
        finally:
            with _LOCK:
                _STARTING.discard(self.process)
        if "ready" not in ready:
            self.process.kill()
            self.process.wait()
            parent_end.close()
            raise LauncherError("kbv's worker launcher did not start (it imports torch and kbv.worker.session)")
        self.pid = int(ready["ready"])
        parent_end.settimeout(None)
        threading.Thread(target=self._read, name="kbv-zygote-reader", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self._control.recv(4096)
            except OSError:
                data = b""
            if not data:
                break
            try:
                msg = json.loads(data)
                exited = (int(msg["exited"]), int(msg["code"])) if "exited" in msg else None
                ident = None if exited else int(msg["id"])
            except (ValueError, KeyError, TypeError):
                continue  # only the zygote writes here; a malformed message is dropped, never fatal
            with self._cond:
                if exited:
                    self.exits[exited[0]] = exited[1]
                elif ident is not None:
                    self._replies[ident] = msg
                self._cond.notify_all()
        with self._cond:
            self.alive = False
            self._cond.notify_all()
        self.process.wait()

    def fork(self, channel: socket.socket, timeout: float = 30.0) -> int:
        """A new worker serving ``channel`` (its end of a socketpair): its pid."""
        with self._send_lock:
            self._next += 1
            ident = self._next
            try:
                socket.send_fds(self._control, [json.dumps({"id": ident}).encode()], [channel.fileno()])
            except OSError as exc:
                self.alive = False
                raise LauncherError(f"kbv's worker launcher is gone ({exc})") from None
        end = time.monotonic() + timeout
        with self._cond:
            while ident not in self._replies:
                left = end - time.monotonic()
                if not self.alive or left <= 0:
                    raise LauncherError("kbv's worker launcher did not answer")
                self._cond.wait(left)
            reply = self._replies.pop(ident)
        if "pid" not in reply:
            raise LauncherError(str(reply.get("error", "no pid")))
        return int(reply["pid"])

    def wait(self, pid: int, timeout: float) -> int | None:
        """The exit code of worker ``pid`` (negative: killed by that signal), waiting up to ``timeout``; None if it
        has not ended (or the launcher died)."""
        end = time.monotonic() + timeout
        with self._cond:
            while pid not in self.exits:
                left = end - time.monotonic()
                if left <= 0 or not self.alive:
                    return None
                self._cond.wait(left)
            return self.exits[pid]

    def forget(self, pid: int) -> None:
        with self._cond:
            self.exits.pop(pid, None)

    def close(self) -> None:
        """Close the control socket: shut down first, so the zygote sees its end of file at once (a close alone
        waits for the reader thread's pending receive)."""
        try:
            self._control.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._control.close()
        except OSError:
            pass


def zygote(device_kind: str, env: dict[str, str]) -> Zygote:
    """The zygote for workers of this device kind and environment, started (or restarted) as needed."""
    key = (device_kind, tuple(sorted(env.items())))
    with _LOCK:
        current = _ZYGOTES.get(key)
        if current is not None and current.alive:
            return current
    fresh = Zygote(env)
    with _LOCK:
        current = _ZYGOTES.get(key)
        if current is not None and current.alive:
            fresh.close()
            return current
        _ZYGOTES[key] = fresh
        return fresh


def shutdown() -> None:
    """Close every zygote's control socket (each exits at EOF); for tests and interpreter exit."""
    with _LOCK:
        zygotes = list(_ZYGOTES.values())
        _ZYGOTES.clear()
    for z in zygotes:
        z.close()
