"""Worker side of the sandbox: confining a freshly started candidate worker before any candidate code runs.

Runs first thing in a candidate worker (``kbv.worker.session.main``), after kbv's launcher forked it and it closed
every descriptor but its channel. Steps, in this order (each later one may need the privilege an earlier one keeps):

1. a new **network namespace** (no interfaces but a down loopback): the candidate cannot open connections, and
   the host's abstract unix sockets are out of reach;
2. a new **PID namespace**: the worker forks once more and the inner process, PID 1 of the namespace, serves the
   stage while the outer one waits and passes on its exit status. In a mount namespace of its own the inner process
   mounts a fresh ``/proc`` of that PID namespace (CUDA fails under a PID namespace that still shows the host's
   ``/proc``). When the inner process ends or is killed, the kernel kills everything left in the namespace, so a
   grandchild that calls ``setsid()`` cannot outlive the stage;
3. **mounts** (``hide``, ``_protect``): evaluator-side data (every suite's ``evaluator/`` folder, kbv's cache with
   every build and the reference timings, the folder of all builds, the record key) is covered by empty read-only
   tmpfs mounts with the worker's own folders bound back; where the worker will drop root, folders other users
   cannot pass through (``/root``) are covered too, with the Python installation bound back read-only; the results
   folder, kbv's own package and the Python runtime are read-only bind mounts. Then CAP_SYS_ADMIN, CAP_SYS_PTRACE
   and CAP_DAC_READ_SEARCH are given up and the worker is made non-dumpable;
4. a **user namespace** whose root maps to the unprivileged ``kbv-sandbox`` (created when missing, else
   ``nobody``): a helper forked first writes the maps, the worker becomes that root and gives up every capability,
   so it holds none in the host's user namespace (if user namespaces are refused, it switches to the user directly);
   no core files, a cap on processes;
5. a **seccomp** deny-list (``kbv.worker.seccomp``) with ``no_new_privs``.

Each step needs root. Where a step is not possible the worker carries on with what it has and reports the
isolation it achieved; the parent (``kbv.sandbox.plan``: what to ask for, probed on CUDA) records that in every
result's ``env.isolation`` and warns once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import grp
import os
import pwd
import resource
import signal
from pathlib import Path
from typing import Any

SANDBOX_USER = "kbv-sandbox"
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_SYS_ADMIN = 2, 19, 21
# Given up once the read-only mounts are in place: each one could otherwise undo them or write around them.
HELD_BACK = {"CAP_SYS_ADMIN": CAP_SYS_ADMIN, "CAP_SYS_PTRACE": CAP_SYS_PTRACE,
             "CAP_DAC_READ_SEARCH": CAP_DAC_READ_SEARCH}
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
PR_CAPBSET_DROP = 24
MAX_PROCESSES = 4096  # per sandbox user (RLIMIT_NPROC counts every process of the user)


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    """The C library, looked up once per process (``find_library`` costs about 1.6 ms a call)."""
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _unshare(flags: int) -> bool:
    return _libc().unshare(flags) == 0


def _kept_flags(path: str) -> int:
    """The nosuid/nodev/noexec flags of the mount ``path`` is on: a bind remount keeps them (it would clear them)."""
    try:
        flags = os.statvfs(path).f_flag
    except OSError:
        return 0
    return sum(ms for st, ms in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC))
               if flags & st)


def _bind(libc: ctypes.CDLL, path: str, read_only: bool) -> bool:
    """Bind-mount ``path`` onto itself, read-only or writable (a bind inside a read-only mount starts read-only)."""
    p, flags = os.fsencode(path), _kept_flags(path)
    return (libc.mount(p, p, None, MS_BIND | MS_REC, None) == 0
            and libc.mount(None, p, None, MS_BIND | MS_REMOUNT | flags | (MS_RDONLY if read_only else 0), None) == 0)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _protect(paths: list[str], writable: list[str] = ()) -> tuple[list[str], list[str], list[str]]:
    """In a new mount namespace, make ``paths`` read-only bind mounts and the folders of ``writable`` that lie in
    them writable bind mounts on top; then give up the capabilities that could undo or bypass that (``HELD_BACK``)
    and become non-dumpable: a worker that stays root still cannot write the results folder, kbv's own code or kbv's
    cache outside its own build folder. Returns the read-only paths, the writable holes and what was given up."""
    libc = _libc()
    if libc.unshare(CLONE_NEWNS) != 0:
        return [], [], []
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return [], [], []
    done = [path for path in paths if os.path.exists(path) and _bind(libc, path, read_only=True)]
    real = {path: os.path.realpath(path) for path in done}
    holes: list[str] = []
    for hole in sorted({os.path.realpath(w) for w in writable}, key=len):
        covering = [path for path in done if _within(hole, real[path])]
        if not covering or any(_within(hole, h) for h in holes) or not os.path.isdir(hole):
            continue  # not inside a read-only mount, inside a hole already made, or not there to keep
        if _bind(libc, hole, read_only=False):
            holes.append(hole)
        else:  # never leave a worker without its own folders: undo the read-only mounts above it (loudly)
            for path in covering:
                libc.umount2(os.fsencode(path), MNT_DETACH)
                done.remove(path)
    given_up = [name for name, cap in HELD_BACK.items() if _drop_capability(cap)]
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0:
        given_up.append("dumpable")
    return done, holes, given_up


def cache_layout(spec: dict[str, Any], ids: tuple[int, int] | None = None) -> tuple[list[str], list[str]]:
    """kbv's cache as a candidate worker sees it: the folders to make read-only, and the worker's own folders inside
    them that stay writable. The build folder kbv gives a candidate is ``<cache>/build/<key>`` (or, where the sandbox
    user cannot reach the cache, ``<sandbox build root>/<key>``); read-only: the folder of every build and the one
    above it (the cache itself: reference timings, roofline counts, measured ceilings). Writable: the worker's own
    build folder (``TORCH_EXTENSIONS_DIR``, ``TRITON_CACHE_DIR``), its scratch folder (``TMPDIR``) and its working
    folder. The build folder is created here if missing (the read-only mount would stop the candidate making it)."""
    env = spec.get("env") or {}
    ext = env.get("TORCH_EXTENSIONS_DIR")
    if not ext:
        return [], []
    own = Path(ext).parent
    try:
        if not own.is_dir():
            own.mkdir(parents=True, exist_ok=True)
            if ids:
                os.chown(own, int(ids[0]), int(ids[1]))
    except OSError:
        return [], []  # no build folder to keep writable: leave the cache as it is (recorded: nothing protected)
    protect = [str(p) for p in (own.parents[1], own.parents[0]) if os.path.realpath(p) != "/"]
    triton = env.get("TRITON_CACHE_DIR")
    folders = [own, triton and Path(triton).parent, env.get("TMPDIR"), env.get("HOME"), spec.get("work_dir")]
    return protect, [str(f) for f in folders if f]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capability(cap: int) -> bool:
    """Remove one capability from the bounding, effective, permitted and inheritable sets of this process."""
    libc = _libc()
    libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        return False
    word, bit = divmod(cap, 32)
    for field in ("effective", "permitted", "inheritable"):
        setattr(data[word], field, getattr(data[word], field) & ~(1 << bit))
    return libc.capset(ctypes.byref(header), data) == 0


def _fresh_proc(libc: ctypes.CDLL) -> bool:
    """In a mount namespace of this worker's own (made here unless one exists), mount a ``/proc`` of its PID
    namespace over the host's: CUDA fails under a PID namespace that still sees the host's ``/proc``, and the
    host's would show every process on the machine."""
    if libc.unshare(CLONE_NEWNS) != 0 or libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    return libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0


def _opaque_ancestor(path: str) -> str | None:
    """The highest folder above ``path`` that other users cannot pass through (``/root``, mode 0700), if any."""
    parts = Path(path).parts
    for k in range(2, len(parts) + 1):
        folder = os.path.join(*parts[:k])
        try:
            if os.path.isdir(folder) and not os.stat(folder).st_mode & 0o001:
                return folder
        except OSError:
            return None
    return None


def _cover(libc: ctypes.CDLL, folder: str, keep: list[tuple[str, bool]]) -> bool:
    """Mount an empty, read-only tmpfs on ``folder`` and bind the ``keep`` paths inside it back (read-only or
    writable, as given). What is not kept is out of reach: it no longer exists in this mount namespace."""
    inside = []
    for path, read_only in sorted(keep, key=lambda k: len(k[0])):
        if _within(path, folder) and path != folder and os.path.exists(path):
            try:
                inside.append((path, read_only, os.open(path, os.O_PATH), os.path.isdir(path)))
            except OSError:
                pass
    try:
        if libc.mount(b"tmpfs", os.fsencode(folder), b"tmpfs", MS_NOSUID | MS_NODEV,
                      b"mode=0755,size=4m") != 0:
            return False
        for path, read_only, fd, is_dir in inside:
            if is_dir:
                os.makedirs(path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                if not os.path.exists(path):
                    open(path, "w").close()
            target = os.fsencode(path)
            if libc.mount(os.fsencode(f"/proc/self/fd/{fd}"), target, None, MS_BIND | MS_REC, None) != 0:
                continue
            flags = _kept_flags(path)
            libc.mount(None, target, None, MS_BIND | MS_REMOUNT | flags | (MS_RDONLY if read_only else 0), None)
        libc.mount(None, os.fsencode(folder), None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
        return True
    finally:
        for _, _, fd, _ in inside:
            os.close(fd)


def _hide_file(libc: ctypes.CDLL, path: str) -> bool:
    """Put an empty, read-only file (``/dev/null``) over ``path``."""
    target = os.fsencode(path)
    return (libc.mount(b"/dev/null", target, None, MS_BIND, None) == 0
            and libc.mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None) == 0)


def hide(spec: dict[str, Any], hidden: list[str], keep: list[tuple[str, bool]], opaque: bool) -> list[str]:
    """Make evaluator-side data unreachable: every folder in ``hidden`` (held-out shapes, weights,
    provenance, traces of any suite; kbv's cache with every build and the reference timings) and the folder of all
    builds become empty read-only tmpfs mounts with this worker's own folders bound back; hidden files (the record
    key) read as empty. With ``opaque``, folders other users cannot pass through (``/root``) are covered the same way
    with the Python runtime bound back read-only: a worker that drops root can still import from there. Returns
    what was hidden."""
    libc = _libc()
    wanted = [os.path.realpath(p) for p in hidden]
    own = (spec.get("env") or {}).get("TORCH_EXTENSIONS_DIR")
    if own and hidden:
        wanted.append(os.path.realpath(Path(own).parent.parent))  # the folder of every candidate's build
    if opaque:
        wanted += [a for a in (_opaque_ancestor(path) for path, _ in keep) if a]
    folders = sorted({w for w in wanted if w != "/" and os.path.isdir(w)}, key=len)
    done: list[str] = []
    for folder in folders:
        if any(_within(folder, d) for d in done):
            continue
        if _cover(libc, folder, keep):
            done.append(folder)
    for path in {os.path.realpath(p) for p in wanted if os.path.isfile(p)}:
        if not any(_within(path, d) for d in done) and _hide_file(libc, path):
            done.append(path)
    return done


def _enter_user_namespace(uid: int, gid: int) -> str:
    """Enter a new user namespace in which root maps to ``uid``/``gid`` of the host, then become that root: the
    worker keeps no capability in the host's user namespace. A helper forked first (still privileged) writes the
    maps. Returns "" or why it failed; a namespace entered without its maps ends the process (fail closed)."""
    libc = _libc()
    me = os.readlink("/proc/self")
    ready_r, ready_w = os.pipe()
    helper = os.fork()
    if helper == 0:
        os.close(ready_w)
        code = 1
        try:
            if os.read(ready_r, 1) == b"1":
                for name, line in (("uid_map", f"0 {uid} 1\n"), ("gid_map", f"0 {gid} 1\n")):
                    with open(f"/proc/{me}/{name}", "w") as f:
                        f.write(line)
                code = 0
        except OSError:
            pass
        os._exit(code)
    os.close(ready_r)
    entered = libc.unshare(CLONE_NEWUSER) == 0
    why = "" if entered else os.strerror(ctypes.get_errno())
    os.write(ready_w, b"1" if entered else b"0")
    os.close(ready_w)
    _, status = os.waitpid(helper, 0)
    if not entered:
        return f"unshare(CLONE_NEWUSER): {why}"
    if status != 0:
        os._exit(3)  # inside a user namespace with no mapping: stop here rather than run as the host's root
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    return ""


def _drop_all_capabilities() -> bool:
    """Empty the bounding, effective, permitted, inheritable and ambient sets (capabilities of this user namespace)."""
    libc = _libc()
    try:
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        last = 40
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    return libc.capset(ctypes.byref(header), data) == 0


def runtime_keep(spec: dict[str, Any]) -> list[tuple[str, bool]]:
    """What a confined worker needs to see where it covers folders: the Python runtime and kbv (read-only), and its
    own build, Triton, scratch, home and working folders (writable)."""
    wanted = spec.get("confine") or {}
    env = spec.get("env") or {}
    ro = [*(wanted.get("keep") or []), *(wanted.get("read_only") or [])]
    ext = env.get("TORCH_EXTENSIONS_DIR")
    rw = [ext and str(Path(ext).parent), env.get("TRITON_CACHE_DIR") and str(Path(env["TRITON_CACHE_DIR"]).parent),
          env.get("TMPDIR"), env.get("HOME"), spec.get("work_dir")]
    keep = [(os.path.realpath(p), True) for p in ro if p] + [(os.path.realpath(p), False) for p in rw if p]
    return list(dict.fromkeys(keep))


def confine(spec: dict[str, Any]) -> dict[str, Any]:
    """Apply what ``spec["confine"]`` asks for; returns the isolation achieved. Only the inner process returns
    (the outer one waits for it and exits with its status)."""
    wanted = spec.get("confine") or {}
    achieved: dict[str, Any] = {"network_namespace": False, "pid_namespace": False, "proc_mounted": False,
                                "user": None, "user_namespace": False, "read_only": [], "writable": [], "hidden": [],
                                "cache_read_only": False, "seccomp": False}
    if not wanted:
        return achieved
    if wanted.get("network"):
        achieved["network_namespace"] = _unshare(CLONE_NEWNET)
    if wanted.get("pid") and _unshare(CLONE_NEWPID):
        inner = os.fork()
        if inner:
            _wait_and_exit(inner)
        achieved["pid_namespace"] = True
        achieved["proc_mounted"] = _fresh_proc(_libc())
    ids = wanted.get("ids")
    if wanted.get("read_only") or ids:  # the last steps that need the host's root: mounts, then capabilities
        if not achieved["proc_mounted"]:
            libc = _libc()
            libc.unshare(CLONE_NEWNS)
            libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None)
        hidden = (wanted.get("hide") or []) if wanted.get("read_only") else []
        achieved["hidden"] = hide(spec, hidden, runtime_keep(spec), opaque=bool(ids))
    if wanted.get("read_only"):
        cache, writable = cache_layout(spec, ids)
        achieved["read_only"], achieved["writable"], achieved["given_up"] = _protect(
            [*wanted["read_only"], *cache], writable)
        # kbv's cache is out of reach but for this worker's own folders (False: other builds and timings are not)
        hidden = achieved["hidden"]
        achieved["cache_read_only"] = bool(cache) and all(
            path in achieved["read_only"] or any(_within(os.path.realpath(path), h) for h in hidden) for path in cache)
    if ids:
        uid, gid = int(ids[0]), int(ids[1])
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_NPROC, (MAX_PROCESSES, MAX_PROCESSES))
            why = _enter_user_namespace(uid, gid) if wanted.get("user_namespace", True) else "not asked for"
            if why:
                achieved["user_namespace_error"] = why
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
            else:
                achieved["user_namespace"] = True
            achieved["capabilities_dropped"] = _drop_all_capabilities()
            achieved["user"] = pwd.getpwuid(uid).pw_name
            achieved["group"] = grp.getgrgid(gid).gr_name
        except (OSError, KeyError) as exc:
            achieved["user_error"] = str(exc)
    _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # cleared by the user change: set again
    if wanted.get("seccomp"):
        from kbv.worker import seccomp

        achieved["seccomp"], why = seccomp.install()
        if why:
            achieved["seccomp_note"] = why
    return achieved


def _wait_and_exit(pid: int) -> None:
    """Outer process: relay the inner process's fate. Signals aimed at the outer one reach the inner one first."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: os.kill(pid, s))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(1)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
