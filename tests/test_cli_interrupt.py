"""Ctrl-C (issue 15): a real ``kbv eval`` in a subprocess gets a real SIGINT, sent to its process group as a
terminal sends it, at several moments of a run: during a long compile stage (a candidate whose import sleeps and
has started a child process, as a compiler would), during correctness (a forward that never returns) after another
pair was already recorded, and during the performance stage. Each time kbv must stop within seconds, kill the
workers' process groups (the child processes included), record nothing for the pairs cut short, remove a build
folder cut short, and print how many pairs were recorded and the ``--resume`` command that continues."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbv.eval.workspace import build_dir
from kbv.problems.candidates import Candidate

ROOT = Path(__file__).resolve().parents[1]
RELU = ROOT / "src" / "kbv" / "suites" / "builtin" / "level1" / "5_ReLU.py"
CORRECT = ROOT / "tests" / "candidates" / "correct_torch.py"
STOP_WITHIN_S = 15.0  # from SIGINT to the process's exit

HEADER = '''import os, subprocess, time
from pathlib import Path
import torch
import torch.nn as nn
MARK = Path({mark!r})


def _announce():
    child = subprocess.Popen(["sleep", "300"])  # as a compiler the build started would be
    tmp = MARK.with_suffix(".tmp")
    tmp.write_text(f"{{os.getpid()}} {{child.pid}}")
    tmp.rename(MARK)
'''

SLOW_IMPORT = HEADER + '''
ext = Path(os.environ["TORCH_EXTENSIONS_DIR"]) / "slow_ext"
ext.mkdir(parents=True, exist_ok=True)
(ext / "half_written.o").write_bytes(b"\\0" * 100)  # a build cut short
(ext / "lock").write_text("")  # torch's build lock
_announce()
time.sleep(300)


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
'''

HANG_IN_STAGE = HEADER + '''

class ModelNew(nn.Module):
    def forward(self, x):
        if {stage!r} in os.environ.get("TMPDIR", ""):  # the stage's work folder: <stage>-candidate
            _announce()
            time.sleep(300)
        return x.clamp_min(0)
'''


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie is dead (only not yet reaped by whoever adopted it)


def _terminal_sigint() -> None:
    """In the child before it runs: SIGINT as at an interactive terminal. A test run started in the background
    (``cmd &`` in a script) inherits SIGINT ignored, and Python then keeps it ignored: Ctrl-C could never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run_and_interrupt(args: list[str], mark: Path, env: dict[str, str], wait_s: float = 240.0):
    proc = subprocess.Popen([sys.executable, "-m", "kbv", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=ROOT, start_new_session=True, preexec_fn=_terminal_sigint)
    try:
        deadline = time.monotonic() + wait_s
        while not mark.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                out, err = proc.communicate(timeout=30)
                pytest.fail(f"the candidate never reached its slow point (rc {proc.returncode}):\n{out}\n{err}")
            time.sleep(0.1)
        time.sleep(0.5)
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
        try:
            out, err = proc.communicate(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"kbv did not stop within {STOP_WITHIN_S} s of SIGINT")
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    worker, child = (int(x) for x in mark.read_text().split())
    return proc.returncode, out, err, took, worker, child


def _check_stopped(rc: int, err: str, took: float, worker: int, child: int, recorded: int, resume_args: list[str]):
    assert rc == 130, err
    assert took < STOP_WITHIN_S
    assert "Traceback" not in err, err
    assert f"Interrupted: {recorded} pairs recorded" in err, err
    m = re.search(r"^Continue with: (.*)$", err, re.MULTILINE)
    assert m, err
    command = shlex.split(m.group(1))
    assert command[0] == "kbv" and command[-1] == "--resume"
    for arg in resume_args:
        assert arg in command
    deadline = time.monotonic() + 5
    while (_alive(worker) or _alive(child)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker), "the worker outlived kbv"
    assert not _alive(child), "a process the worker started outlived kbv (its process group was not killed)"


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """A fresh cache; the sandbox off so the candidate can write its marker here (and the isolation warning shows)."""
    return dict(os.environ, KBV_CACHE_DIR=str(tmp_path / "cache"), KBV_SANDBOX="off", COLUMNS="100",
                PYTHONPATH=str(ROOT / "src"))


FAST = ["--device", "cpu", "--trials", "1", "--protocol", "standard", "--timing-pairs", "1"]


def test_ctrl_c_during_a_long_build(tmp_path, env):
    mark = tmp_path / "mark"
    candidate = tmp_path / "slow_import.py"
    candidate.write_text(SLOW_IMPORT.format(mark=str(mark)))
    out = tmp_path / "results.jsonl"
    args = ["eval", "--problem", str(RELU), "--candidate", str(candidate), "--out", str(out), *FAST]
    rc, _, err, took, worker, child = _run_and_interrupt(args, mark, env)
    _check_stopped(rc, err, took, worker, child, 0, ["--out", str(out), "--candidate", str(candidate)])
    assert not out.exists() or out.read_text() == ""  # nothing recorded for the pair cut short
    build = build_dir(Candidate.from_path(candidate), "cpu", Path(env["KBV_CACHE_DIR"]))
    assert not build.exists(), sorted(build.rglob("*"))  # the torn build folder is gone
    # the isolation warning: one readable line that says what to do, no Python warning with its source line
    warning = [line for line in err.splitlines() if "isolation reduced" in line]
    assert len(warning) == 1 and warning[0].startswith("Warning: ") and "KBV_SANDBOX" in warning[0], err
    assert "UserWarning" not in err and "warnings.warn" not in err


def _eval_with_a_hang(tmp_path: Path, mark: Path, stage: str, hang: int, correct: tuple[int, ...]) -> list[str]:
    """``kbv eval`` arguments over a one-problem suite (level1/5_ReLU): sample ``hang`` hangs in ``stage`` (after
    writing ``mark``), the samples in ``correct`` are the correct example; results go to tmp_path/results.jsonl."""
    suite = tmp_path / "suite" / "level1"
    suite.mkdir(parents=True)
    shutil.copy(RELU, suite / RELU.name)
    candidates = tmp_path / "candidates"
    candidates.mkdir()
    for sample in correct:
        shutil.copy(CORRECT, candidates / f"level_1_problem_5_sample_{sample}_kernel.py")
    (candidates / f"level_1_problem_5_sample_{hang}_kernel.py").write_text(HANG_IN_STAGE.format(mark=str(mark),
                                                                                               stage=stage))
    return ["eval", "--problems", str(suite.parent), "--candidates", str(candidates),
            "--out", str(tmp_path / "results.jsonl"), *FAST]


@pytest.mark.parametrize("stage, done_first", [("correctness", True), ("performance", False)])
def test_ctrl_c_during_evaluation_keeps_what_was_recorded(tmp_path, env, stage, done_first):
    """``done_first``: a correct pair (sample 0) is evaluated before the one that hangs (sample 1)."""
    mark, out = tmp_path / "mark", tmp_path / "results.jsonl"
    args = _eval_with_a_hang(tmp_path, mark, stage, hang=1, correct=(0,) if done_first else ())
    rc, _, err, took, worker, child = _run_and_interrupt(args, mark, env)
    _check_stopped(rc, err, took, worker, child, int(done_first), ["--out", str(out), "--problems",
                                                                   str(tmp_path / "suite")])
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    assert [(r["sample"], r["verdict"]) for r in records] == ([(0, "correct")] if done_first else [])


def test_a_pair_cut_short_by_ctrl_c_is_not_recorded(monkeypatch, tmp_path):
    """In-process, no worker: Ctrl-C arrives while the second pair runs; its (failed) result comes back only after
    the run was stopped and must not be recorded as the candidate's failure; the first pair's record stays."""
    import kbv.eval.runner as runner_mod
    from kbv.eval import EvalOptions
    from kbv.problems import load_problem
    from kbv.problems.candidates import Pair
    from kbv.records import read_records
    from kbv.sandbox import launch

    from test_cli_errors import fake_record

    monkeypatch.setattr(runner_mod, "build_candidates", lambda *a, **k: {})
    monkeypatch.setattr(runner_mod.sandbox_plan, "plan", lambda mode, device="cpu": {"requested": True})

    def evaluate(problem, candidate, options, device, gpu, compiled, name, gate=None):
        pair = Pair(problem, candidate)
        if candidate.sample == 0:
            return fake_record(pair, "correct")
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while this pair's worker runs
        deadline = time.monotonic() + 5
        while not launch.stopped() and time.monotonic() < deadline:
            time.sleep(0.01)
        return fake_record(pair, "runtime_error")  # what the pair of a killed worker looks like

    monkeypatch.setattr(runner_mod, "evaluate_shapes", evaluate)
    relu = load_problem(RELU)
    pairs = [Pair(relu, Candidate.from_path(CORRECT, sample)) for sample in (0, 1)]
    out = tmp_path / "r.jsonl"
    with pytest.raises(runner_mod.Interrupted) as info:
        runner_mod.run_pairs(pairs, EvalOptions(device="cpu"), out)
    assert (info.value.recorded, info.value.remaining) == (1, 1)
    assert [(r["sample"], r["verdict"]) for r in read_records(out)] == [(0, "correct")]
    launch.allow_workers()


# ---------------------------------------------------------------------------------------------------------------
# More moments: kbv's own start-up (its imports), the worker launcher's start-up, pairs still queued


def _child_with(parent: int, needle: str) -> int | None:
    """The pid of a live child of ``parent`` with ``needle`` in its command line, if any."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if int(fields[1]) == parent and needle in cmdline and fields[0] not in ("Z", "X"):
            return int(stat.parent.name)
    return None


def _interrupt_when(args: list[str], env: dict[str, str], ready, wait_s: float = 120.0):
    """Start ``kbv ARGS``, send SIGINT to its process group once ``ready(proc)`` holds; (rc, stderr, seconds from
    SIGINT to exit)."""
    proc = subprocess.Popen([sys.executable, "-m", "kbv", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=ROOT, start_new_session=True, preexec_fn=_terminal_sigint)
    try:
        deadline = time.monotonic() + wait_s
        while not ready(proc):
            if proc.poll() is not None or time.monotonic() > deadline:
                out, err = proc.communicate(timeout=30)
                pytest.fail(f"the moment never came (rc {proc.returncode}):\n{out}\n{err}")
            time.sleep(0.02)
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"kbv did not stop within {STOP_WITHIN_S} s of SIGINT")
        return proc.returncode, err, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _importing_torch(pid: int) -> bool:
    """torch's library is mapped: the process is inside ``import torch`` (kbv.cli imports it after its guard; a
    fixed delay instead raced Python's own start-up on a loaded machine)."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def test_ctrl_c_while_kbv_starts_exits_130_without_a_traceback(tmp_path, env):
    """kbv's imports take seconds (torch): a Ctrl-C in them is "Interrupted." and 130, not an import's traceback."""
    out = tmp_path / "results.jsonl"
    rc, err, took = _interrupt_when(["eval", "--problem", str(RELU), "--candidate", str(CORRECT), "--out", str(out),
                                     *FAST], env, lambda proc: _importing_torch(proc.pid))
    assert rc == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines()[-1].startswith(("Interrupted", "Continue with")), err
    assert took < STOP_WITHIN_S


def test_ctrl_c_while_the_worker_launcher_starts_prints_no_traceback(tmp_path, env):
    """The launcher (kbv.worker.zygote) imports torch for seconds as soon as it starts: a Ctrl-C at the terminal
    then must not print its traceback (it sits in a session of its own), kbv stops at once and the launcher ends
    with it."""
    out = tmp_path / "results.jsonl"
    launcher: list[int] = []

    def started(proc) -> bool:
        pid = _child_with(proc.pid, "kbv.worker.zygote")
        launcher.extend([pid] if pid else [])
        return bool(pid)

    rc, err, took = _interrupt_when(["eval", "--problem", str(RELU), "--candidate", str(CORRECT), "--out", str(out),
                                     *FAST], env, started)
    assert rc == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "Interrupted: 0 pairs recorded" in err, err
    assert took < 5.0, took
    deadline = time.monotonic() + 5
    while _alive(launcher[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(launcher[0]), "the worker launcher outlived kbv"


def test_ctrl_c_with_pairs_still_queued_stops_at_once(tmp_path, env):
    """One pair hangs in correctness while two more wait for the (single) CPU slot: their futures are cancelled,
    and the runner must not wait its whole grace period for them (it did: cancelled futures never turn "done")."""
    from kbv.eval.runner import STOP_GRACE_S

    mark, out = tmp_path / "mark", tmp_path / "results.jsonl"
    args = _eval_with_a_hang(tmp_path, mark, "correctness", hang=0, correct=(1, 2))
    rc, _, err, took, worker, child = _run_and_interrupt(args, mark, env)
    _check_stopped(rc, err, took, worker, child, 0, ["--out", str(out)])
    assert took < STOP_GRACE_S, took
    assert "2 not evaluated" not in err and "3 not evaluated" in err, err


def test_stop_does_not_wait_for_cancelled_futures():
    """In-process: ``_stop`` on a pool with queued work returns once the running work ends, not after the grace."""
    from concurrent.futures import ThreadPoolExecutor

    from kbv.eval import runner
    from kbv.sandbox import launch

    pool = ThreadPoolExecutor(max_workers=1)
    futures = [pool.submit(time.sleep, 0.2) for _ in range(4)]
    start = time.monotonic()
    try:
        assert runner._stop(pool, futures) == 0
    finally:
        launch.allow_workers()
    assert time.monotonic() - start < runner.STOP_GRACE_S / 2
    assert sum(f.cancelled() for f in futures) == 3


def test_the_start_up_handler_is_gone_once_kbv_is_imported():
    """The quiet SIGINT handler covers only the import of kbv.cli: a run (and this test process) gets Python's own
    KeyboardInterrupt afterwards."""
    from kbv.cli import startup

    check = ("import signal, kbv.cli; import sys; "
             "sys.exit(0 if signal.getsignal(signal.SIGINT) is signal.default_int_handler else 3)")
    fresh = subprocess.run([sys.executable, "-c", check], env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
                           capture_output=True, text=True, timeout=120, preexec_fn=_terminal_sigint)
    assert fresh.returncode == 0, fresh.stderr  # a fresh process: Python's own handler once kbv.cli is imported
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # this process: whatever earlier tests set
    try:
        previous = startup.guard()
        assert signal.getsignal(signal.SIGINT) is startup._interrupted  # (what it does: the real-SIGINT test above)
        assert startup.guard() is None  # a handler someone chose is kept
        startup.release(previous)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


def test_stop_kills_a_worker_launcher_still_starting():
    """In-process: a thread waiting for a launcher that is still importing torch gets ``LauncherError`` at once
    when the run stops, instead of holding the stop until the launcher is ready (seconds)."""
    import threading

    from kbv.sandbox import launch, zygote

    outcome: list[BaseException | None] = []

    def start() -> None:
        try:
            zygote.Zygote({"PATH": os.environ.get("PATH", "/usr/bin:/bin")}).close()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            outcome.append(exc)

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not zygote._STARTING and time.monotonic() < deadline:
        time.sleep(0.01)
    assert zygote._STARTING, "the launcher never started"
    stopped = time.monotonic()
    try:
        launch.stop_all()
        thread.join(timeout=10)
    finally:
        launch.allow_workers()
    assert time.monotonic() - stopped < 1.5
    assert len(outcome) == 1 and isinstance(outcome[0], zygote.LauncherError), outcome
    assert not zygote._STARTING
