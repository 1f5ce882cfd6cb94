"""Every verdict, from one run over hostile and broken candidates: a crash, a hang or an os._exit costs its own
result and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CANDIDATES, EXAMPLES, problem_path
from kbv.eval import EvalOptions
from kbv.protocol import JUDGED_TIMED_CALLS_PER_PAIR

# candidate file (for level1/5_ReLU) -> (verdict, standard_verdict, error stage or None)
EXPECTED = {
    "correct_torch.py": ("correct", "correct", None),
    "syntax_error.py": ("compile_error", "compile_error", "compile"),
    "no_modelnew.py": ("compile_error", "compile_error", "compile"),
    "import_raises.py": ("compile_error", "compile_error", "compile"),
    "exit_at_import.py": ("compile_error", "compile_error", "compile"),
    "hang_import.py": ("timeout", "timeout", "compile"),
    "init_raises.py": ("runtime_error", "runtime_error", "correctness"),
    "forward_raises.py": ("runtime_error", "runtime_error", "correctness"),
    "segfault.py": ("runtime_error", "runtime_error", "correctness"),
    "os_exit.py": ("runtime_error", "runtime_error", "correctness"),
    "hang_forward.py": ("timeout", "timeout", "correctness"),
    "wrong_shape.py": ("incorrect", "incorrect", None),
    "wrong_dtype.py": ("incorrect", "correct", None),  # KernelBench's allclose does not check dtype
    "not_a_tensor.py": ("incorrect", "incorrect", None),
    "tensor_subclass.py": ("incorrect", "correct", None),
    "nan_output.py": ("incorrect", "incorrect", None),
    "zeros.py": ("incorrect", "incorrect", None),
    "inplace_relu.py": ("rejected", "correct", None),
    "tamper_allclose.py": ("rejected", "correct", None),
    "tamper_timer.py": ("rejected", "correct", None),
    "tamper_tf32.py": ("rejected", "correct", None),
    "background_thread.py": ("rejected", "correct", None),
    "tamper_captured_timer.py": ("rejected", "correct", None),
    "shrink_problem.py": ("incorrect", "correct", None),  # correctness runs on the judge's lent inputs
    "cache_after_warmup.py": ("incorrect", "correct", None),
}
IDENTITY_RELU = EXAMPLES / "common" / "level_1_problem_5_sample_1_kernel.py"


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """These candidates' records from the adversarial corpus (tests/candidates/MANIFEST.json), which evaluates every
    fixture once per session in one batch (tests/test_adversarial.py): file name -> record, for level1/5_ReLU."""
    from test_adversarial import corpus_records

    relu = {Path(r["candidate"]).name: r for r in corpus_records(tmp_path_factory).values()
            if r["problem"] == "level1/5_ReLU"}
    return {name: relu[name] for name in [*EXPECTED, IDENTITY_RELU.name]}


def test_every_pair_has_a_record(records: dict[str, dict]) -> None:
    assert set(records) == set(EXPECTED) | {IDENTITY_RELU.name}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_verdict(records: dict[str, dict], name: str) -> None:
    verdict, standard, stage = EXPECTED[name]
    record = records[name]
    assert record["verdict"] == verdict, record["error"] or record["correctness"]
    assert record["standard_verdict"] == standard
    if stage is None:
        assert record["error"] is None
    else:
        assert record["error"]["stage"] == stage
        assert record["error"]["message"]


def test_crash_is_explained(records: dict[str, dict]) -> None:
    assert "SIGSEGV" in records["segfault.py"]["error"]["message"]
    assert "exited with status 0" in records["os_exit.py"]["error"]["message"]
    assert "time limit" in records["hang_forward.py"]["error"]["message"]
    assert "ModelNew" in records["no_modelnew.py"]["error"]["message"]
    assert "SyntaxError" in records["syntax_error.py"]["error"]["message"]


def test_identity_relu_is_caught_where_inputs_go_negative(records: dict[str, dict]) -> None:
    """D1-D3 are one-signed and non-negative, where ReLU is the identity; D4 (negated), D5 (both signs) and D6
    (both signs, large) are not."""
    record = records[IDENTITY_RELU.name]
    assert record["verdict"] == "incorrect"
    assert record["standard_verdict"] == "correct"
    dists = record["correctness"]["distributions"]
    assert record["correctness"]["failed_distributions"] == ["D4", "D5", "D6"]
    assert [dists[d]["status"] for d in ("D1", "D2", "D3")] == ["passed"] * 3
    assert dists["D1"]["trials"] == 3


def test_wrong_kernels_name_their_failure(records: dict[str, dict]) -> None:
    assert "shape" in records["wrong_shape.py"]["correctness"]["distributions"]["D1"]["reason"]
    assert "dtype" in records["wrong_dtype.py"]["correctness"]["distributions"]["D1"]["reason"]
    assert "not exactly a torch.Tensor" in records["tensor_subclass.py"]["correctness"]["distributions"]["D1"]["reason"]
    assert "non-finite" in records["nan_output.py"]["correctness"]["distributions"]["D1"]["reason"]


def test_correct_record_is_complete(records: dict[str, dict]) -> None:
    record = records["correct_torch.py"]
    assert record["stage"] == "done" and record["flags"] == ["fallback"]  # plain PyTorch: a library fallback
    assert record["fallback"]["library_share"] == 1.0
    for key in ("candidate_standard", "candidate_verified", "reference_standard", "reference_verified"):
        stats = record["timing_ms"][key]
        assert stats["median"] > 0 and stats["n"] >= 10 and stats["p25"] <= stats["median"] <= stats["p75"]
    for baseline in ("standard", "verified"):
        s = record["speedup"][baseline]
        assert s["ci_low"] <= s["value"] <= s["ci_high"]
    seeds = record["seeds"]["correctness"]
    assert all(len(seeds[d]) == 3 for d in ("D1", "D2", "D3", "D4"))
    assert len({s for d in seeds.values() for s in d}) == 18  # fresh seed per trial: 6 distributions x 3
    assert record["memory_bytes"]["candidate_peak"] is not None
    flags = record["env"]["baseline_flags"]["candidate"]
    assert flags["standard"]["float32_matmul_precision"] == "highest"
    assert flags["verified"]["float32_matmul_precision"] == "high"


def test_seeds_differ_between_runs(records: dict[str, dict]) -> None:
    a = records["correct_torch.py"]["seeds"]["correctness"]["D1"]
    b = records["zeros.py"]["seeds"]["correctness"]["D1"]
    assert not set(a) & set(b)


def test_in_place_kernel_is_rejected_for_the_rule_it_breaks(records: dict[str, dict]) -> None:
    record = records["inplace_relu.py"]
    assert {"input_mutated", "output_aliases_input"} <= set(record["flags"])
    use = record["correctness"]["input_use"]
    assert "D4" in use["mutated_inputs"] and "D1" not in use["mutated_inputs"]  # relu_ changes only negatives
    assert use["aliased_outputs"]["D1"] == [[0, 0]]
    assert record["correctness"]["failed_distributions"] == []
    assert "input_mutated" not in records["correct_torch.py"]["flags"]


def test_tampering_is_named(records: dict[str, dict]) -> None:
    assert "torch.allclose" in records["tamper_allclose.py"]["integrity"]["tamper"]
    assert "torch.testing.assert_close" in records["tamper_allclose.py"]["integrity"]["tamper"]
    assert "time.perf_counter_ns" in records["tamper_timer.py"]["integrity"]["tamper"]
    assert any(t.startswith("flag cuda.matmul.allow_tf32") for t in records["tamper_tf32.py"]["integrity"]["tamper"])
    assert "kbv.worker.timer._perf_counter_ns" in records["tamper_captured_timer.py"]["integrity"]["tamper"]
    assert "problem.get_inputs" in records["shrink_problem.py"]["integrity"]["tamper"]
    for name in ("tamper_allclose.py", "tamper_timer.py", "tamper_tf32.py", "tamper_captured_timer.py",
                 "shrink_problem.py"):
        assert "tamper" in records[name]["flags"]
    honest = [r for n, r in records.items() if not n.startswith("tamper_") and n != "shrink_problem.py"]
    assert not any("tamper" in r["flags"] for r in honest)


def test_threads_left_running_are_flagged(records: dict[str, dict]) -> None:
    record = records["background_thread.py"]
    assert "background_threads" in record["flags"]
    growth = record["correctness"]["input_use"]["thread_growth"]
    assert all(after > before for before, after in growth.values())
    assert not any("background_threads" in r["flags"] for n, r in records.items() if n != "background_thread.py")


def test_expanded_output_is_rejected(tmp_path_factory: pytest.TempPathFactory) -> None:
    """tests/problems/level1/1_Repeat_Sum: the expanded view is rejected, the problem's own Model (whose output
    repeats values by copying them) is not; both evaluated in the adversarial corpus."""
    from test_adversarial import corpus_records

    corpus = corpus_records(tmp_path_factory)
    record, honest = corpus["expanded_output"], corpus["reference_itself_repeat_sum"]
    assert record["problem"] == honest["problem"]
    assert record["verdict"] == "rejected" and record["standard_verdict"] == "correct"
    assert "degenerate_output" in record["flags"]
    assert honest["verdict"] == "correct" and "degenerate_output" not in honest["flags"]


def test_speedup_above_the_bound_is_flagged() -> None:
    from kbv.eval import evaluate

    record = evaluate(problem_path("level1/5_ReLU"), CANDIDATES / "correct_torch.py",
                      EvalOptions(device="cpu", timeout=30, speedup_bound=0.01))
    assert "speedup_above_bound" in record.flags
    assert record.integrity["speedup_above_bound"]["bound"] == 0.01
    assert record.verdict == "correct"  # a flag, not a rejection


def test_outputs_cached_across_timed_calls_are_caught(records: dict[str, dict]) -> None:
    record = records["cache_after_warmup.py"]
    assert "timed_output_mismatch" in record["flags"]
    assert record["correctness"]["failed_distributions"] == []  # the correctness stage saw honest outputs
    assert not all(c["passed"] for c in record["correctness"]["timed_rechecks"])
    honest = records["correct_torch.py"]
    checks = honest["correctness"]["timed_rechecks"]
    assert checks and all(c["passed"] for c in checks)  # timed calls of each pair and one burst set, drawn after
    assert [c.get("burst", False) for c in checks] == [False] * JUDGED_TIMED_CALLS_PER_PAIR + [True]
