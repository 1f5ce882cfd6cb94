"""Adversarial candidates against the sandbox: each tries to reach outside its worker. They run only where kbv can
confine workers (root); elsewhere they skip with the reason kbv records in every result's env.isolation."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import problem_path
from kbv.pipeline import EvalOptions, evaluate
from kbv.records import Record, RecordWriter, read_records
from kbv.sandbox import confine

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
def test_a_forked_child_does_not_outlive_its_worker(tmp_path) -> None:
    beacon = tmp_path / "beacon"
    beacon.touch()
    os.chmod(tmp_path, 0o777)
    os.chmod(beacon, 0o666)
    path = candidate(tmp_path, "forker", f"""
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for _ in range(600):
            os.utime({str(beacon)!r})
            time.sleep(0.1)
    os._exit(0)
""")
    record = evaluate(RELU, path, EvalOptions(**OPTIONS))
    assert record.verdict == "correct"
    time.sleep(1.0)
    first = beacon.stat().st_mtime
    time.sleep(1.0)
    assert beacon.stat().st_mtime == first, "a process the candidate forked is still running"


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
