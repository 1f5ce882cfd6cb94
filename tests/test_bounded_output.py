"""What a worker sends or writes is bounded. Replies: Worker.call refuses a reply over its byte budget before
allocating it (tests/test_wire.py has the hostile frames). Logs: the parent reads only a log's tail (from its end,
however large or sparse the file), and every file a worker writes, its stdout/stderr log included, is capped
(RLIMIT_FSIZE) at WORKER_FILE_BYTES_MAX."""

from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path

import pytest

from conftest import problem_path
from kbv.eval import EvalOptions
from kbv.eval.runner import run_pairs
from kbv.problems import load_problem
from kbv.problems.candidates import Candidate, Pair
from kbv.protocol import LOG_TAIL_BYTES, WORKER_FILE_BYTES_MAX
from kbv.records import read_records
from kbv.sandbox.launch import Worker, WorkerFailure, WorkerSpec, read_tail

MARKER = "kbv-test: the last line of a huge log"

# The log is the worker's stdout (opened O_APPEND): ftruncate makes it sparse, the marker then lands at its end.
SPARSE_LOG_THEN_RAISE = f'''
import os
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        os.ftruncate(1, {WORKER_FILE_BYTES_MAX * 3 // 4})
        print("{MARKER}", flush=True)
        raise RuntimeError("kbv test: failed after a huge log")
'''

LOG_PAST_THE_CAP = f'''
import os
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        os.ftruncate(1, {WORKER_FILE_BYTES_MAX + 2**30})
        return torch.relu(x)
'''


def test_read_tail_reads_only_the_end_of_a_sparse_file(tmp_path: Path) -> None:
    log = tmp_path / "huge.log"
    with log.open("wb") as f:
        f.truncate(512 * 2**20)  # sparse: no disk, but a whole-file read would allocate 512 MiB
        f.seek(0, os.SEEK_END)
        f.write(MARKER.encode())
    tracemalloc.start()
    try:
        tail = read_tail(log, LOG_TAIL_BYTES)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tail.endswith(MARKER) and len(tail.encode()) == LOG_TAIL_BYTES
    assert peak < 4 * 2**20, peak


def test_read_tail_of_short_and_missing_files(tmp_path: Path) -> None:
    short = tmp_path / "short.log"
    short.write_bytes(b"abc\xff")
    assert read_tail(short, LOG_TAIL_BYTES) == "abc\ufffd"
    assert read_tail(tmp_path / "missing.log", LOG_TAIL_BYTES) == ""


def test_huge_logs_neither_stop_the_run_nor_are_read_whole(tmp_path: Path) -> None:
    """A worker that makes its log sparse and huge, then fails: its record carries the log's tail, and the parent
    never held the log in memory. A worker that grows its log past the cap fails (EFBIG, or SIGXFSZ): its record is
    written, and the run goes on to the next pair."""
    relu = load_problem(problem_path("level1/5_ReLU"))
    (tmp_path / "sparse_log_then_raise.py").write_text(SPARSE_LOG_THEN_RAISE)
    (tmp_path / "log_past_the_cap.py").write_text(LOG_PAST_THE_CAP)
    pairs = [Pair(relu, Candidate.from_path(tmp_path / "log_past_the_cap.py")),
             Pair(relu, Candidate.from_path(tmp_path / "sparse_log_then_raise.py"))]
    out = tmp_path / "r.jsonl"
    tracemalloc.start()
    try:
        summary = run_pairs(pairs, EvalOptions(device="cpu", timeout=30.0, build_timeout=30.0), out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    records = {Path(r["candidate"]).name: r for r in read_records(out)}
    assert summary.evaluated == 2 and set(records) == {"log_past_the_cap.py", "sparse_log_then_raise.py"}

    capped = records["log_past_the_cap.py"]
    assert capped["verdict"] == "runtime_error", capped["verdict"]
    # Python ignores SIGXFSZ, so the write fails with EFBIG; a worker that restores the signal dies of it instead
    assert any(s in capped["error"]["message"] for s in ("File too large", "SIGXFSZ")), capped["error"]

    sparse = records["sparse_log_then_raise.py"]
    assert sparse["verdict"] == "runtime_error"
    assert MARKER in sparse["error"]["log_tail"]
    assert "failed after a huge log" in sparse["error"]["message"]
    assert peak < 256 * 2**20, f"the parent held {peak} bytes at once while reading a huge log"


def test_worker_call_refuses_a_reply_over_its_budget(tmp_path: Path) -> None:
    """The reference's set-up reply carries its weights: within the default budget it arrives; with a budget one
    byte short of them the call fails as a protocol error, and the worker is gone."""
    problem = load_problem(problem_path("level1/11_Conv2d"))
    spec = WorkerSpec(role="reference", device="cpu", problem_path=str(problem.path), profile="small",
                      precision="fp32", mode=problem.mode, work_dir=tmp_path / "work", log_path=tmp_path / "ref.log")
    with Worker(spec, time.monotonic() + 60) as worker:
        state = worker.call({"cmd": "setup", "init_seed": 1}, time.monotonic() + 60)["state"]
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    assert nbytes > 0
    with Worker(spec, time.monotonic() + 60) as worker:
        with pytest.raises(WorkerFailure) as failure:
            worker.call({"cmd": "setup", "init_seed": 1}, time.monotonic() + 60, max_bytes=nbytes - 1)
        assert failure.value.kind == "protocol" and "budget" in failure.value.message
        assert worker.pid is not None and not worker._proc.is_alive()


def _file_size_limit(pid: int) -> str:
    """The 'Max file size' soft limit of a process, as the parent reads it from /proc."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max file size"):
            return line.split()[3]
    raise AssertionError("no file size limit line")


def test_only_a_candidates_worker_is_capped(tmp_path: Path) -> None:
    """The cap bounds what a candidate's worker can write; the reference's worker (trusted code) hands the
    reference's state over in memfds, which RLIMIT_FSIZE would bound too (a 4 GiB weight of KernelBench's
    level3/2_ShallowWideMLP failed with EFBIG on the H200)."""
    from kbv.sandbox import observe

    problem = load_problem(problem_path("level1/5_ReLU"))
    limits = {}
    for role in ("reference", "candidate"):
        spec = WorkerSpec(role=role, device="cpu", problem_path=str(problem.path), profile="small", precision="fp32",
                          mode=problem.mode, work_dir=tmp_path / role, log_path=tmp_path / f"{role}.log",
                          candidate_path=str(problem.path) if role == "candidate" else None)
        with Worker(spec, time.monotonic() + 60) as worker:
            limits[role] = {_file_size_limit(p) for p in observe.tree(worker.pid)}
    assert limits["candidate"] == {str(WORKER_FILE_BYTES_MAX)}, limits
    assert str(WORKER_FILE_BYTES_MAX) not in limits["reference"], limits
