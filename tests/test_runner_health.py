"""After a CUDA fault the runner checks the GPU, retires one that fails, and accounts for every pair even when no
GPU is left (the device pool logic, driven on the CPU with a fake evaluation and a fake health check)."""

from __future__ import annotations

from pathlib import Path

from conftest import problem_path
from kbv.eval import runner
from kbv.problems.candidates import Candidate, Pair
from kbv.eval import EvalOptions
from kbv.problems import load_problem
from kbv.records import read_records
from kbv.sandbox import health

CANDIDATE = Path(__file__).parent / "candidates" / "correct_torch.py"


def test_cuda_fault_words() -> None:
    assert health.looks_like_cuda_fault({"message": "CUDA error: an illegal memory access was encountered"})
    assert health.looks_like_cuda_fault({"message": "worker process killed by SIGSEGV", "kind": "crash"})
    assert not health.looks_like_cuda_fault({"message": "ValueError: shapes do not match", "kind": "exception"})
    assert not health.looks_like_cuda_fault(None)


def _run(tmp_path: Path, monkeypatch, healthy_gpus: set[int], n: int) -> list[dict]:
    problem = load_problem(problem_path("level1/5_ReLU"))
    pairs = [Pair(problem, Candidate.from_path(CANDIDATE, sample=i)) for i in range(n)]
    used: list[int] = []
    checked: list[int] = []

    def fake_eval(problem, candidate, options, device, gpu, compiled, name, gate=None, **started_ahead):
        used.append(gpu)
        rec = runner.not_run(Pair(problem, candidate), name, "placeholder")
        rec.flags = []
        rec.error = {"message": "CUDA error: an illegal memory access was encountered", "kind": "exception"}
        return rec

    def fake_check(gpu: int):
        checked.append(gpu)
        return gpu in healthy_gpus, "fake"

    monkeypatch.setattr(runner.envinfo, "resolve_device", lambda d: "cuda")
    monkeypatch.setattr(runner, "device_slots", lambda d: [0, 1])
    monkeypatch.setattr(runner, "build_candidates", lambda *a, **k: {})
    monkeypatch.setattr(runner, "evaluate_shapes", fake_eval)
    monkeypatch.setattr(runner.health, "check", fake_check)
    out = tmp_path / "r.jsonl"
    runner.run_pairs(pairs, EvalOptions(device="cuda", sandbox="off"), out)
    records = list(read_records(out))
    assert len(records) == n  # every pair accounted for
    return records, used, checked


def test_a_failing_gpu_is_retired_and_the_run_goes_on(tmp_path, monkeypatch) -> None:
    records, used, checked = _run(tmp_path, monkeypatch, {1}, 6)
    assert used.count(0) == 1  # GPU 0 failed its check after its first pair and got no more
    assert used.count(1) == 5
    assert sum("gpu_unhealthy" in r["flags"] for r in records) == 1


def test_when_no_gpu_is_left_the_remaining_pairs_are_recorded_not_run(tmp_path, monkeypatch) -> None:
    records, used, checked = _run(tmp_path, monkeypatch, set(), 5)
    assert sorted(used) == [0, 1]
    not_run = [r for r in records if "no healthy GPU" in (r["error"] or {}).get("message", "")]
    assert len(not_run) == 3 and all(r["verdict"] == "runtime_error" for r in not_run)
