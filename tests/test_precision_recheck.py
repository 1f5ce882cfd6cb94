"""A trial that fails the tolerance is judged again with the reference's own precision noise allowed for
(``kbv.judge.recheck_with_noise``): the reference, run in strict IEEE float32 on the trial's inputs, shows how far
its judged run (TF32, another cuDNN algorithm) lies from exact. On an H100 the reference failed as its own candidate
without it (level2/5 under D6: TF32 convolutions of another algorithm in each process, then tanh)."""

from __future__ import annotations

import pytest
import torch

from kbv import judge
from kbv.eval import EvalOptions
from kbv.eval.runner import run_pairs
from kbv.problems import load_problem
from kbv.problems.candidates import Candidate, Pair
from kbv.records import read_records


def _reply(*tensors: torch.Tensor) -> dict:
    return {"structure": "single" if len(tensors) == 1 else "tuple", "outputs": [{"tensor": t} for t in tensors]}


def _noisy(x: torch.Tensor, amplitude: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return x + (torch.rand(x.shape, generator=g) * 2 - 1) * amplitude


X = torch.rand(64, 256, generator=torch.Generator().manual_seed(0))


def test_the_references_own_noise_lets_an_honest_kernel_with_the_same_rounding_pass() -> None:
    ref, cand = _noisy(X, 0.02, 1), _noisy(X, 0.02, 2)  # two runs of the reference's rounding, different draws
    first = judge.compare_outputs(_reply(cand), _reply(ref), "fp32")
    assert not first.passed and "outside tolerance" in first.reason
    again = judge.recheck_with_noise(_reply(cand), _reply(ref), _reply(X), "fp32")
    assert again is not None and again.passed, again
    assert again.precision_recheck is not None and again.precision_recheck["passed"] is True
    (noise,) = again.precision_recheck["noise"]
    assert 0.019 < noise[0] <= 0.02 and noise[1] > 0  # the largest difference and the centred error


def test_without_the_allowance_the_same_kernel_fails(monkeypatch) -> None:
    monkeypatch.setattr(judge, "PRECISION_NOISE_FACTOR", 0.0)  # the defence off: no allowance
    again = judge.recheck_with_noise(_reply(_noisy(X, 0.02, 2)), _reply(_noisy(X, 0.02, 1)), _reply(X), "fp32")
    assert again is not None and not again.passed


def test_a_kernel_less_precise_than_the_references_run_still_fails() -> None:
    ref, cand = _noisy(X, 0.02, 1), _noisy(X, 0.1, 2)  # five times the reference's own error
    again = judge.recheck_with_noise(_reply(cand), _reply(ref), _reply(X), "fp32")
    assert again is not None and not again.passed
    assert again.precision_recheck is not None and again.precision_recheck["passed"] is False


def test_a_reference_whose_two_runs_agree_allows_nothing_more() -> None:
    cand = _noisy(X, 0.1, 2)
    assert judge.recheck_with_noise(_reply(cand), _reply(X), _reply(X.clone()), "fp32") is None


def test_non_finite_and_structure_are_not_widened() -> None:
    ref = _noisy(X, 0.02, 1)
    cand = _noisy(X, 0.02, 2)
    cand[0, 0] = float("nan")
    again = judge.recheck_with_noise(_reply(cand), _reply(ref), _reply(X), "fp32")
    assert again is not None and not again.passed and "non-finite" in again.reason
    assert judge.recheck_with_noise(_reply(cand, cand), _reply(ref), _reply(X, X), "fp32") is None


# The same through real workers on the CPU: a reference whose output depends on the TF32 flag the way a TF32
# convolution does (a rounding of its own in each process), judged against itself, and a candidate five times as
# noisy.
PROBLEM = '''
import os
import torch
import torch.nn as nn


def _rounding(x, amplitude):
    g = torch.Generator().manual_seed(os.getpid())  # another algorithm in each process
    return (torch.rand(x.shape, generator=g) * 2 - 1) * amplitude * x.abs().amax().clamp_min(1.0)


class Model(nn.Module):
    AMPLITUDE = 0.02

    def forward(self, x):
        if torch.backends.cudnn.allow_tf32:  # the flag a TF32 convolution reads
            return x + _rounding(x, self.AMPLITUDE)
        return x.clone()


def get_inputs():
    return [torch.rand(64, 256)]


def get_init_inputs():
    return []
'''

CANDIDATES = {  # each file: the problem's code, then its ModelNew
    "honest.py": "ModelNew = Model\n",
    "coarse.py": "class ModelNew(Model):\n    AMPLITUDE = 0.1\n",
}


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("recheck")
    (tmp / "level1").mkdir()
    problem = tmp / "level1" / "1_Rounded.py"
    problem.write_text(PROBLEM)
    pairs = []
    for i, (name, model_new) in enumerate(CANDIDATES.items()):
        path = tmp / name
        path.write_text(PROBLEM + "\n\n" + model_new)
        pairs.append(Pair(load_problem(problem), Candidate.from_path(path, sample=i)))
    out = tmp / "r.jsonl"
    run_pairs(pairs, EvalOptions(device="cpu", protocol="verified", timeout=60.0, timing_pairs=1), out)
    names = list(CANDIDATES)
    return {names[r["sample"]]: r for r in read_records(out)}


def test_the_reference_as_its_own_candidate_is_correct(records) -> None:
    r = records["honest.py"]
    assert r["verdict"] == "correct", (r.get("error"), r["correctness"].get("distributions"))
    seen = [d["precision_recheck"] for d in r["correctness"]["distributions"].values() if "precision_recheck" in d]
    assert seen and all(s["trials"] == s["passed"] > 0 for s in seen)  # it passed only with the allowance
    assert all(0 < s["noise"][0][0] for s in seen)


def test_a_candidate_coarser_than_the_reference_is_incorrect(records) -> None:
    r = records["coarse.py"]
    assert r["verdict"] == "incorrect", r["correctness"].get("distributions")
    seen = [d["precision_recheck"] for d in r["correctness"]["distributions"].values() if "precision_recheck" in d]
    assert seen and all(s["passed"] == 0 for s in seen)


def test_the_strict_run_leaves_the_reference_workers_flags_as_they_were() -> None:
    from kbv.worker import backends

    before = backends.read_flags()
    saved = backends.read_flags()
    backends.apply_strict()
    assert torch.backends.cudnn.allow_tf32 is False and torch.get_float32_matmul_precision() == "highest"
    assert torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction is False
    backends.restore_flags(saved)
    assert backends.read_flags() == before


def test_a_strict_run_that_fails_leaves_the_first_failure_standing() -> None:
    """A third output may not fit beside the kept and received ones (a 6 GiB output): the recheck's own failure
    is recorded and the trial stays failed, never a reference error."""
    from types import SimpleNamespace

    from kbv.worker import backends
    from kbv.worker.session import Session

    def no_memory(seed: int, distribution: str) -> list:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")

    worker = SimpleNamespace(_inputs=no_memory, model=None, _sync=lambda: None)
    before = backends.read_flags()
    first = judge.compare_outputs(_reply(_noisy(X, 0.1, 2)), _reply(X), "fp32")
    result = Session._recheck(worker, (1, "D1"), _reply(_noisy(X, 0.1, 2)), _reply(X), "fp32", first)  # type: ignore[arg-type]
    assert result is first and not result.passed
    assert result.precision_recheck == {"error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB"}
    assert backends.read_flags() == before  # the flags put back all the same
