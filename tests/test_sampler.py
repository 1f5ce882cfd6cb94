"""The parent's outside sampler (``kbv.sandbox.sampler``): real child processes, sampled with perf_event_open while
they compute, attributed to numpy, torch, Python or the candidate's own library, including threads and processes
they start after sampling began."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from kbv.sandbox import sampler
from kbv.sandbox.sampler import Profile, Sampler

OK, WHY = sampler.available()
pytestmark = pytest.mark.skipif(not OK, reason=f"perf sampling unavailable: {WHY}")

HZ = 4000
WORK_S = 0.6


def _child(setup: str, work: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """A Python child that runs ``setup``, says ``ready``, waits for a byte, runs ``work`` (which loops while
    ``time.process_time() < end``: WORK_S of CPU time, however loaded the machine), says ``done`` and waits for a
    byte (or EOF) before exiting."""
    src = (f"import sys, time\nwork_s = {WORK_S}\n{textwrap.dedent(setup)}\nprint('ready', flush=True)\n"
           f"sys.stdin.read(1)\nend = time.process_time() + work_s\n{textwrap.dedent(work)}\n"
           "print('done', flush=True)\nsys.stdin.read(1)\n")
    return subprocess.Popen([sys.executable, "-c", src], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def _profile(setup: str, work: str, env: dict[str, str] | None = None, **kw: int) -> Profile:
    """Sample a child from ``ready`` to ``done`` (while it is still alive)."""
    with _sampled_child(work, setup, env, **kw) as (proc, s):
        assert proc.stdout is not None and proc.stdout.readline().strip() == "done"
        profile = s.stop()
    assert profile.error is None
    return profile


@contextlib.contextmanager
def _sampled_child(work: str, setup: str = "", env: dict[str, str] | None = None,
                   **kw: int) -> Iterator[tuple[subprocess.Popen[str], Sampler]]:
    """A child told to run ``work`` right after a sampler started on it; killed when the block ends (or after
    60 s, whatever the block does)."""
    proc = _child(setup, work, env)
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready"
        s = Sampler(proc.pid, hz=HZ, **kw)
        assert s.start(), s.error
        proc.stdin.write("x")
        proc.stdin.flush()
        yield proc, s
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()


def _enough(profile: Profile, seconds: float = WORK_S) -> None:
    """At least half the samples ``seconds`` of CPU time give (time in the kernel is not sampled)."""
    assert profile.samples > seconds * HZ / 2, profile


NUMPY_SETUP = """
import numpy as np
a = np.random.rand(256, 256).astype(np.float32)
b = np.random.rand(256, 256).astype(np.float32)
"""
NUMPY_WORK = """
while time.process_time() < end:
    a @ b
"""


def test_numpy_matmul_is_attributed_to_numpy() -> None:
    p = _profile(NUMPY_SETUP, NUMPY_WORK)
    _enough(p)
    assert p.share("numpy") > 0.5, p.classes()
    assert sum(p.classes().values()) == p.samples == sum(p.by_object.values())


def test_torch_mm_is_attributed_to_torch() -> None:
    p = _profile("import torch\na = torch.rand(256, 256)\n", "while time.process_time() < end:\n    torch.mm(a, a)\n")
    _enough(p)
    assert p.share("torch") > 0.5, p.classes()
    assert (p.share("numpy") or 0.0) < 0.05, p.classes()


def test_thread_started_after_start_is_followed() -> None:
    # one BLAS thread, so the numpy work runs in the new thread itself while the main thread waits in join()
    work = """
    import threading
    def spin():
        while time.process_time() < end:
            a @ b
    t = threading.Thread(target=spin)
    t.start()
    t.join()
    """
    p = _profile(NUMPY_SETUP, work, env={"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
    _enough(p)
    assert p.share("numpy") > 0.5, p.classes()


def test_process_forked_after_start_is_followed() -> None:
    work = """
    import os
    child = os.fork()
    if child == 0:
        end = time.process_time() + work_s  # a new process's CPU time starts at zero
        while time.process_time() < end:
            a @ b
        os._exit(0)
    os.waitpid(child, 0)
    """
    p = _profile(NUMPY_SETUP, work, env={"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
    _enough(p)
    assert p.share("numpy") > 0.5, p.classes()


PY_WORK = """
x = 0
while time.process_time() < end:
    for i in range(1000):
        x += i
"""


def test_pure_python_is_attributed_to_python() -> None:
    p = _profile("", PY_WORK)
    _enough(p)
    classes = p.classes()
    assert max(classes, key=lambda c: classes[c]) == "python", classes


def test_own_roots_make_a_library_own(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    build = tmp_path / "build"
    build.mkdir()
    (tmp_path / "spin.c").write_text(
        "unsigned long spin(unsigned long n) { volatile unsigned long x = 0;"
        " for (unsigned long i = 0; i < n; i++) x += i; return x; }\n")
    lib = build / "libspin.so"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "spin.c")], check=True)
    setup = f"import ctypes\nlib = ctypes.CDLL({str(lib)!r})\nlib.spin.argtypes = [ctypes.c_ulong]\n"
    p = _profile(setup, "while time.process_time() < end:\n    lib.spin(1000000)\n")
    _enough(p)
    assert p.by_object.get(str(lib), 0) > 0.5 * p.samples, p.by_object
    own: Sequence[str] = [str(build)]
    assert p.share("own", own) > 0.5 and (p.share("other", own) or 0.0) < 0.05, p.classes(own)
    assert p.share("other") > 0.5 and "own" not in p.classes(), p.classes()


def test_small_ring_wraps_around_without_losing_records() -> None:
    """Two data pages (records straddle their end) drained every 20 ms: every sample read, none lost."""
    with _sampled_child(PY_WORK, pages=2) as (proc, s):
        deadline = time.monotonic() + WORK_S + 30
        while not _said_done(proc) and time.monotonic() < deadline:
            time.sleep(0.02)
            s.drain()
        p = s.stop()
    assert p.error is None and p.lost == 0, p
    _enough(p)
    assert p.share("python") > 0.5, p.classes()


def _said_done(proc: subprocess.Popen[str]) -> bool:
    """Whether the child has written its ``done`` line (without blocking)."""
    assert proc.stdout is not None
    return bool(select.select([proc.stdout], [], [], 0)[0])


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_full_ring_is_reported() -> None:
    """One data page never drained while the child computes: flagged as overflowed, and holding at most a page."""
    p = _profile("", PY_WORK, pages=1)
    assert p.overflowed, p
    assert 0 < p.samples <= 4096 // 24 * len(sampler._online_cpus()), p


def test_lost_samples_are_counted() -> None:
    """One data page, drained once halfway: the kernel then writes a record of what it dropped."""
    with _sampled_child(PY_WORK, pages=1) as (proc, s):
        deadline = time.monotonic() + 30
        while _cpu_seconds(proc.pid) < WORK_S / 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        s.drain()  # the buffer has been full for a while
        assert proc.stdout is not None and proc.stdout.readline().strip() == "done"
        p = s.stop()
    assert p.overflowed and p.lost > WORK_S * HZ / 6, p
    assert p.error is None and p.share("python") > 0.5, p


def test_process_exiting_midway_gives_a_profile() -> None:
    """The child computes for 0.3 s and exits on its own while sampled; a drain while it ran kept its maps."""
    src = f"import time\nend = time.process_time() + 0.3\n{textwrap.dedent(PY_WORK)}"
    proc = subprocess.Popen([sys.executable, "-c", src])
    try:
        s = Sampler(proc.pid, hz=HZ)
        assert s.start(), s.error
        deadline = time.monotonic() + 30
        while _cpu_seconds(proc.pid) < 0.1 and time.monotonic() < deadline:
            time.sleep(0.01)
        s.drain()  # while it runs: its maps are kept
        proc.wait(timeout=30)
        time.sleep(0.05)
        s.drain()  # the tree is gone: nothing to refresh, no error
        p = s.stop()
    finally:
        proc.kill()
        proc.wait()
    assert p.error is None, p.error
    _enough(p, 0.3)
    assert p.share("python") > 0.5, p.classes()
    assert s.stop() is p  # idempotent


def test_missing_process_fails_to_start_with_an_error() -> None:
    gone = 2**22 + 1  # above PID_MAX_LIMIT: never a process
    s = Sampler(gone)
    assert s.start() is False
    assert s.error and str(gone) in s.error
    p = s.stop()
    assert p.samples == 0 and p.by_object == {} and p.error == s.error
    assert p.share("numpy") is None


def test_every_descriptor_and_buffer_is_released() -> None:
    def fds() -> set[str]:
        return set(os.listdir("/proc/self/fd"))

    def perf_maps() -> int:
        return sum("perf_event" in line for line in Path("/proc/self/maps").read_text().splitlines())

    before, maps_before = fds(), perf_maps()
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        with Sampler(proc.pid, hz=HZ) as s:
            assert s.error is None and len(s._fds) >= len(s.cpus) and perf_maps() == len(s.cpus)
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdin is not None
        proc.stdin.close()
    assert s.profile is not None and s.profile.error is None
    assert fds() == before and perf_maps() == maps_before == 0


def test_classify_by_path() -> None:
    dirs = sampler._package_dirs()
    torch_dir, numpy_dir = dirs["torch"][0], dirs["numpy"][0]
    assert sampler.classify(f"{torch_dir}/lib/libtorch_cpu.so") == "torch"
    assert sampler.classify(f"{numpy_dir}.libs/libopenblas.so") == "numpy"
    assert sampler.classify("/usr/lib/x86_64-linux-gnu/libc.so.6") == "runtime"
    assert sampler.classify("[vdso]") == "runtime"
    assert sampler.classify("[anon]") == "anon" and sampler.classify("[unknown]") == "anon"
    assert sampler.classify("/tmp/x/libk.so (deleted)") == "own"
    assert sampler.classify("/tmp/x/libk.so") == "other"
    assert sampler.classify("/tmp/x/libk.so", sampler._roots(["/tmp/x/"])) == "own"
    assert sampler.classify("/tmp/xy/libk.so", sampler._roots(["/tmp/x"])) == "other"
    assert sampler.classify("/usr/lib/python3/dist-packages/foo/x.so") == "other"
    assert sampler.classify(os.path.realpath(sys.executable)) == "python"


def test_a_sampler_that_would_hold_too_many_events_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """One event per thread and CPU: a tree that would need more than MAX_EVENTS (or leave the parent short of
    descriptors for its own work) is not sampled, and says so, rather than starving the parent."""
    proc = _child("", "pass")
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        monkeypatch.setattr(sampler, "MAX_EVENTS", 0)
        s = Sampler(proc.pid, hz=HZ)
        assert not s.start() and "not sampled" in (s.error or "")
        assert s.stop().samples == 0 and not s._fds
    finally:
        proc.kill()
        proc.wait()
