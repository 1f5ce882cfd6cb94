"""Adversarial candidates against the sandbox: each tries to reach outside its worker. They run only where kbv can
confine workers (root); elsewhere they skip with the reason kbv records in every result's env.isolation."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import CANDIDATES, problem_path
from kbv.eval import EvalOptions, evaluate
from kbv.files import cache_dir as default_cache_dir
from kbv.eval.workspace import SANDBOX_BUILD_ROOT
from kbv.records import Record, RecordWriter, read_records
from kbv.sandbox import plan as confine

PLAN = confine.plan("auto")
needs_sandbox = pytest.mark.skipif(not PLAN["requested"], reason=f"no sandbox here: {PLAN.get('reason')}")
RELU = problem_path("level1/5_ReLU")
OPTIONS = dict(device="cpu", timeout=30.0)
TEMPLATE = '''
import os, signal, socket, time
import torch
import torch.nn as nn

def attack():
{body}

class ModelNew(nn.Module):
    def forward(self, x):
        try:
            attack()
        except Exception:
            pass
        return torch.relu(x)
'''


def candidate(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(TEMPLATE.format(body="\n".join("    " + line for line in body.strip().splitlines())))
    return path


@needs_sandbox
def test_cannot_kill_processes_outside_its_worker(tmp_path) -> None:
    """A stand-in for the evaluating process (same user, root) must survive a candidate that signals it by pid and
    by searching /proc. (The search only targets the stand-in, so a broken sandbox fails this test instead of
    killing the test run.)"""
    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "kbv-decoy-marker"])
    try:
        path = candidate(tmp_path, "killer", f"""
os.kill({decoy.pid}, signal.SIGKILL)
for pid in os.listdir('/proc'):
    try:
        if pid.isdigit() and b'kbv-decoy-marker' in open('/proc/%s/cmdline' % pid, 'rb').read():
            os.kill(int(pid), signal.SIGKILL)
    except OSError:
        pass
""")
        record = evaluate(RELU, path, EvalOptions(**OPTIONS))
        assert decoy.poll() is None, "the candidate killed a process outside its worker"
        assert record.env["isolation"]["achieved"]["pid_namespace"] is True
        assert record.verdict in ("correct", "runtime_error")  # killing its own group is its own loss
    finally:
        decoy.kill()


@needs_sandbox
def test_cannot_write_the_results_file(tmp_path) -> None:
    results = tmp_path / "results" / "run.jsonl"
    results.parent.mkdir()
    RecordWriter(results).append(Record(problem="x", level=1, problem_id=1, problem_sha256="", candidate="c",
                                        candidate_sha256="0", sample=0, verdict="correct", standard_verdict="correct"))
    before = results.read_bytes()
    path = candidate(tmp_path, "writer", f"""
with open({str(results)!r}, 'a') as f:
    f.write('{{"schema": "kbv.result/1", "problem": "forged"}}\\n')
""")
    record = evaluate(RELU, path, EvalOptions(protect=[str(results.parent)], **OPTIONS))
    assert results.read_bytes() == before, "the candidate wrote into the results file"
    assert str(results.parent) in record.env["isolation"]["achieved"]["read_only"]
    assert [r["problem"] for r in read_records(results)] == ["x"]


@needs_sandbox
def test_cannot_write_the_build_cache() -> None:
    """E3: the fixture creates a file in kbv's cache (beside every candidate's build and the reference timings) and
    answers zeros if it could; read-only mounts leave only its own build folder writable, even where it stays root."""
    record = evaluate(RELU, CANDIDATES / "write_build_cache.py", EvalOptions(**OPTIONS))
    achieved = record.env["isolation"]["achieved"]
    assert record.verdict == "correct", "the candidate wrote into kbv's cache"
    assert achieved["cache_read_only"] is True and achieved["writable"]


# Writes inside its own folders must work (a zero answer if not); writes anywhere else in the cache must not, by
# any route: the path itself, /proc/<pid>/root of the evaluating process (its view is writable), and
# open_by_handle_at through its own writable mount (same file system). Foreign writes leave marks behind.
OWN_FOLDERS = '''
import ctypes, os, secrets
from pathlib import Path
import torch
import torch.nn as nn

MARK = "kbv-e3-" + secrets.token_hex(4)


class _Handle(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint), ("kind", ctypes.c_int), ("data", ctypes.c_ubyte * 128)]


def _own_folders_writable():
    ok = True
    for folder in (os.environ["TORCH_EXTENSIONS_DIR"], os.environ["TRITON_CACHE_DIR"], os.environ["TMPDIR"],
                   os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "ext", "build")):
        try:
            os.makedirs(folder, exist_ok=True)
            Path(folder, MARK).write_text("x")
            os.unlink(os.path.join(folder, MARK))
        except OSError:
            ok = False
    return ok


def _attack():
    own = Path(os.environ["TORCH_EXTENSIONS_DIR"]).parent
    builds, cache = own.parent, own.parent.parent
    targets = [cache, builds, *(p for p in builds.iterdir() if p.is_dir() and p != own), cache / "reference-timing"]
    files = [f for t in targets if t.is_dir() for f in t.iterdir() if f.is_file()]
    for target in targets:
        for root in ["", *("/proc/%s/root" % pid for pid in os.listdir("/proc") if pid.isdigit())]:
            try:
                open(root + str(target / MARK), "w").close()
            except OSError:
                pass
    libc = ctypes.CDLL(None, use_errno=True)
    own_fd = os.open(str(own), os.O_RDONLY)
    for f in files:
        handle, mount_id = _Handle(128), ctypes.c_int()
        if libc.name_to_handle_at(-100, str(f).encode(), ctypes.byref(handle), ctypes.byref(mount_id), 0) == 0:
            fd = libc.open_by_handle_at(own_fd, ctypes.byref(handle), os.O_WRONLY | os.O_APPEND)
            if fd >= 0:
                os.write(fd, MARK.encode())
                os.close(fd)
        for root in ("/proc/%s/root" % pid for pid in os.listdir("/proc") if pid.isdigit()):
            try:
                with open(root + str(f), "a") as out:
                    out.write(MARK)
            except OSError:
                pass


_OWN_OK = []


class ModelNew(nn.Module):
    def forward(self, x):
        if not _OWN_OK:  # once per worker (each stage's worker is confined afresh)
            try:
                _attack()
            except Exception:
                pass
            _OWN_OK.append(_own_folders_writable())
        return torch.relu(x) if _OWN_OK[0] else torch.zeros_like(x)
'''


@needs_sandbox
def test_only_its_own_folders_in_the_cache_are_writable(tmp_path) -> None:
    """Its own build, Triton and scratch folders stay writable (a load_inline build needs them: the C++ example,
    tests/test_adversarial.py::test_corpus[example_cpp_relu], builds under the same mounts); another candidate's
    build and the reference timings stay untouched by every route tried. The decoys are made where this
    candidate's build folder lives (kbv's cache, or the shared sandbox build root where the user cannot reach it)."""
    cache = default_cache_dir()
    builds = cache / "build"
    if PLAN["ids"] and not confine.traversable(builds):
        builds = SANDBOX_BUILD_ROOT
    name = f"e3-decoy-{os.getpid()}"
    decoys = [builds / name / "main.cpp", cache / "reference-timing" / f"{name}.json"]
    for decoy in decoys:
        decoy.parent.mkdir(parents=True, exist_ok=True)
        decoy.write_text("decoy")
        if PLAN["ids"]:
            confine.hand_over(decoy.parent, PLAN["ids"])  # a sibling build belongs to the same user
    path = tmp_path / "own_folders.py"
    path.write_text(OWN_FOLDERS)
    try:
        record = evaluate(RELU, path, EvalOptions(**OPTIONS))
        assert record.verdict == "correct", record.error or "its own folders were not writable"
        assert [d.read_text() for d in decoys] == ["decoy"] * len(decoys), "a foreign file in the cache was written"
        marks = [str(p) for folder in {cache, builds} for p in folder.rglob("kbv-e3-*")]
        assert not marks, f"the candidate created files outside its own folders: {marks}"
    finally:
        decoys[1].unlink(missing_ok=True)
        shutil.rmtree(decoys[0].parent, ignore_errors=True)


@needs_sandbox
def test_cannot_open_a_network_connection(tmp_path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    try:
        path = candidate(tmp_path, "caller", f"socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'x')")
        record = evaluate(RELU, path, EvalOptions(**OPTIONS))
        with pytest.raises(socket.timeout):
            server.accept()
        assert record.env["isolation"]["achieved"]["network_namespace"] is True
        assert record.verdict == "correct"
    finally:
        server.close()


@needs_sandbox
def test_a_forked_child_does_not_outlive_its_worker() -> None:
    """Grandchildren that call setsid() die with the stage. The beacon lies in a folder the (unprivileged) worker
    can reach, and the forked processes never return into the worker's loop (they would answer on its channel).
    Processes left running during the calls are the candidate's own background work (``background_threads``)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="kbv-forker-", dir="/tmp"))
    try:
        beacon = folder / "beacon"
        beacon.touch()
        os.chmod(folder, 0o777)
        os.chmod(beacon, 0o666)
        path = candidate(folder, "forker", f"""
if os.fork() == 0:
    try:
        os.setsid()
        if os.fork() == 0:
            for _ in range(600):
                os.utime({str(beacon)!r})
                time.sleep(0.1)
    finally:
        os._exit(0)
""")
        start = beacon.stat().st_mtime
        record = evaluate(RELU, path, EvalOptions(**OPTIONS))
        assert record.verdict in ("correct", "rejected"), (record.verdict, record.error)
        assert record.verdict == "correct" or "background_threads" in record.flags
        assert beacon.stat().st_mtime > start, "the forked process never ran: the test shows nothing"
        time.sleep(1.0)
        first = beacon.stat().st_mtime
        time.sleep(1.0)
        assert beacon.stat().st_mtime == first, "a process the candidate forked is still running"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_isolation_is_recorded_in_every_result() -> None:
    record = evaluate(RELU, Path(__file__).parent / "candidates" / "correct_torch.py", EvalOptions(**OPTIONS))
    isolation = record.env["isolation"]
    assert isolation["requested"]
    if PLAN["requested"]:
        assert isolation["achieved"]["network_namespace"] and isolation["achieved"]["pid_namespace"]
    else:
        assert isolation["requested"] == "none" and isolation["reason"]


def test_cuda_probe_drops_only_the_layers_under_which_cuda_fails(monkeypatch) -> None:
    """The probe logic (the CUDA part itself runs on the GPU machine): a layer that breaks CUDA alone is dropped and
    named; layers that work alone but not together are all dropped; a working full spec is kept whole."""
    from kbv.sandbox import probe

    full = {"network": True, "pid": True, "read_only": ["/x"], "ids": [1, 1]}
    calls: list[tuple[str, ...]] = []

    def fake(breaks):
        def run(spec, env):
            calls.append(tuple(sorted(spec)))
            return (not breaks(spec), "RuntimeError: error 304")
        return run

    monkeypatch.setattr(probe, "_run", fake(lambda s: "ids" in s))
    kept, notes = probe.usable_layers(full)
    assert kept == {"network": True, "pid": True, "read_only": ["/x"]}
    assert len(notes) == 1 and notes[0].startswith("ids: dropped") and "304" in notes[0]

    monkeypatch.setattr(probe, "_run", fake(lambda s: len(s) > 1))
    kept, notes = probe.usable_layers(full)
    assert kept == {} and "not together" in notes[-1]

    calls.clear()
    monkeypatch.setattr(probe, "_run", fake(lambda s: False))
    assert probe.usable_layers(full) == (full, []) and len(calls) == 1


INSTALLED_CODE = '''
import os, secrets, sysconfig
from pathlib import Path
import torch
import torch.nn as nn


def _writable(folder):
    probe = Path(folder) / ("kbv-probe-" + secrets.token_hex(4))
    try:
        probe.write_text("")
    except OSError:
        return False
    probe.unlink()
    return True


WROTE = [f for f in (os.path.dirname(torch.__file__), sysconfig.get_paths()["stdlib"]) if _writable(f)]


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x) if WROTE else torch.relu(x)
'''


@needs_sandbox
def test_cannot_write_installed_code(tmp_path: Path) -> None:
    """The Python runtime and installed packages (torch here) are read-only to candidate workers: a root worker could
    otherwise rewrite what every later run's reference imports. The candidate answers zeros if a write succeeded."""
    candidate = tmp_path / "write_installed_code.py"
    candidate.write_text(INSTALLED_CODE)
    record = evaluate(RELU, candidate, EvalOptions(**OPTIONS))
    assert record.verdict == "correct", "the candidate wrote into torch's package or the standard library"
    assert os.path.dirname(torch.__file__).startswith(tuple(record.env["isolation"]["achieved"]["read_only"]))


OTHER_MEMORY = '''
import os
import torch
import torch.nn as nn


def _writable_memory():
    me = int(os.readlink("/proc/self"))  # this process as /proc numbers it (os.getpid() is 1 in a PID namespace)
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open("/proc/%s/mem" % pid, "r+b"):
                found.append(int(pid))
        except OSError:
            pass
    return found


OPENED = _writable_memory()


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x) if OPENED else torch.relu(x)
'''


@needs_sandbox
def test_cannot_open_other_processes_memory(tmp_path: Path) -> None:
    """C13: the expected outputs live in the reference worker; a root candidate worker could otherwise write them
    through /proc/<pid>/mem. Without CAP_SYS_PTRACE (given up after the mounts) and with the other processes holding
    capabilities it lacks, no other process's memory opens. The candidate answers zeros if one did."""
    candidate = tmp_path / "open_other_memory.py"
    candidate.write_text(OTHER_MEMORY)
    record = evaluate(RELU, candidate, EvalOptions(**OPTIONS))
    assert record.verdict == "correct", "the candidate opened another process's memory for writing"


def test_killing_a_worker_waits_for_its_inner_process_even_one_that_left_the_group() -> None:
    """The launcher reports only a worker's outer process; the inner one (its PID namespace's first process) may
    still be releasing device memory when the outer is reaped, or may have left the process group (setsid), which
    a group kill misses. kill() kills the children it reads from /proc itself and returns once they have exited."""
    from kbv.sandbox import launch

    outer = subprocess.Popen([sys.executable, "-c", "import os, subprocess, sys, time\n"
                              "subprocess.Popen([sys.executable, '-c', 'import os, time; os.setsid(); time.sleep(60)'])\n"
                              "time.sleep(60)\n"], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not launch._children(outer.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        (inner,) = launch._children(outer.pid)
        time.sleep(0.3)  # the inner one has left the outer one's process group by now

        class Outer:  # what the launcher's _Process offers, over a process this test started
            pid = outer.pid

            def is_alive(self) -> bool:
                return outer.poll() is None

            def kill(self) -> None:
                outer.kill()

            def join(self, timeout: float | None = None) -> None:
                try:
                    outer.wait(timeout)
                except subprocess.TimeoutExpired:
                    pass

        worker = launch.Worker.__new__(launch.Worker)
        worker._proc = Outer()
        assert os.getpgid(inner) != outer.pid
        worker.kill()
        assert launch._exited(inner), "the inner process outlived kill()"
    finally:
        outer.kill()
        outer.wait()


def _bare_worker():
    """A launch.Worker over one end of a socket pair, with no process behind it (kill and logs stubbed)."""
    from multiprocessing.connection import Connection

    from kbv.sandbox import launch

    ours, theirs = socket.socketpair()
    worker = launch.Worker.__new__(launch.Worker)
    worker._conn, worker.commits, worker.killed = Connection(ours.detach()), {}, False
    worker.tamper, worker.handoffs, worker.handoff_failure = set(), {}, None
    worker.kill = lambda: setattr(worker, "killed", True)
    worker.log_tail = lambda: ""
    return worker, Connection(theirs.detach())


def test_commitments_sent_before_a_reply_are_kept_by_the_parent():
    """Kept outputs' digests (kbv.worker.commit) arrive as frames of their own while a command runs; the parent
    keeps them by (round, baseline, index), the first word for a call standing, and returns the reply."""
    from kbv import wire

    worker, theirs = _bare_worker()
    for entry in ([0, "verified", 4, [[1, 2, 3]]], [0, "verified", 5, [[4, 5, 6]]], [0, "verified", 4, [[9, 9, 9]]]):
        wire.send(theirs, {"commit": entry})
    wire.send(theirs, {"ok": True, "timing": {}})
    assert worker._expect(time.monotonic() + 5) == {"ok": True, "timing": {}}
    assert worker.commits == {(0, "verified", 4): [[1, 2, 3]], (0, "verified", 5): [[4, 5, 6]]}


@pytest.mark.parametrize("entry", [[0, "verified", [[1]]], ["0", "verified", 4, [[1]]], [0, 7, 4, [[1]]],
                                   [0, "verified", 4, "digest"]])
def test_a_malformed_commitment_is_a_protocol_failure(entry):
    from kbv import wire
    from kbv.sandbox.launch import WorkerFailure

    worker, theirs = _bare_worker()
    wire.send(theirs, {"commit": entry})
    with pytest.raises(WorkerFailure) as failure:
        worker._expect(time.monotonic() + 5)
    assert failure.value.kind == "protocol" and worker.killed


def test_the_parents_reading_of_a_workers_peak_memory_sees_a_rise_and_its_reset() -> None:
    """``kbv.sandbox.observe`` on a real process, as the timing stage reads each worker around every timed call: a
    64 MiB buffer made and freed between ``peak_start`` and ``peak_since`` is seen, and after ``peak_restart`` (the
    high-water mark reset through ``clear_refs``) it no longer is."""
    from kbv.sandbox import observe

    script = ("import sys\nfor line in sys.stdin:\n    b = bytearray(int(line))\n    b[::4096] = b'x' * len(b[::4096])\n"
              "    del b\n    print('ok', flush=True)\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        def allocate(nbytes: int) -> None:
            child.stdin.write(f"{nbytes}\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "ok"

        allocate(1 << 20)  # the child's interpreter warmed up
        status = observe._status(child.pid)
        assert set(status) == {"VmHWM", "VmRSS", "Threads"} and status["Threads"].strip() == "1"
        start = observe.peak_start(child.pid)
        assert start is not None and start[0] == child.pid
        allocate(64 << 20)
        assert observe.peak_since(start) >= 60 << 20
        fresh, high = observe.peak_restart(start)
        assert high is not None and high >= start[1] + (60 << 20)
        allocate(1 << 20)
        assert observe.peak_since(fresh) < 16 << 20
        assert observe._status(2**22 + 12345) == {}  # gone (no such process): nothing
    finally:
        child.kill()
        child.wait()
