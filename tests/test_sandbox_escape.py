"""Issue 11: no way out of a candidate worker. Direct tests of each mechanism (no worker started) show the attack
working without the defence; a few real evaluations show a confined candidate reaching nothing."""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import CANDIDATES, problem_path
from kbv.sandbox import plan as sandbox_plan

PLAN = sandbox_plan.plan("auto")
needs_sandbox = pytest.mark.skipif(not PLAN["requested"], reason=f"no sandbox here: {PLAN.get('reason')}")
RELU = problem_path("level1/5_ReLU")
SECRETS = {"OPENAI_API_KEY": "sk-kbv-issue11-openai", "HF_TOKEN": "hf_kbv_issue11_token",
           "MY_SERVICE_SECRET": "kbv-issue11-secret"}


@pytest.fixture
def open_dir() -> Path:
    """A folder every user can reach (pytest's own tmp_path sits under a private folder)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="kbv-issue11-", dir="/tmp"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _load_fixture(name: str):
    spec = importlib.util.spec_from_file_location(f"kbv_fixture_{name}", CANDIDATES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _forkserver_attack(marker: str, out) -> None:
    out.send(_load_fixture("sandbox_escape").launcher_escapes(marker))


def test_a_forkserver_child_gets_a_process_from_its_launcher(tmp_path: Path) -> None:
    """The old mechanism, attacked directly: a child of ``multiprocessing.forkserver`` finds the fork server's
    address and has it run code of its choosing (here: create a marker), outside whatever confined the child. The
    same attack in a kbv worker gets nothing (``test_a_candidate_reaches_nothing_outside_its_worker``)."""
    marker = tmp_path / "escaped"
    ctx = multiprocessing.get_context("forkserver")
    ours, theirs = ctx.Pipe()
    child = ctx.Process(target=_forkserver_attack, args=(str(marker), theirs))
    child.start()
    try:
        found = ours.recv() if ours.poll(60) else ["no answer"]
    finally:
        child.join(10)
        child.kill()
    assert marker.exists(), found
    assert any("fork request" in f for f in found)


def test_worker_environment_leaves_out_credentials(monkeypatch) -> None:
    environ = {"PATH": "/usr/bin", "LC_ALL": "C", "CUDA_VISIBLE_DEVICES": "0", "TRITON_CACHE_DIR": "/t",
               "OPENAI_API_KEY": "k", "HF_TOKEN": "t", "AWS_SECRET_ACCESS_KEY": "s", "GITHUB_TOKEN": "g",
               "TRITON_API_KEY": "x", "RANDOM_VAR": "r", "LD_PRELOAD": "/evil.so"}
    env = sandbox_plan.worker_environment(environ)
    assert {"PATH", "LC_ALL", "CUDA_VISIBLE_DEVICES", "TRITON_CACHE_DIR"} <= set(env)
    assert not {"OPENAI_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "TRITON_API_KEY",
                "RANDOM_VAR", "LD_PRELOAD"} & set(env)
    monkeypatch.setenv(sandbox_plan.DISABLE_ENV, "env")  # the switch the tests use to show the defence matters
    assert sandbox_plan.worker_environment(environ)["OPENAI_API_KEY"] == "k"


def _syscalls_in_child(install: bool) -> list[str]:
    """Run the fixture's system-call probe in a forked child (with or without kbv's filter); what was allowed."""
    from kbv.worker import seccomp

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            if install:
                assert seccomp.install()[0]
            os.write(w, "\n".join(_load_fixture("sandbox_escape")._syscalls()).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return [s for s in data.decode().split("\n") if s]


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="kbv's filter is x86_64 only")
def test_seccomp_filter_refuses_what_a_kernel_never_needs() -> None:
    """Without the filter the probe's calls go through (so the probe can tell); under it each gets EPERM, while
    threads, subprocesses and torch keep working."""
    assert set(_syscalls_in_child(install=False)) >= {"process_vm_readv", "name_to_handle_at"}
    assert _syscalls_in_child(install=True) == []
    from kbv.worker import seccomp

    code = ("from kbv.worker import seccomp; assert seccomp.install()[0]; import threading, subprocess, torch;"
            "t = threading.Thread(target=print); t.start(); t.join(); subprocess.run(['true'], check=True);"
            "print(float(torch.ones(4).sum()))")
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("4.0"), done.stderr[-2000:]
    assert {"ptrace", "mount", "unshare", "setns", "bpf", "kexec_load"} <= set(seccomp.DENIED)


def _poisoned_problem(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    problem = folder / "5_ReLU.py"
    shutil.copy2(RELU, problem)
    return problem


def test_problem_code_is_compiled_from_bytes_not_through_pycache(tmp_path: Path) -> None:
    """The mechanism: a ``__pycache__`` entry stamped with the source's mtime and size poisons an import by path
    (the old loader), but not a module compiled from the file's bytes (``loading.load_problem_module``)."""
    import torch

    from kbv.worker import loading

    problem = _poisoned_problem(tmp_path / "level1")
    fixture = _load_fixture("poison_pycache")
    assert Path(fixture.poison(str(problem))).is_file()
    x = torch.tensor([-1.0, 2.0])
    old = loading.import_file(problem, "kbv_problem_old_way")
    assert old.Model()(x).tolist() == [0.0, 0.0], "the poisoned cache was not used: the test shows nothing"
    new = loading.load_problem_module(problem, None)
    assert new.Model()(x).tolist() == [0.0, 2.0]
    sys.modules.pop("kbv_problem_old_way", None)


@needs_sandbox
def test_a_poisoned_pycache_does_not_change_a_later_honest_run(open_dir: Path) -> None:
    """A candidate writes a poisoned ``__pycache__`` for its problem (in a folder it may write, so the write itself
    succeeds); the next, honest run still compares against the real reference."""
    from kbv.eval import EvalOptions, evaluate

    folder = open_dir / "suite" / "level1"
    problem = _poisoned_problem(folder)
    for p in (open_dir / "suite", folder):
        p.chmod(0o777)
    attacker = open_dir / "poison_pycache.py"
    attacker.write_text((CANDIDATES / "poison_pycache.py").read_text() + f"\nTARGETS = {{'problem': {str(problem)!r}}}\n")
    first = evaluate(problem, attacker, EvalOptions(device="cpu", timeout=30.0))
    assert first.verdict == "correct", first.error
    assert Path(importlib.util.cache_from_source(str(problem))).is_file(), "the attack did not write its cache"
    honest = evaluate(problem, CANDIDATES / "correct_torch.py", EvalOptions(device="cpu", timeout=30.0))
    assert honest.verdict == "correct", (honest.verdict, honest.error)


def _escape_candidate(tmp_path: Path, marker: Path, files: list[Path]) -> Path:
    path = tmp_path / "sandbox_escape.py"
    targets = {"marker": str(marker), "secrets": list(SECRETS.values()), "files": [str(f) for f in files]}
    path.write_text((CANDIDATES / "sandbox_escape.py").read_text() + f"\nTARGETS = {targets!r}\n")
    return path


def _evaluator_decoys(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A suite with an evaluator side, a build of another candidate and a reference timing in kbv's cache."""
    from kbv import attest
    from kbv.files import cache_dir

    suite = tmp_path / "suite"
    problem = _poisoned_problem(suite / "level1")
    (suite / "evaluator").mkdir()
    files = [suite / "evaluator" / "heldout.json", cache_dir() / "build" / "kbv-decoy-build" / "main.cpp",
             cache_dir() / "reference-timing" / "kbv-decoy.json"]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text('{"decoy": true}')
    for f in (tmp_path, suite, suite / "evaluator", *(files[1:])):
        f.chmod(f.stat().st_mode | 0o755)  # readable by other users: only the sandbox's mounts keep them out
    key = attest.key_path()
    if not key.exists():
        attest.load_key()
    return problem, files + [key]


# the escape tests run on the CPU everywhere and, in ``pytest -m gpu``, on CUDA: a CUDA worker's sandbox keeps each
# layer only where the probe finds CUDA working under it (kbv.sandbox.probe), so it is checked there too
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@needs_sandbox
@pytest.mark.parametrize("device", DEVICES)
def test_a_candidate_reaches_nothing_outside_its_worker(open_dir: Path, monkeypatch, device: str) -> None:
    """The launcher (old fork-server address, every unix socket it can list, inherited descriptors, its parent),
    the parent's credentials, evaluator-side files (a suite's evaluator folder, the shipped suites', another build,
    the reference timings, the record key) and the system calls on the deny-list: the candidate raises, naming
    them, if it reached any. What the worker achieved is recorded: on either device every layer."""
    from kbv.eval import EvalOptions, evaluate

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    problem, files = _evaluator_decoys(open_dir)
    marker = open_dir / "escaped"
    open_dir.chmod(0o777)
    record = evaluate(problem, _escape_candidate(open_dir, marker, files), EvalOptions(device=device, timeout=60.0))
    assert record.verdict == "correct", (record.error or {}).get("message")
    assert not marker.exists()
    achieved = record.env["isolation"]["achieved"]
    assert achieved["pid_namespace"] and achieved["proc_mounted"] and achieved["seccomp"]
    assert achieved["user_namespace"] or achieved["user"], achieved
    assert str((open_dir / "suite" / "evaluator").resolve()) in achieved["hidden"]


@needs_sandbox
@pytest.mark.parametrize("device", DEVICES)
def test_with_the_defences_switched_off_the_same_candidate_reaches_them(open_dir: Path, monkeypatch,
                                                                        device: str) -> None:
    """The control for the test above: with the environment filter, the hiding and the filter switched off
    (``KBV_SANDBOX_DISABLE``, tests only), the same candidate reports the secrets, the evaluator files and (on the
    CPU) the system calls, so the test above would fail without those defences. In a CUDA worker the calls on the
    deny-list stayed refused without the filter on the H100 (docs/results/h100-2026-12-05): its other layers (no
    capability, the user namespace) refuse them too there, so only the secrets and files show the switch."""
    from kbv.eval import EvalOptions, evaluate

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(sandbox_plan.DISABLE_ENV, "env,hide,seccomp")
    problem, files = _evaluator_decoys(open_dir)
    open_dir.chmod(0o777)
    record = evaluate(problem, _escape_candidate(open_dir, open_dir / "escaped", files),
                      EvalOptions(device=device, timeout=60.0))
    message = (record.error or {}).get("message", "")
    assert record.verdict == "runtime_error", record.verdict
    assert "secret" in message and "heldout.json" in message, message
    assert device == "cuda" or "system call" in message, message


def test_plan_is_cached_and_forgotten_after_a_failed_health_check(monkeypatch) -> None:
    """The CUDA probe runs once per run and device kind; a GPU that fails its health check makes it run again."""
    from kbv import proc
    from kbv.sandbox import health

    calls: list[str] = []
    monkeypatch.setattr(sandbox_plan, "_plan", lambda mode, kind: calls.append(kind) or {"requested": False})
    monkeypatch.setattr(sandbox_plan, "_PLANS", {})
    sandbox_plan.plan("auto", "cuda")
    sandbox_plan.plan("auto", "cuda:1")
    assert calls == ["cuda"]

    class Failed:
        ok, timed_out = False, False

        def last_line(self) -> str:
            return "CUDA error: an illegal memory access"

    monkeypatch.setattr(proc, "run", lambda *a, **k: Failed())
    assert health.check(0, retries=0)[0] is False
    sandbox_plan.plan("auto", "cuda")
    assert calls == ["cuda", "cuda"]


def test_the_probe_tries_each_layer_with_what_it_acts_on(monkeypatch) -> None:
    """The CUDA probe tries every layer (the PID layer includes its fresh /proc; seccomp is a layer) alone with the
    paths the layers act on (runtime to keep, data to hide), as a worker would get them."""
    from kbv.sandbox import probe

    assert set(probe.LAYERS) == {"network", "pid", "read_only", "ids", "seccomp"}
    seen: list[dict] = []
    monkeypatch.setattr(probe, "_run", lambda spec, env: (seen.append(spec) or ("pid" not in spec), "error 304"))
    full = {"network": True, "pid": True, "seccomp": True, "keep": ["/py"], "hide": ["/e"]}
    kept, notes = probe.usable_layers(full)
    assert kept == {"network": True, "seccomp": True, "keep": ["/py"], "hide": ["/e"]}
    assert notes and notes[0].startswith("pid: dropped")
    assert all(spec.get("keep") == ["/py"] and spec.get("hide") == ["/e"] for spec in seen)
