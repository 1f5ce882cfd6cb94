"""kbv's worker launcher (the *zygote*): a process that has imported torch and kbv's worker code but never
initialised CUDA, and forks one worker per request of the parent (``python -m kbv.worker.zygote ARGS_JSON``).

The parent starts it with one end of an anonymous ``AF_UNIX``/``SOCK_SEQPACKET`` socketpair (its *control* socket)
and keeps the other; no filesystem or abstract address exists anywhere, so nothing but the parent can ask it for a
process. For each worker the parent passes the worker's end of a fresh socketpair (``socket.send_fds``); the zygote
forks, reports the child's pid, and later its exit status. The child first closes every descriptor but its own
channel (the control socket included), then runs ``kbv.worker.session.main``, which reads its spec from the channel,
confines itself (``kbv.worker.confine``) and serves. The zygote dies with the parent (``PR_SET_PDEATHSIG``, and at
EOF on its control socket).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import select
import signal
import socket
import sys

PR_SET_PDEATHSIG = 1
CHANNEL_FD = 3  # a worker's channel to the parent, after the descriptors above 2 are closed


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when the process that started it ends (and exit now if it already has)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(0)


def close_all_but(fd: int) -> int:
    """Close every descriptor of this process except ``fd``, which becomes descriptor 3; 0-2 end on /dev/null
    (the session points 1 and 2 at its log). Returns 3."""
    if fd != CHANNEL_FD:
        os.dup2(fd, CHANNEL_FD)
        os.close(fd)
    os.set_inheritable(CHANNEL_FD, False)
    null = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        if null != std:
            os.dup2(null, std)
    os.closerange(CHANNEL_FD + 1, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 65536)
    return CHANNEL_FD


def _child(channel: int) -> None:
    """In the forked worker: nothing of the zygote stays open, then the session takes over (it never returns)."""
    try:
        fd = close_all_but(channel)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        from multiprocessing.connection import Connection

        from kbv.worker import session

        session.main(Connection(fd))
    finally:
        os._exit(1)


def _send(control: socket.socket, obj: dict) -> None:
    try:
        control.send(json.dumps(obj).encode())
    except OSError:
        os._exit(0)  # the parent is gone


def serve(control: socket.socket) -> None:
    """Fork a worker per request until the parent closes the control socket; report pids and exit statuses."""
    sig_r, sig_w = os.pipe()
    os.set_blocking(sig_r, False)
    os.set_blocking(sig_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.set_wakeup_fd(sig_w)
    _send(control, {"ready": os.getpid()})
    while True:
        try:
            ready, _, _ = select.select([control, sig_r], [], [])
        except InterruptedError:
            continue
        if sig_r in ready:
            try:
                os.read(sig_r, 4096)
            except BlockingIOError:
                pass
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                _send(control, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})
        if control in ready:
            try:
                msg, fds, _, _ = socket.recv_fds(control, 4096, 2)
            except OSError:
                os._exit(0)
            if not msg:
                os._exit(0)  # EOF: the parent closed its end (or died)
            request = json.loads(msg)
            if len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                _send(control, {"id": request.get("id"), "error": f"expected one descriptor, got {len(fds)}"})
                continue
            pid = os.fork()
            if pid == 0:
                os.close(sig_r)
                os.close(sig_w)
                control.close()
                _child(fds[0])
            os.close(fds[0])
            _send(control, {"id": request.get("id"), "pid": pid})


def main() -> None:
    # The launcher runs in a session of its own (kbv.sandbox.zygote), so the terminal's Ctrl-C does not reach it; a
    # SIGINT that does (sent to its group) during the imports below (seconds: torch) ends it at once, without their
    # traceback (the parent sees a launcher that did not start); once serving, the parent kills what it must
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(128 + signum))
    args = json.loads(sys.argv[1])
    _die_with_parent(int(args["parent"]))
    sys.path[:] = [p for p in args.get("sys_path", sys.path) if p]
    sys.dont_write_bytecode = True
    control = socket.socket(fileno=int(args["fd"]))
    import kbv.worker.session  # noqa: F401  (torch and kbv's worker code, imported once here; CUDA untouched)

    serve(control)


if __name__ == "__main__":
    main()
