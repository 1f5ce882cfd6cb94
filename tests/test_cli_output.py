"""Output for people and for scripts (issue 15): the single-pair block, ``--json``, per-candidate rows in JSON and
CSV, the terminal width, the one-line isolation warning, placeholder rooflines, the TF32 step of the
decomposition, speedups that do not count, Triton interpreter timings, two candidates for one problem, and
``kbv roofline --hardware``. In-process (CliRunner); no test starts a worker."""

from __future__ import annotations

import csv
import io
import json
import re
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

import kbv.eval.runner as runner_mod
from kbv.cli import main
from kbv.report.html import render_html
from kbv.report.metrics import compare_runs
from kbv.report.text import NO_TF32_EFFECT, decomposition_rows, mover_lines, record_rows, speedup_cell

from test_cli_errors import CORRECT, RELU, fake_record, fake_run  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def rec(problem: str = "level1/5_ReLU", verdict: str = "correct", standard: str | None = None, *,
        candidate: str = "/x/a.py", sha: str = "1", sample: int = 0, device: str = "cpu",
        speedup: tuple[float, float, float] | None = (1.5, 1.4, 1.6),
        standard_speedup: tuple[float, float, float] | None = None, **extra) -> dict:
    def entry(s):
        return {"value": s[0], "ci_low": s[1], "ci_high": s[2]} if s else None

    level = int(re.match(r"level(\d+)/", problem).group(1))
    speedups = {k: v for k, v in (("verified", entry(speedup)), ("standard", entry(standard_speedup or speedup)))
                if v}
    return {"schema": "kbv.result/1", "problem": problem, "level": level, "problem_id": 5, "problem_sha256": "0" * 64,
            "candidate": candidate, "candidate_sha256": sha * 64, "sample": sample, "verdict": verdict,
            "standard_verdict": standard or verdict, "flags": [], "error": None, "speedup": speedups,
            "timing_ms": {}, "env": {"device_kind": device}, "correctness": {}, "memory_bytes": {}, **extra}


def write(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# ---------------------------------------------------------------------------------------------------------------
# kbv eval: one compact block for one pair, tables for a batch, --json


def test_single_pair_eval_prints_one_compact_block(runner, fake_run, tmp_path):
    out = tmp_path / "r.jsonl"
    result = runner.invoke(main, ["eval", "--problem", str(RELU), "--candidate", str(CORRECT), "--out", str(out),
                                  "--device", "cpu"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert re.search(r"^level1/5_ReLU\s+<-\s+correct_torch\.py", text, re.MULTILINE)
    assert "verdict: correct" in text and "flags:" in text
    for table in ("fast_p", "Per problem family", "Correctness and speed", "Memory, roofline"):
        assert table not in text  # no suite-level tables for one pair
    assert len(text.splitlines()) <= 10


def test_single_pair_block_shows_failures_speedups_and_memory():
    from kbv.report.text import pair_block

    r = rec(verdict="incorrect", standard="correct", speedup=(2.0, 1.9, 2.1), standard_speedup=(0.98, 0.9, 1.05),
            memory_bytes={"candidate_peak": 2048, "reference_peak": 1024}, flags=["memory_above_reference"],
            correctness={"failed_distributions": ["D4"],
                         "distributions": {"D4": {"status": "failed", "reason": "max abs error 3.1 at index 7"}}})
    text = "\n".join(pair_block(r))
    assert "verdict: incorrect" in text and "standard protocol: correct" in text
    assert "fails D4: max abs error 3.1 at index 7" in text
    assert "speedup verified: (2.00x [1.90, 2.10]; incorrect, not counted)" in text
    assert "speedup standard: 0.98x [0.90, 1.05] ~1 (interval contains 1.0)" in text
    assert "kernel 2.0 KiB, reference 1.0 KiB" in text and "memory_above_reference" in text


def test_a_batch_keeps_the_tables(runner, fake_run, tmp_path):
    candidates = tmp_path / "c"
    candidates.mkdir()
    for s in (0, 1):
        (candidates / f"level_1_problem_5_sample_{s}_kernel.py").write_text(CORRECT.read_text() + f"# {s}\n")
    result = runner.invoke(main, ["eval", "--problems", "builtin", "--candidates", str(candidates),
                                  "--out", str(tmp_path / "r.jsonl"), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "Results per candidate" in result.stdout and "fast_p" in result.stdout


def test_eval_json_prints_records_on_stdout_and_progress_on_stderr(runner, fake_run, tmp_path):
    out = tmp_path / "r.jsonl"
    result = runner.invoke(main, ["eval", "--problem", str(RELU), "--candidate", str(CORRECT), "--out", str(out),
                                  "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]  # nothing else on stdout
    assert [r["problem"] for r in records] == ["level1/5_ReLU"]
    assert records[0]["candidate_sha256"] == json.loads(out.read_text())["candidate_sha256"]
    assert "1 evaluated" in result.stderr


# ---------------------------------------------------------------------------------------------------------------
# kbv report: per-candidate rows, width, two candidates for one problem


def test_report_json_and_csv_have_per_candidate_rows(runner, tmp_path):
    path = write(tmp_path / "r.jsonl", rec(), rec("level1/6_Y", "incorrect", sha="2"))
    data = json.loads(runner.invoke(main, ["report", str(path), "--format", "json"]).stdout)
    rows = {r["problem"]: r for r in data["candidates"]}
    assert rows["level1/5_ReLU"]["speedup_verified"] == 1.5 and rows["level1/5_ReLU"]["counted_verified"] is True
    assert rows["level1/6_Y"]["verdict"] == "incorrect" and rows["level1/6_Y"]["counted_verified"] is False
    assert rows["level1/5_ReLU"]["speedup_verified_ci_low"] == 1.4
    table = list(csv.DictReader(io.StringIO(runner.invoke(main, ["report", str(path), "--format", "csv"]).stdout)))
    cands = [r for r in table if r["kind"] == "candidate"]
    assert sorted(r["problem"] for r in cands) == ["level1/5_ReLU", "level1/6_Y"]
    assert {r["kind"] for r in table} >= {"level", "family", "candidate"}
    assert next(r for r in cands if r["problem"] == "level1/6_Y")["counted_verified"] == "False"


@pytest.mark.parametrize("columns", [60, 100, 240])
def test_report_respects_the_terminal_width_and_never_cuts_a_number(runner, tmp_path, columns):
    path = write(tmp_path / "r.jsonl", rec(speedup=(12.345, 11.111, 13.579)), rec("level2/7_Gemm", sha="2"))
    result = runner.invoke(main, ["report", str(path)], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    if columns < 200:
        assert max(len(line) for line in lines) > columns - 25  # uses the width it has, not a fixed one
    for line in lines:  # no table cropped at the edge: every row keeps its right border
        if line.startswith(("│", "┃", "┏", "┡", "└")):
            assert line.rstrip()[-1] in "│┃┓┩┘", line
    flat = " ".join(re.sub(r"[│┃|]", " ", line) for line in lines)
    for number in ("12.35x", "[11.11,", "13.58]"):
        assert number in flat.split(), number  # whole, on one line


def test_two_candidates_for_one_problem_are_kept_apart(runner, tmp_path):
    path = write(tmp_path / "r.jsonl", rec(candidate="/x/fast.py", sha="1", speedup=(3.0, 2.9, 3.1)),
                 rec(verdict="incorrect", candidate="/x/broken.py", sha="2"))
    data = json.loads(runner.invoke(main, ["report", str(path), "--format", "json"]).stdout)
    assert data["runs"] == ["r [fast.py]", "r [broken.py]"]
    overall = {run: next(g for g in data["levels"][run] if g["name"] == "overall") for run in data["runs"]}
    assert overall["r [fast.py]"]["correct_verified"] == 1.0
    assert overall["r [broken.py]"]["correct_verified"] == 0.0  # never merged into one "sample 0"
    table = runner.invoke(main, ["report", str(path), "--per-candidate"], env={"COLUMNS": "200"}).stdout
    assert "fast.py" in table and "broken.py" in table
    # the same candidate recorded twice (its hash unchanged) stays one run
    same = write(tmp_path / "s.jsonl", rec(), rec())
    assert json.loads(runner.invoke(main, ["report", str(same), "--format", "json"]).stdout)["runs"] == ["s"]


# ---------------------------------------------------------------------------------------------------------------
# Speedups that do not count, intervals that contain 1.0, the Triton interpreter


def test_speedups_of_incorrect_kernels_are_marked_as_not_counted():
    cell = speedup_cell(rec(verdict="incorrect"), "verified")
    assert cell.startswith("(") and "incorrect, not counted" in cell
    assert speedup_cell(rec(), "verified") == "1.50x [1.40, 1.60]"
    assert "not counted" not in speedup_cell(rec(verdict="incorrect", standard="correct"), "standard")


def test_an_interval_containing_one_is_shown_as_such():
    assert "interval contains 1.0" in speedup_cell(rec(speedup=(1.03, 0.97, 1.09)), "verified")
    assert "interval contains 1.0" not in speedup_cell(rec(speedup=(1.03, 1.01, 1.09)), "verified")


def test_triton_interpreter_timings_are_labelled(tmp_path):
    by_calls = rec(fallback={"own_calls": {"triton:relu_kernel": 3}})
    assert "Triton interpreter" in speedup_cell(by_calls, "verified")
    source = tmp_path / "k.py"
    source.write_text("import torch\nimport triton\nimport triton.language as tl\n")
    assert "Triton interpreter" in speedup_cell(rec(candidate=str(source)), "verified")
    assert "Triton interpreter" not in speedup_cell(rec(device="cuda", fallback=by_calls["fallback"]), "verified")
    assert "Triton interpreter" not in speedup_cell(rec(candidate=str(CORRECT)), "verified")


# ---------------------------------------------------------------------------------------------------------------
# The decomposition's TF32 step


def _tf32_cell(records: list[dict]) -> str:
    header, rows = decomposition_rows(compare_runs({"r": records}))
    overall = next(row for row in rows if row[0] == "overall")
    return overall[header.index("(a) TF32 baseline")]


def test_tf32_step_reads_no_effect_possible_on_the_cpu_or_without_tf32_work():
    noisy = [rec(speedup=(1.2, 1.1, 1.3), standard_speedup=(1.0, 0.9, 1.1))]  # different figures, same kernels
    assert _tf32_cell(noisy) == NO_TF32_EFFECT  # the CPU
    no_matmul = [rec(device="cuda", speedup=(1.2, 1.1, 1.3), standard_speedup=(1.0, 0.9, 1.1),
                     roofline={"flops": {"fp32": 1e6}})]
    assert _tf32_cell(no_matmul) == NO_TF32_EFFECT
    matmul = [rec(device="cuda", speedup=(1.2, 1.1, 1.3), standard_speedup=(1.0, 0.9, 1.1),
                  roofline={"flops": {"tf32": 1e9}})]
    assert _tf32_cell(matmul).startswith("+0.20x")
    comparison = compare_runs({"r": noisy})
    lines = mover_lines(comparison.decomposition["r"][-1], comparison.records["r"])
    assert any(NO_TF32_EFFECT in line for line in lines) and not any("1.00x -> 1.20x" in line for line in lines)
    html = render_html(comparison)
    assert NO_TF32_EFFECT in html


def test_tf32_movers_whose_intervals_contain_one_say_so():
    both_noise = rec(device="cuda", speedup=(1.02, 0.95, 1.08), standard_speedup=(0.99, 0.9, 1.1),
                     roofline={"flops": {"tf32": 1e9}})
    comparison = compare_runs({"r": [both_noise]})
    line = next(x for x in mover_lines(comparison.decomposition["r"][-1], comparison.records["r"])
                if x.startswith("(a)"))
    assert "both intervals contain 1.0" in line


# ---------------------------------------------------------------------------------------------------------------
# Placeholder rooflines, attainment above 1


def _roof(attainment: float, source: str) -> dict:
    return {"roofline": {"attainment": {"candidate": attainment}, "ceilings": {"name": "cpu", "source": source},
                         "intensity": 0.5, "regime": "memory", "flops": {"fp32": 1e6}}}


def test_placeholder_ceilings_and_attainment_above_one_are_marked_in_tables_html_and_plots(tmp_path):
    records = [rec(**_roof(0.4, "placeholder")), rec("level1/6_Y", sha="2", **_roof(1.7, "placeholder"))]
    comparison = compare_runs({"r": records})
    header, rows = record_rows(records)
    cells = [row[header.index("attainment")] for row in rows]
    # placeholder ceilings bound nothing: above 1 there is not suspect (every honest CPU kernel would be)
    assert cells == ["0.40 (placeholder ceilings)", "1.70 (placeholder ceilings)"]
    real = record_rows([rec(**_roof(1.7, "datasheet"))])
    assert real[1][0][real[0].index("attainment")] == "1.70 suspect (>1)"
    from kbv.report.text import summary_rows

    header, rows = summary_rows(comparison)
    assert all("placeholder" in row[header.index("attainment")] for row in rows)
    html = render_html(comparison)
    assert "placeholder ceilings" in html and "above 1 (suspect)" in html
    measured = compare_runs({"r": [rec(**_roof(0.4, "datasheet"))]})
    assert "placeholder" not in render_html(measured)
    header, rows = record_rows(measured.records["r"])
    assert rows[0][header.index("attainment")] == "0.40"
    pytest.importorskip("matplotlib")
    from kbv.report import plots

    fig = plots.roofline(comparison)
    assert "placeholder ceilings" in fig.axes[0].get_title()
    assert any("suspect" in t.get_text() for t in fig.axes[0].texts)


# ---------------------------------------------------------------------------------------------------------------
# The isolation warning


def test_the_isolation_warning_is_one_line_saying_what_to_do(runner, fake_run, monkeypatch, tmp_path):
    monkeypatch.setattr(runner_mod.sandbox_plan, "plan", lambda mode, device="cpu": {
        "requested": False, "reason": "not root: namespaces and a user switch need root"})
    result = runner.invoke(main, ["eval", "--problem", str(RELU), "--candidate", str(CORRECT),
                                  "--out", str(tmp_path / "r.jsonl"), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "isolation reduced" in line]
    assert lines == ["Warning: candidate isolation reduced (not root: namespaces and a user switch need root): "
                     "run kbv as root (in a container or VM) to isolate candidates, or evaluate only code you "
                     "trust"]
    assert "UserWarning" not in result.output and "warnings.warn" not in result.output
    # the library (no notice callback) warns without a source line
    from kbv.eval import EvalOptions
    from kbv.problems import load_problem
    from kbv.problems.candidates import Candidate, Pair

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner_mod.run_pairs([Pair(load_problem(RELU), Candidate.from_path(CORRECT))], EvalOptions(device="cpu"),
                             tmp_path / "lib.jsonl")
    [w] = [w for w in caught if issubclass(w.category, runner_mod.IsolationWarning)]
    shown = warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line)
    assert len(shown.strip().splitlines()) == 1 and "not root" in shown


# ---------------------------------------------------------------------------------------------------------------
# kbv roofline --hardware


def test_roofline_hardware_and_the_old_device_flag(runner, monkeypatch):
    from kbv import roofline

    counted: dict = {}
    real = roofline.count_isolated

    def once(*args, **kwargs):  # one real count (a subprocess), reused by the later invocations
        key = repr((args, sorted(kwargs.items())))
        if key not in counted:
            counted[key] = real(*args, **kwargs)
        return counted[key]

    monkeypatch.setattr(roofline, "count_isolated", once)
    new = runner.invoke(main, ["roofline", "--problem", str(RELU), "--hardware", "cpu", "--json"])
    assert new.exit_code == 0, new.output
    data = json.loads(new.stdout)
    assert data["ceilings"]["source"] == "placeholder" and data["counted"]["profile"] == "small"  # auto on cpu
    old = runner.invoke(main, ["roofline", "--problem", str(RELU), "--device", "cpu", "--json"])
    assert old.exit_code == 0, old.output
    assert json.loads(old.stdout) == data
    assert "Warning: kbv roofline --device names the hardware: use --hardware cpu" in old.stderr
    both = runner.invoke(main, ["roofline", "--problem", str(RELU), "--device", "cpu", "--hardware", "cpu"])
    assert both.exit_code == 2 and "Error: give --hardware only" in both.output
    unknown = runner.invoke(main, ["roofline", "--problem", str(RELU), "--hardware", "Abacus 9000"])
    assert unknown.exit_code == 2 and "Abacus 9000" in unknown.output and "Traceback" not in unknown.output
    table = runner.invoke(main, ["roofline", "--problem", str(RELU), "--hardware", "cpu"], env={"COLUMNS": "200"})
    assert "placeholder ceilings" in table.stdout


# ---------------------------------------------------------------------------------------------------------------
# Every command's tables, not only the report's: as wide as the terminal, no number cut ("19.4…")

TRACE = ROOT / "tests" / "fixtures" / "traces" / "acme_tinyllama_run42.json"


def assert_fits(text: str, columns: int) -> None:
    lines = text.splitlines()
    assert lines
    too_wide = [line for line in lines if len(line) > columns]
    assert not too_wide, too_wide
    cut = [line for line in lines if "…" in line]  # rich's ellipsis: a cell cropped inside a word or number
    assert not cut, cut
    cropped = [line for line in lines if line.startswith(("│", "┃", "┏", "┡", "└"))
               and line.rstrip()[-1] not in "│┃┓┩┘"]  # a table cut at the terminal's edge loses its right border
    assert not cropped, cropped


@pytest.mark.parametrize("columns", [40, 60])
def test_protocol_tables_fit_the_terminal_and_cut_nothing(runner, columns):
    result = runner.invoke(main, ["protocol"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    assert_fits(result.stdout, columns)
    last_cells = "".join(line.rstrip().rstrip("│").rsplit("│", 1)[-1].strip() for line in result.stdout.splitlines()
                         if line.startswith("│"))
    assert "kbv.protocol.MEMORY_SLACK_BYTES" in last_cells  # a word longer than the room folds, nothing cropped


def test_trace_summary_lint_and_agent_tables_fit_the_terminal_and_cut_nothing(runner, tmp_path):
    from rich.console import Console

    from kbv.cli.lint import print_table as lint_table
    from kbv.cli.trace import print_summary
    from kbv.lint import Finding, LintResult
    from test_report_agent import make_agent_run

    buffer = io.StringIO()
    trace = json.loads(TRACE.read_text())
    print_summary(trace, Console(file=buffer, width=60, highlight=False))
    text = buffer.getvalue()
    assert_fits(text, 60)
    top = max(trace["phases"]["prefill"]["ops"], key=lambda op: op["time_us"])
    assert f"{top['time_us'] / 1e3:.3f}" in text.split()  # the hottest op's milliseconds, whole
    buffer = io.StringIO()
    lint_table([LintResult("level1/18_Matmul_Transposed_A", "/x.py",
                           findings=[Finding("ignores_inputs", "D1", "", "input 1")]),
                LintResult("level1/5_ReLU", "/y.py")], Console(file=buffer, width=60, highlight=False))
    assert_fits(buffer.getvalue(), 60)
    assert "flagged" in buffer.getvalue() and "KernelBench-only" in buffer.getvalue()
    result = runner.invoke(main, ["agent", "report", str(make_agent_run(tmp_path / "run"))], env={"COLUMNS": "60"})
    assert result.exit_code == 0, result.output
    assert_fits(result.stdout, 60)
    assert "2.25" in result.stdout.split()  # the best speedup, whole


def test_suite_build_and_score_tables_fit_the_terminal_and_cut_nothing(runner, tmp_path):
    suite = tmp_path / "s"
    built = runner.invoke(main, ["suite", "build", str(TRACE), "--out", str(suite), "--coverage", "0.95"],
                          env={"COLUMNS": "60"})
    assert built.exit_code == 0, built.output
    assert_fits(built.stdout, 60)
    weights = json.loads((suite / "evaluator" / "weights.json").read_text())
    problems = sorted({key for phase in weights["phases"].values() for key in phase})
    run = write(tmp_path / "run.jsonl", *(rec(key, sha=str(i % 10), roofline={"attainment": {"candidate": 0.5}})
                                         for i, key in enumerate(problems)))
    scored = runner.invoke(main, ["suite", "score", str(run), "--suite", str(suite)], env={"COLUMNS": "60"})
    assert scored.exit_code == 0, scored.output
    assert_fits(scored.stdout, 60)
    assert "S_agg" in scored.stdout
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    nothing = runner.invoke(main, ["suite", "score", str(empty), "--suite", str(suite)])
    assert nothing.exit_code == 2 and "Error: no kbv records in" in nothing.output  # not an S_agg of 0


def test_incorrect_kernels_speedups_are_marked_in_the_per_candidate_table_and_the_html():
    records = [rec(), rec("level1/6_Y", "incorrect", sha="2", speedup=(9.0, 8.5, 9.5))]
    header, rows = record_rows(records)
    cells = {row[0]: row[header.index(next(h for h in header if h.startswith("speedup verified")))] for row in rows}
    assert cells["level1/5_ReLU"] == "1.50x [1.40, 1.60]"
    assert cells["level1/6_Y"].startswith("(9.00x") and "not counted" in cells["level1/6_Y"]
    html = render_html(compare_runs({"r": records}))
    assert "(9.00x [8.50, 9.50]; incorrect, not counted)" in html


@pytest.mark.parametrize("columns", [50, 60])
def test_report_with_long_names_folds_them_instead_of_cropping_the_table(runner, tmp_path, columns):
    """A problem and a candidate name that together exceed the width: the names fold, the table keeps its border
    and every number stays whole."""
    path = write(tmp_path / "r.jsonl",
                 rec("level2/3_Matmul_Scale_Residual", candidate="/x/level_2_problem_3_sample_0_kernel.py",
                     speedup=(12.345, 11.111, 13.579)),
                 rec("level1/13_Sum_Reduction", "incorrect", candidate="/x/level_1_problem_13_sample_1_kernel.py",
                     sha="2"))
    result = runner.invoke(main, ["report", str(path)], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    assert_fits(result.stdout, columns)
    flat = " ".join(re.sub(r"[│┃|]", " ", line) for line in result.stdout.splitlines())
    for number in ("12.35x", "[11.11,", "13.58]"):
        assert number in flat.split(), number
