"""Where a worker's process tree spends its user-space CPU time, sampled by the trusted parent from outside with
Linux ``perf_event_open`` (through ``ctypes``): a candidate controls its whole worker process, so a profiler inside
it could be detected or blinded, while these events belong to the parent and live in the kernel.

How (each point checked by experiment on Linux 6.18, x86_64, as root and as an unprivileged user with
``perf_event_paranoid=2``):

- One software ``task-clock`` event per thread of the tree and per CPU (``pid=tid, cpu=c``), sampling the
  instruction pointer and pid/tid every ``1/hz`` seconds of the thread's own CPU time, user space only
  (``exclude_kernel``, which ``perf_event_paranoid=2`` requires of an unprivileged parent anyway).
- ``inherit=1``: threads and processes the tree creates later get copies of the events, and the kernel writes
  their samples into the ring buffer of the event they were copied from. The kernel refuses to ``mmap`` an
  inherited per-task event opened on any CPU (``cpu=-1``: EINVAL), hence one event per CPU: the first event of
  each CPU owns a ring buffer and every later one on that CPU is redirected into it
  (``PERF_EVENT_IOC_SET_OUTPUT``, which the kernel allows across tasks only for per-CPU events). A CPU runs one
  thread at a time, so a buffer fills at no more than ``hz`` samples a second: 64 pages hold about 2.7 s at
  4 kHz. A buffer keeps receiving samples after the thread whose event owns it has exited.
- ``task=1`` adds a fork record for every thread or process created under an event: :meth:`Sampler.drain` opens
  events only on threads of the tree that neither it nor a fork record accounts for (created during
  :meth:`Sampler.start`). ``comm_exec=1`` marks processes that called exec.
- A full buffer drops samples; the kernel writes a lost record with the next sample it can store, so ``lost``
  counts only drops followed by a drain while the tree still ran, and ``overflowed`` says a buffer was found full.
- The ring is read lock-free: ``data_head`` (offset 1024 of the metadata page), the records, then ``data_tail``
  written back. x86-64 keeps loads in order with loads and stores in order after loads, which is the barrier this
  protocol needs; that, and syscall number 298, is why :func:`available` accepts only x86_64.

Samples are attributed to the objects mapped in ``/proc/<pid>/maps`` of each sampled process, read at
:meth:`Sampler.stop` before the events are closed; for a process that has exited by then, the maps a drain read
while it lived, or else (forked while sampled, no exec) those of the process it was forked from.
:meth:`Profile.classes` groups the objects into the candidate's own code, torch, numpy, Python, the system runtime,
anonymous (JIT) code and anything else. Time in the kernel is not sampled.

Nothing here raises into the parent after construction: failures become ``Sampler.error`` and an empty or partial
:class:`Profile`; processes and threads that exit mid-way are normal.
"""

from __future__ import annotations

import bisect
import ctypes
import fcntl
import functools
import importlib.util
import mmap
import os
import re
import resource
import struct
import sys
import sysconfig
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

# perf_event_open(2), x86_64
_NR_PERF_EVENT_OPEN = 298
_PERF_TYPE_SOFTWARE = 1
_PERF_COUNT_SW_TASK_CLOCK = 1
_PERF_SAMPLE_IP_TID = (1 << 0) | (1 << 1)
# inherit, exclude_kernel, exclude_hv, comm, task, comm_exec
_ATTR_FLAGS = (1 << 1) | (1 << 5) | (1 << 6) | (1 << 9) | (1 << 13) | (1 << 24)
_ATTR_SIZE = 128  # PERF_ATTR_SIZE_VER7
_PERF_FLAG_FD_CLOEXEC = 1 << 3
_IOC_SET_OUTPUT = 0x2405  # _IO('$', 5)
_MIN_PERIOD_NS = 10_000  # the kernel's floor for software clock events

_RECORD_LOST, _RECORD_COMM, _RECORD_THROTTLE, _RECORD_FORK, _RECORD_SAMPLE = 2, 3, 5, 7, 9
_MISC_COMM_EXEC = 1 << 13
_MAX_RECORD = 64  # larger than any record these events write: a buffer with less room left is full
_HEADER = struct.Struct("<IHH")  # type, misc, size
_SAMPLE = struct.Struct("<IHHQII")  # header, ip, pid, tid
_FORK = struct.Struct("<IHHIIII")  # header, pid, ppid, tid, ptid (then time)
_LOST = struct.Struct("<IHHQQ")  # header, id, lost
_COMM = struct.Struct("<IHHII")  # header, pid, tid (then the name)
_U64 = struct.Struct("<Q")
_DATA_HEAD, _DATA_TAIL, _DATA_OFFSET, _DATA_SIZE = 1024, 1032, 1040, 1048

MAX_EVENTS = 4096  # events one sampler may hold (one per thread and CPU)
FREE_DESCRIPTORS = 512  # descriptors the parent keeps free for its own work (workers' sockets, logs, handoffs)
_MAX_PROCESSES = 4096  # bounds on a tree walk
_MAX_THREADS = 65536
_REFRESH_ROUNDS = 4  # tree walks at start, until no thread is left without events

CLASSES = ("own", "torch", "numpy", "python", "runtime", "anon", "other")


def available() -> tuple[bool, str]:
    """Whether sampling works here (x86_64 Linux, perf_event_open permitted), and the reason when it does not."""
    machine = os.uname().machine if hasattr(os, "uname") else ""
    if not sys.platform.startswith("linux") or machine != "x86_64":
        return False, f"needs Linux on x86_64, not {sys.platform} on {machine or 'unknown'}"
    try:
        cpu = min(os.sched_getaffinity(0))
        fd = _perf_open(_attr(4000), 0, cpu)
    except OSError as e:
        return False, f"perf_event_open: {e}{_paranoid_hint()}"
    try:
        ring = _Ring(fd, 1)
        ring.close()
    except (OSError, ValueError) as e:
        return False, f"mmap of a perf ring buffer: {e}"
    finally:
        os.close(fd)
    return True, ""


@dataclass(frozen=True)
class Profile:
    """Samples of a tree's user-space instruction pointers, counted by the mapped object they fell in: a file's
    path as ``/proc/<pid>/maps`` shows it (`` (deleted)`` kept), ``[anon]`` (anonymous memory), ``[vdso]`` and
    other bracketed names, or ``[unknown]`` (no mapping, or the process's maps could not be read)."""

    samples: int = 0
    lost: int = 0  # samples the kernel dropped for want of buffer space (and reported while sampling)
    by_object: dict[str, int] = field(default_factory=dict)
    overflowed: bool = False  # a buffer was found full: samples may have been dropped, reported or not
    throttled: int = 0  # times the kernel throttled an event for sampling too often
    error: str | None = None  # the sampler's error, when it had one

    def classes(self, own_roots: Sequence[str] = ()) -> dict[str, int]:
        """Samples per class (:data:`CLASSES`) of the objects, ``own_roots`` being the candidate's folders."""
        roots = _roots(own_roots)
        out: dict[str, int] = {}
        for obj, n in self.by_object.items():
            cls = classify(obj, roots)
            out[cls] = out.get(cls, 0) + n
        return out

    def share(self, cls: str, own_roots: Sequence[str] = ()) -> float | None:
        """The fraction of the samples in class ``cls``, or None when there are none."""
        counts = self.classes(own_roots)
        total = sum(counts.values())
        return counts.get(cls, 0) / total if total else None


class Sampler:
    """Samples the instruction pointer of every thread of a process tree at ``hz`` (a software clock event,
    user space only), from outside the processes.

    ``pages``: data pages per ring buffer (a power of two). ``cpus``: the CPUs to watch (default: every online
    one); a thread's samples on any other CPU are not seen. It costs one descriptor per thread and CPU and one
    buffer of ``1 + pages`` pages per CPU. ValueError for an ``hz`` or ``pages`` out of range; nothing else
    raises. As a context manager: :meth:`start` on entry, :meth:`stop` on exit (its result in ``profile``)."""

    def __init__(self, pid: int, hz: int = 4000, pages: int = 64, cpus: Iterable[int] | None = None) -> None:
        if not 1 <= hz <= 1_000_000_000 // _MIN_PERIOD_NS:
            raise ValueError(f"hz must be in 1..{1_000_000_000 // _MIN_PERIOD_NS}, not {hz}")
        if pages < 1 or pages & (pages - 1):
            raise ValueError(f"pages must be a power of two, not {pages}")
        self.pid = pid
        self.hz = hz
        self.pages = pages
        self.cpus = sorted(set(cpus)) if cpus is not None else _online_cpus()
        self.error: str | None = None
        self.profile: Profile | None = None  # what stop() returned (the context manager's result)
        self._attr = _attr(hz)
        self._fds: list[int] = []
        self._rings: dict[int, _Ring] = {}  # cpu -> the buffer every event on that CPU writes into
        self._covered: set[int] = set()  # threads with events (opened or inherited: fork records) or gone
        self._opened: set[int] = set()  # threads this sampler opened events on
        self._counts: dict[tuple[int, int], int] = {}  # (pid, ip) -> samples
        self._maps: dict[int, _Maps] = {}  # pid -> its mappings when first sampled
        self._lost = 0
        self._throttled = 0
        self._overflowed = False  # a buffer was found full: samples may have been dropped
        self._full = False  # ... at the last read
        self._pids: set[int] = set()  # processes sampled
        self._forked_from: dict[int, int] = {}  # process -> the process it was forked from (fork records)
        self._execed: set[int] = set()  # processes that called exec while sampled (comm records)
        self._started = False
        self._stopped = False

    # -- public -----------------------------------------------------------------------------------------------

    def start(self) -> bool:
        """Open events on every existing thread of the tree. False (and ``error`` set) when it could not; then
        nothing stays open."""
        if self._started:
            return self.error is None
        self._started = True
        ok, why = available()
        if not ok:
            self.error = why
            return False
        if not self.cpus:
            self.error = "no CPUs to watch"
            return False
        try:
            if not _tasks(self.pid):
                self.error = f"no such process: {self.pid}"
                return False
            for _ in range(_REFRESH_ROUNDS):
                self._read_rings()
                if not self._open_uncovered():
                    break
        except Exception as e:  # an unexpected failure must not reach the parent
            self.error = _describe(e)
        if self.error is None and self.pid not in self._opened:
            self.error = f"process {self.pid} exited before it could be sampled"
        if self.error is not None:
            self._close()
            return False
        return True

    def drain(self) -> None:
        """Read the ring buffers now (call between commands so they never overflow), and open events on threads
        of the tree that have none (not inherited: created during :meth:`start`)."""
        if not self._started or self._stopped or not self._rings:
            return
        try:
            self._read_rings()
            self._open_uncovered()
            for pid in (self._pids | self._forked_from.keys()) - self._maps.keys():
                maps = _Maps.read(pid)  # kept for a process that exits before stop()
                if maps is not None:
                    self._maps[pid] = maps
        except Exception as e:
            self.error = self.error or _describe(e)

    def stop(self) -> Profile:
        """Drain, read the maps of every sampled process, close every event and buffer, and attribute the
        samples. Safe to call again (returns the same profile) and after a failed start."""
        if self.profile is not None:
            return self.profile
        by_object: dict[str, int] = {}
        try:
            self.drain()
            if self._full and self._rings:  # the kernel reports what it dropped with the next sample it writes
                time.sleep(min(0.05, 4 / self.hz))
                self.drain()
            by_object = self._attribute()
        except Exception as e:
            self.error = self.error or _describe(e)
        finally:
            self._close()
            self._stopped = True
        self.profile = Profile(samples=sum(by_object.values()), lost=self._lost, by_object=by_object,
                               overflowed=self._overflowed, throttled=self._throttled, error=self.error)
        return self.profile

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __del__(self) -> None:
        try:
            self._close()
        except Exception:
            pass

    # -- events -----------------------------------------------------------------------------------------------

    def _open_uncovered(self) -> int:
        """Open events on the tree's threads that have none; how many threads got them. Raises OSError on a
        failure other than a thread having exited."""
        opened = 0
        for tid in _tree_threads(self.pid):
            if tid in self._covered:
                continue
            if self._open_thread(tid):
                self._opened.add(tid)
                opened += 1
            self._covered.add(tid)
        return opened

    def _open_thread(self, tid: int) -> bool:
        """One event per watched CPU on thread ``tid``; False when the thread has exited. OSError when that would
        pass ``MAX_EVENTS`` or leave the parent fewer than ``FREE_DESCRIPTORS`` descriptors for its own work."""
        if len(self._fds) + len(self.cpus) > MAX_EVENTS or not _descriptors_left(len(self.cpus)):
            raise OSError(f"not sampled: {len(self._fds) + len(self.cpus)} events (threads x CPUs) would pass "
                          f"{MAX_EVENTS}, or leave the parent fewer than {FREE_DESCRIPTORS} free descriptors")
        for cpu in self.cpus:
            try:
                fd = _perf_open(self._attr, tid, cpu)
            except ProcessLookupError:
                return False
            self._fds.append(fd)
            ring = self._rings.get(cpu)
            if ring is None:
                self._rings[cpu] = _Ring(fd, self.pages)
            else:
                fcntl.ioctl(fd, _IOC_SET_OUTPUT, ring.fd)
        return True

    def _read_rings(self) -> None:
        self._full = False
        for ring in self._rings.values():
            data = ring.read()
            if len(data) + _MAX_RECORD > ring.size:
                self._full = self._overflowed = True
            self._parse(data)

    def _attribute(self) -> dict[str, int]:
        """Samples per mapped object. A process's maps are read now; one that has exited is looked up in its maps
        from an earlier drain, or else (forked without exec while sampled) in those of the process it came from."""
        now: dict[int, _Maps | None] = {}

        def maps_of(pid: int) -> _Maps | None:
            for _ in range(64):  # a chain of forks, bounded
                if pid not in now:
                    now[pid] = _Maps.read(pid)
                maps = now[pid] or self._maps.get(pid)
                if maps is not None or pid in self._execed or pid not in self._forked_from:
                    return maps
                pid = self._forked_from[pid]
                if pid in self._execed:
                    return None
            return None

        by_pid: dict[int, list[tuple[int, int]]] = {}
        for (pid, ip), n in self._counts.items():
            by_pid.setdefault(pid, []).append((ip, n))
        out: dict[str, int] = {}
        for pid, ips in by_pid.items():
            maps = maps_of(pid)
            for ip, n in ips:
                obj = maps.find(ip) if maps is not None else "[unknown]"
                out[obj] = out.get(obj, 0) + n
        return out

    def _parse(self, data: bytes) -> None:
        counts, pids = self._counts, self._pids
        last_pid = -1
        off, end = 0, len(data)
        while off + 8 <= end:
            kind, misc, size = _HEADER.unpack_from(data, off)
            if size < 8 or off + size > end:
                self.error = self.error or f"malformed perf record (type {kind}, size {size})"
                return
            if kind == _RECORD_SAMPLE and size >= _SAMPLE.size:
                _, _, _, ip, pid, _ = _SAMPLE.unpack_from(data, off)
                key = (pid, ip)
                counts[key] = counts.get(key, 0) + 1
                if pid != last_pid:
                    pids.add(pid)
                    last_pid = pid
            elif kind == _RECORD_FORK and size >= _FORK.size:
                _, _, _, pid, ppid, tid, _ = _FORK.unpack_from(data, off)
                self._covered.add(tid)
                if pid == tid and pid != ppid:
                    self._forked_from[pid] = ppid
            elif kind == _RECORD_COMM and misc & _MISC_COMM_EXEC and size >= _COMM.size:
                self._execed.add(_COMM.unpack_from(data, off)[3])
            elif kind == _RECORD_LOST and size >= _LOST.size:
                self._lost += _LOST.unpack_from(data, off)[4]
            elif kind == _RECORD_THROTTLE:
                self._throttled += 1
            off += size

    def _close(self) -> None:
        rings, fds = list(self._rings.values()), self._fds
        self._rings, self._fds = {}, []
        for ring in rings:
            try:
                ring.close()
            except (OSError, ValueError, BufferError):
                pass
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


class _Ring:
    """A perf ring buffer: the metadata page and ``pages`` data pages, mapped writable so that the kernel never
    overwrites records not yet read (it counts them lost instead)."""

    def __init__(self, fd: int, pages: int) -> None:
        self.fd = fd
        self.map = mmap.mmap(fd, (1 + pages) * mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        offset, size = _U64.unpack_from(self.map, _DATA_OFFSET)[0], _U64.unpack_from(self.map, _DATA_SIZE)[0]
        if not (offset and size):  # kernels before 4.1 leave them zero
            offset, size = mmap.PAGESIZE, pages * mmap.PAGESIZE
        self.offset, self.size = offset, size

    def read(self) -> bytes:
        """The records written since the last read, in order (a record that wraps around comes out whole)."""
        m = self.map
        head = _U64.unpack_from(m, _DATA_HEAD)[0]
        tail = _U64.unpack_from(m, _DATA_TAIL)[0]
        n = head - tail
        if n <= 0:
            return b""
        if n > self.size:  # cannot happen in this mode; skip rather than read garbage
            _U64.pack_into(m, _DATA_TAIL, head)
            return b""
        start = self.offset + tail % self.size
        first = min(n, self.offset + self.size - start)
        data = m[start:start + first]
        if first < n:
            data += m[self.offset:self.offset + n - first]
        _U64.pack_into(m, _DATA_TAIL, head)
        return data

    def close(self) -> None:
        self.map.close()


class _Maps:
    """A process's mappings, for looking up which object an address lies in."""

    def __init__(self, starts: list[int], ends: list[int], names: list[str]) -> None:
        self.starts, self.ends, self.names = starts, ends, names

    @classmethod
    def read(cls, pid: int) -> _Maps | None:
        """The mappings of process ``pid``, or None when they cannot be read."""
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            return None
        rows = []
        for line in text.splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) < 5 or "-" not in parts[0]:
                continue
            lo, _, hi = parts[0].partition("-")
            try:
                rows.append((int(lo, 16), int(hi, 16), parts[5] if len(parts) == 6 else "[anon]"))
            except ValueError:
                continue
        if not rows:  # an exited process (a zombie) shows no mappings
            return None
        rows.sort()
        return cls([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])

    def find(self, ip: int) -> str:
        i = bisect.bisect_right(self.starts, ip) - 1
        return self.names[i] if i >= 0 and ip < self.ends[i] else "[unknown]"


# -- classes of objects ----------------------------------------------------------------------------------------


def classify(obj: str, own_roots: Sequence[str] = ()) -> str:
    """The class (:data:`CLASSES`) of a mapped object's name as :class:`Profile` counts it. ``own_roots`` are
    folders (``_roots`` resolves symlinks; ``Profile.classes`` does that itself)."""
    if obj in ("[vdso]", "[vsyscall]"):
        return "runtime"
    if obj.startswith("["):
        return "anon"
    if obj.endswith(" (deleted)") or obj.startswith("/memfd:") or _under(obj, own_roots):
        return "own"
    dirs = _package_dirs()
    if _under(obj, dirs["torch"]):
        return "torch"
    if _under(obj, dirs["numpy"]):
        return "numpy"
    if obj in dirs["python_exe"] or _under(obj, dirs["python"]) or _PYTHON_NAME.match(os.path.basename(obj)):
        return "python"
    if _under(obj, _SYSTEM_DIRS) and "/site-packages/" not in obj and "/dist-packages/" not in obj:
        return "runtime"
    return "other"


_PYTHON_NAME = re.compile(r"(python\d+(\.\d+)?|libpython\d.*\.so.*)$")
_SYSTEM_DIRS = ("/lib", "/lib32", "/lib64", "/libx32", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libx32",
                "/usr/local/lib", "/usr/local/lib64")


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def _roots(paths: Iterable[str]) -> tuple[str, ...]:
    """Folders as given and with symlinks resolved (maps show resolved paths), without trailing slashes."""
    out: set[str] = set()
    for p in paths:
        p = os.path.abspath(os.fspath(p))
        out.update(q.rstrip("/") or "/" for q in (p, os.path.realpath(p)))
    return tuple(sorted(out))


@functools.lru_cache(maxsize=1)
def _package_dirs() -> dict[str, tuple[str, ...]]:
    """Folders of torch and numpy (with their ``<name>.libs`` siblings) found without importing them, of the
    Python standard library's extension modules, and this interpreter's executable."""
    out: dict[str, tuple[str, ...]] = {}
    for name in ("torch", "numpy"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        found = list(spec.submodule_search_locations or []) if spec is not None else []
        out[name] = _roots(found + [d.rstrip("/") + ".libs" for d in found])
    stdlib = {sysconfig.get_path(k) for k in ("stdlib", "platstdlib")} - {None}
    dynload = [os.path.join(d, "lib-dynload") for d in stdlib]
    out["python"] = _roots(d for d in dynload if os.path.isdir(d))
    out["python_exe"] = _roots([sys.executable]) if sys.executable else ()
    return out


# -- /proc and syscalls -----------------------------------------------------------------------------------------


def _descriptors_left(wanted: int) -> bool:
    """Whether ``wanted`` more descriptors leave ``FREE_DESCRIPTORS`` free under this process's limit (raised to
    its hard limit first, once)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError):
            pass
    if soft == resource.RLIM_INFINITY:
        return True
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        return False
    return used + wanted + FREE_DESCRIPTORS <= soft


def _tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return []


@functools.lru_cache(maxsize=1)
def _has_children_files() -> bool:
    return os.path.exists(f"/proc/self/task/{os.getpid()}/children")  # CONFIG_PROC_CHILDREN


def _children(pid: int, tids: list[int]) -> list[int]:
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return out


def _parents() -> dict[int, list[int]]:
    """Every process's children, from the parent pid in ``/proc/<pid>/stat`` (kernels without ``children``)."""
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rpartition(b")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out.setdefault(ppid, []).append(int(name))
    return out


def _tree_threads(root: int) -> list[int]:
    """Every thread of ``root`` and of its descendant processes (bounded)."""
    parents = None if _has_children_files() else _parents()
    seen: set[int] = set()
    todo: list[int] = [root]
    threads: list[int] = []
    while todo and len(seen) < _MAX_PROCESSES and len(threads) < _MAX_THREADS:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        tids = _tasks(pid)
        threads += tids
        todo += parents.get(pid, []) if parents is not None else _children(pid, tids)
    return threads


def _online_cpus() -> list[int]:
    try:
        with open("/sys/devices/system/cpu/online") as f:
            text = f.read().strip()
        cpus: set[int] = set()
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
        return sorted(cpus)
    except (OSError, ValueError):
        return list(range(os.cpu_count() or 1))


def _attr(hz: int) -> ctypes.Array[ctypes.c_char]:
    """A ``perf_event_attr``: task clock, a sample every ``1/hz`` s of the thread's CPU time (IP and pid/tid)."""
    buf = ctypes.create_string_buffer(_ATTR_SIZE)
    period = max(_MIN_PERIOD_NS, 1_000_000_000 // hz)
    # type, size, config, sample_period, sample_type, read_format, flags
    struct.pack_into("<IIQQQQQ", buf, 0, _PERF_TYPE_SOFTWARE, _ATTR_SIZE, _PERF_COUNT_SW_TASK_CLOCK, period,
                     _PERF_SAMPLE_IP_TID, 0, _ATTR_FLAGS)
    return buf


@functools.lru_cache(maxsize=1)
def _syscall() -> Callable[..., int]:
    fn = ctypes.CDLL(None, use_errno=True).syscall
    fn.restype = ctypes.c_long
    fn.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_ulong]
    return fn


def _perf_open(attr: ctypes.Array[ctypes.c_char], tid: int, cpu: int) -> int:
    """A perf event descriptor (close-on-exec) for thread ``tid`` on ``cpu``; OSError with errno otherwise."""
    fd = _syscall()(_NR_PERF_EVENT_OPEN, ctypes.addressof(attr), tid, cpu, -1, _PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{os.strerror(err)} (thread {tid}, cpu {cpu})")
    return int(fd)


def _paranoid_hint() -> str:
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            return f" (perf_event_paranoid={f.read().strip()})"
    except OSError:
        return ""


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"
