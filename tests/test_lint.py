"""kbv lint: the problem screen flags weak problems with the expected check (kbv's verified judge deciding), reports
KernelBench-only weaknesses apart, survives broken and hanging problems, and passes the built-in suite (but for the
problems listed in KNOWN_WEAK, with their reasons)."""

from __future__ import annotations

import json
import time

import pytest
import torch
from click.testing import CliRunner

from conftest import ROOT, SUITE
from kbv.cli import main
from kbv.lint import (CHECKS, Finding, LintOptions, collect, lint, lint_problem, problem_facts, result_from_raw,
                      split_findings)
from kbv.worker.screen import screen as screen_raw


def screen(path, device, precision, profile, seeds):
    """The screen in this process, its raw findings sorted as the parent sorts them."""
    from kbv.problems import load_problem

    return result_from_raw(screen_raw(path, problem_facts(load_problem(path)), device, precision, profile, seeds))
from kbv.problems import discover


@pytest.fixture(autouse=True)
def _wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read whole table rows: a wide terminal (kbv's commands follow COLUMNS, else 80)."""
    monkeypatch.setenv("COLUMNS", "200")

FIXTURES = ROOT / "tests" / "problems" / "lint"
LEVEL1 = FIXTURES / "level1"
BUILTIN = discover(SUITE)

# Built-in problems kbv lint flags (reported to the lead; fix the problem, then drop its entry): the checks that
# may appear, and why.
KNOWN_WEAK: dict[str, tuple[set[str], str]] = {
    # problem key -> (checks allowed to hold, why). Empty: the three problems lint once found (batch-mean
    # cross-entropy and KL losses, a conv bias cancelled by training-mode BatchNorm) were fixed in the suite.
}


@pytest.fixture(scope="module")
def builtin_results():
    """Screened in this process, on one thread (as the lint's workers with --jobs 2 on two cores)."""
    options = LintOptions(device="cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {p.key: screen(p.path, "cpu", "fp32", options.resolved_profile("cpu", p), 3) for p in BUILTIN}
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("key", [p.key for p in BUILTIN])
def test_builtin_suite_lints_clean(builtin_results, key: str) -> None:
    result = builtin_results[key]
    assert result.error is None
    if key in KNOWN_WEAK:
        allowed, _ = KNOWN_WEAK[key]
        checks = {f.check for f in result.findings}
        assert checks and checks <= allowed, result.findings
        assert any(f.distribution == "D1" for f in result.findings)
    else:
        assert result.ok, [(f.check, f.distribution, f.detail) for f in result.findings]


def test_builtin_identity_by_design_is_not_flagged(builtin_results) -> None:
    """ReLU's input is its output under D1 and zeros are under D4: the right answer there, not a loophole."""
    relu = builtin_results["level1/5_ReLU"]
    assert relu.ok and not relu.notes


def test_kernelbench_only_weakness_of_builtin_softmax(builtin_results) -> None:
    """Softmax's outputs (~1/1024) are inside allclose(atol=1e-2) of zero: KernelBench's check passes zeros."""
    softmax = builtin_results["level1/7_Softmax"]
    assert softmax.ok
    assert {"zeros", "constant"} <= {s["check"] for s in softmax.standard_only}


# ---------------------------------------------------------------------------------------------------------------
# Fixture problems, through the command (one process per problem, JSON out).


@pytest.fixture(scope="module")
def fixture_run():
    """Five seeds: the minimum of 2**23 uniform fp32 values is exactly 0 about 40% of the time (then zeros is the
    right answer, not a cheat), so five all-zero seeds on every distribution are rare enough."""
    result = CliRunner().invoke(main, ["lint", str(LEVEL1), "--device", "cpu", "--jobs", "2", "--seeds", "5", "--json"],
                                catch_exceptions=False)
    entries = json.loads(result.stdout)
    return result.exit_code, {e["problem"].split("/", 1)[1]: e for e in entries}


def _holds(entry: dict, check: str, subject: str | None = None) -> set[str]:
    """The distributions where a check (on a subject) is a finding."""
    return {f["distribution"] for f in entry["findings"]
            if f["check"] == check and (subject is None or f["subject"] == subject)}


def test_json_lists_every_fixture_and_exit_code_is_1(fixture_run) -> None:
    code, entries = fixture_run
    assert code == 1
    assert set(entries) == {p.stem for p in LEVEL1.glob("*.py")}
    for e in entries.values():
        assert {"problem", "path", "findings", "ok"} <= set(e)
        assert e["ok"] == (not e["findings"] and e["error"] is None)
        assert all(f["check"] in CHECKS for f in e["findings"] + e["notes"])


def test_well_posed_fixture_is_not_flagged(fixture_run) -> None:
    entry = fixture_run[1]["6_Gemm_Gated_GELU"]
    assert entry["ok"] and not entry["notes"] and not entry["standard_only"]


def test_softmax_over_huge_dim_and_frobenius_fool_only_kernelbench(fixture_run) -> None:
    """kbv's scale-relative atol and centred criterion reject zeros and constants here; KernelBench's allclose
    accepts both: kbv lint does not flag them and lists them under standard_only."""
    for name in ("1_Softmax_Huge_Dim", "2_Frobenius_Norm"):
        entry = fixture_run[1][name]
        assert entry["ok"], entry["findings"]
        assert {"zeros", "constant"} <= {s["check"] for s in entry["standard_only"]}, name


def test_min_reduction_over_huge_dim_passes_zeros(fixture_run) -> None:
    entry = fixture_run[1]["3_Min_Reduction_Huge_Dim"]
    assert not entry["ok"]
    assert _holds(entry, "zeros", "output 0") and "D1" in _holds(entry, "wrong_seed")


def test_tiny_scalar_loss_passes_zeros_everywhere(fixture_run) -> None:
    entry = fixture_run[1]["9_MSE_Of_Softmaxes"]
    assert _holds(entry, "zeros", "output 0") == {"D1", "D2", "D3", "D4", "D5"}  # D6's softmaxes differ enough


def test_cancelled_zero_bias_is_ignored_weight(fixture_run) -> None:
    entry = fixture_run[1]["4_Gemm_ZeroBias_Centre"]
    assert _holds(entry, "ignores_weights", "parameter bias") == {"D1", "D2", "D3", "D4", "D5", "D6"}
    assert {f["check"] for f in entry["findings"]} == {"ignores_weights"}  # the weight matters


def test_clamped_away_input_is_ignored_where_it_is_non_negative(fixture_run) -> None:
    entry = fixture_run[1]["5_Add_Clamped"]
    assert _holds(entry, "ignores_inputs", "input 1") == {"D1", "D2", "D3"}  # under D4, min(y, 0) = y matters
    assert not _holds(entry, "ignores_inputs", "input 0")


def test_dropout_in_training_mode_is_stochastic(fixture_run) -> None:
    entry = fixture_run[1]["10_Dropout_Train"]
    assert not entry["ok"] and _holds(entry, "stochastic") == {"D1"}
    for other in ("6_Gemm_Gated_GELU", "4_Gemm_ZeroBias_Centre", "7_Min_Clamp"):
        assert not _holds(fixture_run[1][other], "stochastic"), other


def test_always_zero_output_is_degenerate(fixture_run) -> None:
    entry = fixture_run[1]["7_Min_Clamp"]
    assert _holds(entry, "degenerate", "output 0") == {"D1"}
    assert not _holds(entry, "zeros")  # zeros are the exact answer: reported as degenerate, not as a cheat


def test_raising_problem_gets_error(fixture_run) -> None:
    entry = fixture_run[1]["8_Raises"]
    assert not entry["ok"]
    assert "broken on purpose" in entry["error"]
    assert [f["check"] for f in entry["findings"]] == ["error"]


# ---------------------------------------------------------------------------------------------------------------
# Robustness, notes, the table.


def test_hanging_problem_times_out_with_error() -> None:
    start = time.monotonic()
    result = lint_problem(FIXTURES / "broken" / "1_Hangs.py", LintOptions(device="cpu", timeout=3), "cpu")
    assert time.monotonic() - start < 30
    assert not result.ok and result.error == "timed out after 3 s"


def test_malformed_problem_gets_error_without_running(tmp_path) -> None:
    folder = tmp_path / "level1"
    folder.mkdir()
    (folder / "1_NoInputs.py").write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    (folder / "helpers.py").write_text("")  # not a problem file name: not collected
    assert collect([tmp_path]) == [folder / "1_NoInputs.py"]
    (result,) = lint([tmp_path], LintOptions(device="cpu"))
    assert not result.ok and "missing get_init_inputs, get_inputs" in result.error


def test_notes_hold_only_off_d1_and_strict_flags_them(builtin_results) -> None:
    d1 = Finding("wrong_seed", "D1", "", "inputs")
    d3 = Finding("wrong_seed", "D3", "", "inputs")
    only_d3 = Finding("ignores_inputs", "D3", "", "input 0")
    nonfinite = Finding("degenerate", "D2", "", "output 0")
    assert split_findings([d1, d3, only_d3, nonfinite]) == ([d1, d3, nonfinite], [only_d3])
    # A built-in problem with notes only: under D3 its attention scores are ~1e-6, the softmax uniform to fp32.
    plain = builtin_results["level2/9_BMM_Scale_Softmax"]
    assert plain.ok and plain.notes and {f.distribution for f in plain.notes} == {"D3"}
    run = CliRunner().invoke(main, ["lint", str(SUITE / "level2" / "9_BMM_Scale_Softmax.py"), "--device", "cpu",
                                    "--jobs", "2", "--strict", "--json"], catch_exceptions=False)
    assert run.exit_code == 1
    (strict,) = json.loads(run.stdout)
    assert not strict["ok"] and not strict["notes"] and {f["distribution"] for f in strict["findings"]} == {"D3"}


def test_table_and_exit_codes() -> None:
    runner = CliRunner()
    good = runner.invoke(main, ["lint", str(LEVEL1 / "6_Gemm_Gated_GELU.py"), "--device", "cpu",
                                "--precision", "bf16", "--profile", "default", "--jobs", "2"], catch_exceptions=False)
    assert good.exit_code == 0, good.output
    assert "6_Gemm_Gated_GELU" in good.stdout and "ok" in good.stdout
    bad = runner.invoke(main, ["lint", str(LEVEL1 / "5_Add_Clamped.py"), "--device", "cpu", "--jobs", "2"],
                        catch_exceptions=False)
    assert bad.exit_code == 1
    assert "flagged" in bad.stdout and "ignores_inputs input 1 [D1 D2 D3]" in bad.stdout
    assert runner.invoke(main, ["lint", str(LEVEL1), "--seeds", "1"]).exit_code == 2
