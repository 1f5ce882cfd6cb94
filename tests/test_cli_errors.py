"""User mistakes, exit codes and the results-file policy of the ``kbv`` command (issue 15), in-process through
click's CliRunner. No test here starts a worker: where a run must happen, the runner's build and evaluation steps
are replaced by a fake that records a made-up verdict, so the CLI's own logic is what is tested."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import kbv.cli as cli
import kbv.eval.runner as runner_mod
from kbv.cli import main
from kbv.problems import builtin_suite_dir, discover
from kbv.records import Record

ROOT = Path(__file__).resolve().parents[1]
RELU = ROOT / "src" / "kbv" / "suites" / "builtin" / "level1" / "5_ReLU.py"
CORRECT = ROOT / "tests" / "candidates" / "correct_torch.py"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def one_error_line(result) -> str:
    """The run ended with exit 2 and exactly one line ``Error: ...`` and no traceback; returns that line."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


def fake_record(pair, verdict: str = "correct", **extra) -> Record:
    p = pair.problem
    return Record(problem=p.key, level=p.level, problem_id=p.problem_id, problem_sha256=p.source_sha256,
                  candidate=str(pair.candidate.path), candidate_sha256=pair.candidate.sha256,
                  sample=pair.candidate.sample, verdict=verdict, standard_verdict=verdict, stage="done",
                  env={"device_kind": "cpu"}, **extra)


@pytest.fixture
def fake_run(monkeypatch):
    """The runner without workers: builds return nothing, each pair gets the verdict ``verdicts`` names (by
    candidate file name; default correct). Returns the list of pairs evaluated."""
    evaluated: list = []
    verdicts: dict[str, str] = {}
    monkeypatch.setattr(runner_mod, "build_candidates", lambda todo, *a, **k: {})
    monkeypatch.setattr(runner_mod.sandbox_plan, "plan", lambda mode, device="cpu": {"requested": True})

    def evaluate(problem, candidate, options, device, gpu, compiled, name, gate=None):
        from kbv.problems.candidates import Pair

        pair = Pair(problem, candidate)
        evaluated.append(pair)
        return fake_record(pair, verdicts.get(candidate.path.name, "correct"))

    monkeypatch.setattr(runner_mod, "evaluate_shapes", evaluate)
    evaluated_verdicts = evaluated  # the list, with the verdict table attached
    fake_run_state = type("FakeRun", (), {"pairs": evaluated_verdicts, "verdicts": verdicts})
    return fake_run_state


@pytest.fixture
def no_run(monkeypatch):
    """Any attempt to run pairs fails the test: options must be refused before anything runs."""
    def refuse(*a, **k):
        raise AssertionError("run_pairs was called")

    monkeypatch.setattr(cli, "run_pairs", refuse)


# ---------------------------------------------------------------------------------------------------------------
# One line "Error: ...", exit 2


def test_unknown_suite_is_one_error_line(runner, no_run, tmp_path):
    line = one_error_line(runner.invoke(main, ["problems", "nosuchsuite"]))
    assert "nosuchsuite" in line and "builtin" in line  # names the shipped suites
    line = one_error_line(runner.invoke(main, ["eval", "--problems", "nosuchsuite", "--candidates", str(tmp_path),
                                               "--out", str(tmp_path / "r.jsonl")]))
    assert "--problems" in line and "nosuchsuite" in line


def test_problem_without_get_inputs_is_one_error_line(runner, no_run, tmp_path):
    bad = tmp_path / "level1" / "1_NoInputs.py"
    bad.parent.mkdir()
    bad.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n\ndef get_init_inputs():\n    return []\n")
    out = tmp_path / "r.jsonl"
    line = one_error_line(runner.invoke(main, ["eval", "--problem", str(bad), "--candidate", str(CORRECT),
                                               "--out", str(out)]))
    assert "get_inputs" in line and "1_NoInputs.py" in line
    assert not out.exists()


@pytest.mark.parametrize("command", [
    ["eval", "--problem", RELU, "--candidate", CORRECT, "--out", "OUT"],
    ["demo", "--out", "OUT"],
    ["calibrate", "--no-save"],
], ids=["eval", "demo", "calibrate"])
def test_device_cuda_without_a_gpu_is_one_error_line(runner, no_run, monkeypatch, tmp_path, command):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    out = tmp_path / "r.jsonl"
    args = [str(out) if a == "OUT" else str(a) for a in command] + ["--device", "cuda"]
    line = one_error_line(runner.invoke(main, args))
    assert "--device cuda" in line and "no CUDA device" in line and "--device cpu" in line
    assert not out.exists()


@pytest.mark.parametrize("flag, value, names", [
    ("--trials", "0", "--trials"),
    ("--timeout", "-1", "--timeout"),
    ("--build-timeout", "0", "--build-timeout"),
    ("--profile", "nosuchprofile", "--profile"),
    ("--timing-pairs", "0", "--timing-pairs"),
    ("--speedup-bound", "-3", "--speedup-bound"),
    ("--build-workers", "0", "--build-workers"),
    ("--timeout", "inf", "--timeout"),
    ("--timeout", "nan", "--timeout"),
    ("--profile", "", "--profile"),
    ("--threads", "0", "--threads"),
])
def test_bad_options_are_refused_before_anything_runs(runner, no_run, tmp_path, flag, value, names):
    out = tmp_path / "r.jsonl"
    line = one_error_line(runner.invoke(main, ["eval", "--problem", str(RELU), "--candidate", str(CORRECT),
                                               "--out", str(out), "--device", "cpu", flag, value]))
    assert names in line and value in line
    assert not out.exists()  # never recorded as a candidate's runtime_error: nothing was recorded at all


def test_unknown_profile_is_checked_against_the_problems(runner, no_run, tmp_path):
    line = one_error_line(runner.invoke(main, ["eval", "--problem", str(RELU), "--candidate", str(CORRECT),
                                               "--out", str(tmp_path / "r.jsonl"), "--profile", "huge"]))
    assert "small" in line  # the profiles the problem does define
    line = one_error_line(runner.invoke(main, ["demo", "--out", str(tmp_path / "d.jsonl"), "--device", "cpu",
                                               "--profile", "huge"]))
    assert "--profile 'huge'" in line


def test_threads_reach_every_worker_of_both_roles(runner, fake_run, monkeypatch, tmp_path):
    """``--threads`` (the README names it) sets ``EvalOptions.threads``, which every worker's spec carries."""
    from kbv.problems.candidates import Pair

    seen: list = []

    def evaluate(problem, candidate, options, *args, **kwargs):
        seen.append(options.threads)
        return fake_record(Pair(problem, candidate), "correct")

    monkeypatch.setattr(runner_mod, "evaluate_shapes", evaluate)
    result = runner.invoke(main, ["eval", "--problem", str(RELU), "--candidate", str(CORRECT),
                                  "--out", str(tmp_path / "r.jsonl"), "--device", "cpu", "--threads", "2"])
    assert result.exit_code == 0, result.output
    assert seen == [2]


def test_a_profile_the_problem_defines_runs(runner, fake_run, tmp_path):
    out = tmp_path / "r.jsonl"
    result = runner.invoke(main, ["eval", "--problem", str(RELU), "--candidate", str(CORRECT), "--out", str(out),
                                  "--device", "cpu", "--profile", "small"])
    assert result.exit_code == 0, result.output
    assert len(fake_run.pairs) == 1


def test_duplicate_pairs_on_export_name_the_option(runner, tmp_path):
    record = {"schema": "kbv.result/1", "problem": "level1/5_ReLU", "level": 1, "problem_id": 5,
              "problem_sha256": "0" * 64, "candidate": "a.py", "candidate_sha256": "1" * 64, "sample": 0,
              "verdict": "correct", "standard_verdict": "correct", "speedup": {}, "timing_ms": {}}
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps(record) + "\n" + json.dumps({**record, "candidate_sha256": "2" * 64}) + "\n")
    out = tmp_path / "eval_results.json"
    line = one_error_line(runner.invoke(main, ["export-kernelbench", str(results), "--level", "1", "--out", str(out)]))
    assert "--on-duplicate last" in line and "more than once" in line
    assert not out.exists()
    ok = runner.invoke(main, ["export-kernelbench", str(results), "--level", "1", "--out", str(out),
                              "--on-duplicate", "last"])
    assert ok.exit_code == 0, ok.output
    assert out.exists()


# ---------------------------------------------------------------------------------------------------------------
# Batches: a malformed problem, no matching candidate


def _suite_with_a_bad_problem(tmp_path: Path) -> tuple[Path, Path]:
    suite = tmp_path / "suite"
    (suite / "level1").mkdir(parents=True)
    shutil.copy(RELU, suite / "level1" / "5_ReLU.py")
    (suite / "level1" / "7_Broken.py").write_text("class Model:\n    pass\n")  # no get_inputs, no get_init_inputs
    candidates = tmp_path / "candidates"
    candidates.mkdir()
    shutil.copy(CORRECT, candidates / "level_1_problem_5_sample_0_kernel.py")
    shutil.copy(CORRECT, candidates / "level_1_problem_7_sample_0_kernel.py")
    return suite, candidates


def test_a_malformed_problem_in_a_folder_is_skipped_with_its_reason(runner, fake_run, tmp_path):
    suite, candidates = _suite_with_a_bad_problem(tmp_path)
    out = tmp_path / "r.jsonl"
    result = runner.invoke(main, ["eval", "--problems", str(suite), "--candidates", str(candidates),
                                  "--out", str(out), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert re.search(r"Warning: skipped problem .*7_Broken\.py: .*missing get_init_inputs, get_inputs",
                     result.stderr), result.stderr
    assert [p.problem.key for p in fake_run.pairs] == ["level1/5_ReLU"]  # the rest of the batch ran
    listing = runner.invoke(main, ["problems", str(suite)])
    assert listing.exit_code == 0 and "level1/5_ReLU" in listing.stdout and "7_Broken" in listing.stderr


def test_no_candidate_matching_any_problem_is_an_error_naming_the_files(runner, no_run, tmp_path):
    candidates = tmp_path / "candidates"
    candidates.mkdir()
    (candidates / "my_relu.py").write_text(CORRECT.read_text())
    (candidates / "level_9_problem_99_sample_0_kernel.py").write_text(CORRECT.read_text())
    line = one_error_line(runner.invoke(main, ["eval", "--problems", "builtin", "--candidates", str(candidates),
                                               "--out", str(tmp_path / "r.jsonl")]))
    assert "my_relu.py" in line and "level_9_problem_99_sample_0_kernel.py" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no .py files" in one_error_line(runner.invoke(
        main, ["eval", "--problems", "builtin", "--candidates", str(empty), "--out", str(tmp_path / "r.jsonl")]))


def test_eval_problems_accepts_a_suite_name(runner, fake_run, tmp_path):
    candidates = tmp_path / "candidates"
    candidates.mkdir()
    shutil.copy(CORRECT, candidates / "level_1_problem_5_sample_0_kernel.py")
    result = runner.invoke(main, ["eval", "--problems", "builtin", "--candidates", str(candidates),
                                  "--out", str(tmp_path / "r.jsonl"), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert [p.problem.key for p in fake_run.pairs] == ["level1/5_ReLU"]


# ---------------------------------------------------------------------------------------------------------------
# kbv report on files with nothing (or not everything) in them


def _record_line(**kw) -> str:
    data = {"schema": "kbv.result/1", "problem": "level1/5_ReLU", "level": 1, "problem_id": 5,
            "problem_sha256": "0" * 64, "candidate": "a.py", "candidate_sha256": "1" * 64, "sample": 0,
            "verdict": "correct", "standard_verdict": "correct", "speedup": {}, "timing_ms": {}, **kw}
    return json.dumps(data)


@pytest.mark.parametrize("content, warnings", [
    ("", 0),
    ("this is not json\n{\"also\": \"not a record\"}\n", 2),
    ("\x00\xff\xfe binary", 1),
], ids=["empty", "not-jsonl", "binary"])
def test_report_of_a_file_with_no_records_is_exit_2_with_a_warning_per_skipped_line(runner, tmp_path, content,
                                                                                       warnings):
    path = tmp_path / "r.jsonl"
    path.write_bytes(content.encode("latin-1"))
    result = runner.invoke(main, ["report", str(path)])
    line = one_error_line(result)
    assert "no kbv records" in line and str(path) in line
    assert len(re.findall(r"^Warning: .*r\.jsonl:\d+: skipped", result.stderr, re.MULTILINE)) == warnings


def test_report_warns_on_each_torn_line_and_reads_the_rest(runner, tmp_path):
    path = tmp_path / "r.jsonl"
    whole = _record_line()
    path.write_text(whole + "\n" + whole[: len(whole) // 2] + "\n" + _record_line(problem="level1/6_X") + "\n"
                    + whole[:10])
    result = runner.invoke(main, ["report", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    skipped = re.findall(r"^Warning: .*r\.jsonl:(\d+): skipped: not a JSON line", result.stderr, re.MULTILINE)
    assert skipped == ["2", "4"]
    assert json.loads(result.stdout)["universe"] == ["level1/5_ReLU", "level1/6_X"]


def test_report_suite_accepts_a_suite_name(runner, tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(_record_line() + "\n")
    result = runner.invoke(main, ["report", str(path), "--suite", "builtin", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["universe"]) == len(discover(builtin_suite_dir()))
    assert "--suite" in one_error_line(runner.invoke(main, ["report", str(path), "--suite", "nosuchsuite"]))


# ---------------------------------------------------------------------------------------------------------------
# --fail-on and the results-file policy


@pytest.mark.parametrize("verdict, fail_on, code", [
    ("incorrect", "incorrect", 1),
    ("incorrect", "rejected", 0),
    ("rejected", "rejected", 1),
    ("timeout", "any-failure", 1),
    ("timeout", "incorrect", 0),
    ("correct", "any-failure", 0),
    ("incorrect", None, 0),
])
def test_fail_on_makes_eval_exit_non_zero(runner, fake_run, tmp_path, verdict, fail_on, code):
    fake_run.verdicts[CORRECT.name] = verdict
    args = ["eval", "--problem", str(RELU), "--candidate", str(CORRECT), "--out", str(tmp_path / "r.jsonl"),
            "--device", "cpu"] + (["--fail-on", fail_on] if fail_on else [])
    result = runner.invoke(main, args)
    assert result.exit_code == code, result.output
    if code:
        assert f"--fail-on {fail_on}" in result.stderr and "level1/5_ReLU" in result.stderr


def test_an_existing_out_needs_resume_append_or_overwrite(runner, fake_run, tmp_path):
    out = tmp_path / "r.jsonl"
    base = ["eval", "--problem", str(RELU), "--candidate", str(CORRECT), "--out", str(out), "--device", "cpu"]
    assert runner.invoke(main, base).exit_code == 0
    first = out.read_bytes()
    assert len(first.splitlines()) == 1
    line = one_error_line(runner.invoke(main, base))
    assert "--resume" in line and "--append" in line and "--overwrite" in line
    assert out.read_bytes() == first  # nothing silently appended
    assert runner.invoke(main, base + ["--resume"]).exit_code == 0
    assert out.read_bytes() == first  # already recorded
    assert runner.invoke(main, base + ["--append"]).exit_code == 0
    assert len(out.read_bytes().splitlines()) == 2
    assert runner.invoke(main, base + ["--overwrite"]).exit_code == 0
    assert len(out.read_bytes().splitlines()) == 1
    assert "only one of" in one_error_line(runner.invoke(main, base + ["--append", "--overwrite"]))
    assert len(fake_run.pairs) == 3


def test_library_run_pairs_keeps_appending_by_default_and_can_refuse(fake_run, tmp_path):
    from kbv.eval import EvalOptions
    from kbv.eval.options import OptionsError
    from kbv.problems import load_problem
    from kbv.problems.candidates import Candidate, Pair

    out = tmp_path / "r.jsonl"
    pairs = [Pair(load_problem(RELU), Candidate.from_path(CORRECT))]
    options = EvalOptions(device="cpu")
    runner_mod.run_pairs(pairs, options, out)
    runner_mod.run_pairs(pairs, options, out)
    assert len(out.read_text().splitlines()) == 2
    with pytest.raises(OptionsError, match="--resume"):
        runner_mod.run_pairs(pairs, options, out, existing="error")
    runner_mod.run_pairs(pairs, options, out, existing="overwrite")
    assert len(out.read_text().splitlines()) == 1


def test_demo_never_deletes_a_file_it_did_not_write(runner, fake_run, tmp_path):
    mine = tmp_path / "notes.jsonl"
    mine.write_text("my own notes\n")
    line = one_error_line(runner.invoke(main, ["demo", "--out", str(mine), "--device", "cpu"]))
    assert "not written by kbv demo" in line
    assert mine.read_text() == "my own notes\n"
    foreign = tmp_path / "other.jsonl"
    foreign.write_text(_record_line(candidate="/home/me/kernel.py") + "\n")  # a kbv record, but not the demo's
    one_error_line(runner.invoke(main, ["demo", "--out", str(foreign), "--device", "cpu"]))
    assert foreign.read_text().count("\n") == 1
    out = tmp_path / "demo.jsonl"
    assert runner.invoke(main, ["demo", "--out", str(out), "--device", "cpu"]).exit_code == 0
    n = len(out.read_text().splitlines())
    assert n == len(fake_run.pairs) > 0
    again = runner.invoke(main, ["demo", "--out", str(out), "--device", "cpu"])  # its own file: replaced
    assert again.exit_code == 0, again.output
    assert len(out.read_text().splitlines()) == n


# ---------------------------------------------------------------------------------------------------------------
# Flags consistent across commands; the README documents exit codes


def _all_commands(group: click.Group, prefix: str = "kbv"):
    for name, command in sorted(group.commands.items()):
        yield f"{prefix} {name}", command
        if isinstance(command, click.Group):
            yield from _all_commands(command, f"{prefix} {name}")


def test_every_option_has_help_text():
    missing = [f"{path} {opt.opts[0]}" for path, command in _all_commands(main) for opt in command.params
               if isinstance(opt, click.Option) and not (opt.help or "").strip()]
    assert not missing, missing


def test_every_profile_option_defaults_to_auto():
    profiles = {path: opt.default for path, command in _all_commands(main) for opt in command.params
                if isinstance(opt, click.Option) and opt.name == "profile"}
    assert {"kbv eval", "kbv demo", "kbv roofline", "kbv lint"} <= set(profiles)
    assert {path: d for path, d in profiles.items() if d != "auto"} == {}


def test_readme_documents_every_exit_code():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Exit codes"):]
    section = section[: section.find("\n## ", 5)]
    for code in (cli.EXIT_FAIL_ON, cli.EXIT_USAGE, cli.EXIT_INTERRUPTED, 0):
        assert re.search(rf"^\| *`?{code}`? *\|", section, re.MULTILINE), code
    for option in ("--fail-on", "--resume", "--append", "--overwrite", "--json", "--hardware"):
        assert option in readme, option


def test_readme_names_every_command_that_exits_1_for_a_result():
    """Exit 1 is a result (a flagged problem, an incorrect candidate, --fail-on), never a user's mistake (2)."""
    readme = (ROOT / "README.md").read_text()
    row = re.search(r"^\| *`1` *\|(.*)$", readme, re.MULTILINE).group(1)
    for command in ("--fail-on", "kbv lint", "kbv task check", "kbv verify"):
        assert command in row, command
    row = re.search(r"^\| *`2` *\|(.*)$", readme, re.MULTILINE).group(1)
    for mistake in ("every command", "cannot be written", "--level", "--profile"):
        assert mistake in row, mistake


def test_the_projects_own_scripts_say_what_to_do_with_an_existing_results_file():
    calls = []
    for path in [*(ROOT / "scripts").glob("*.py"), *(ROOT / "benchmarks").glob("*.py")]:
        text = path.read_text()
        for m in re.finditer(r"\brun_pairs\((.*?)\)\n", text, re.DOTALL):
            calls.append((path.name, m.group(1)))
    assert calls, "no script calls run_pairs"
    for name, args in calls:
        assert "resume=" in args or "existing=" in args, (name, args)


@pytest.mark.parametrize("args", [
    ["eval", "--trials", "x", "--out", "r.jsonl"],
    ["nosuchcommand"],
    ["report"],
    ["eval", "--out", "r.jsonl"],
    ["suite", "score"],
    ["eval", "--problem", "missing.py", "--candidate", "missing.py", "--out", "r.jsonl"],
], ids=["bad-int", "command", "missing-argument", "missing-pair", "subgroup", "missing-file"])
def test_click_usage_errors_are_one_line_too(runner, no_run, args):
    line = one_error_line(runner.invoke(main, args))
    assert "--help" in line and "Usage:" not in line


# ---------------------------------------------------------------------------------------------------------------
# Every command: a user's mistake is exit 2 with one line, checked before anything runs (lint, trace, suite,
# import-atrex, task, agent, export/import, output paths)


@pytest.fixture
def no_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.fixture
def no_lint(monkeypatch):
    """``kbv lint`` must refuse its options before it screens any problem."""
    import kbv.cli.lint as lint_cli

    def refuse(*a, **k):
        raise AssertionError("lint was called")

    monkeypatch.setattr(lint_cli, "lint", refuse)


@pytest.mark.parametrize("args, names", [
    (["lint", "nosuchsuite"], "nosuchsuite"),
    (["lint", str(RELU), "--profile", "nosuchprofile"], "--profile 'nosuchprofile'"),
    (["lint", str(RELU), "--timeout", "-1"], "--timeout"),
    (["lint", str(RELU), "--timeout", "inf"], "--timeout"),
    (["lint", str(RELU), "--device", "cuda"], "--device cuda"),
], ids=["suite", "profile", "timeout", "timeout-inf", "device"])
def test_lint_refuses_bad_options_before_screening_with_exit_2(runner, no_lint, no_gpu, args, names):
    """exit 1 is lint's "a problem is flagged": a user's mistake must not read as one, nor become error entries."""
    assert names in one_error_line(runner.invoke(main, args))


def test_trace_suite_and_atrex_mistakes_are_exit_2(runner, no_gpu, tmp_path):
    out = str(tmp_path / "t.json")
    assert "neither a recipe" in one_error_line(runner.invoke(main, ["trace", "nosuchrecipe", "--out", out]))
    assert "--device cuda" in one_error_line(runner.invoke(main, ["trace", "llama3_8b", "--device", "cuda",
                                                                  "--out", out]))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("not json\n")
    assert "not JSON" in one_error_line(runner.invoke(main, ["suite", "build", str(garbage),
                                                             "--out", str(tmp_path / "s")]))
    assert "weights.json" in one_error_line(runner.invoke(main, ["suite", "score", str(garbage),
                                                                 "--suite", str(tmp_path)]))
    assert "Atrex" in one_error_line(runner.invoke(main, ["import-atrex", str(tmp_path), "--out",
                                                          str(tmp_path / "a")]))


def test_a_bare_click_error_from_any_command_is_exit_2(runner, monkeypatch):
    """The group's safety net: a command raising click's own ClickException (exit 1) still exits 2."""
    import kbv.cli.lint as lint_cli

    def fail(*a, **k):
        raise click.ClickException("something the user got wrong")

    monkeypatch.setattr(lint_cli, "collect", fail)
    assert one_error_line(runner.invoke(main, ["lint", str(RELU)])) == "Error: something the user got wrong"


def _task(runner, tmp_path: Path) -> Path:
    folder = tmp_path / "task"
    result = runner.invoke(main, ["task", "export", "builtin:level1/5_ReLU", "--out", str(folder)])
    assert result.exit_code == 0, result.output
    shutil.copy(CORRECT, folder / "candidate.py")
    return folder


@pytest.mark.parametrize("flag, value, names", [
    ("--device", "cuda", "--device cuda"),
    ("--profile", "nosuchprofile", "--profile 'nosuchprofile'"),
    ("--trials", "0", "--trials"),
    ("--timeout", "-1", "--timeout"),
])
def test_task_check_score_and_agent_run_refuse_bad_options_before_evaluating(runner, no_gpu, monkeypatch, tmp_path,
                                                                              flag, value, names):
    """Never a task's runtime_error record (an unknown profile was one), never a traceback (--device cuda was)."""
    import kbv.agent.loop as loop
    import kbv.agent.task as task_mod

    def refuse(*a, **k):
        raise AssertionError("an evaluation started")

    monkeypatch.setattr(task_mod, "check_task", refuse)
    monkeypatch.setattr(task_mod, "score_tasks", refuse)
    monkeypatch.setattr(loop.Agent, "run", refuse)
    folder = _task(runner, tmp_path)
    for args in (["task", "check", str(folder)], ["task", "score", str(folder)],
                 ["agent", "run", "--problem", str(RELU), "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                  "--out", str(tmp_path / "agent")]):
        assert names in one_error_line(runner.invoke(main, args + [flag, value])), args


def test_export_and_import_of_nothing_are_errors_not_empty_files(runner, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    out = tmp_path / "eval_results.json"
    assert "no kbv records" in one_error_line(runner.invoke(main, ["export-kernelbench", str(empty), "--level", "1",
                                                                   "--out", str(out)]))
    results = tmp_path / "r.jsonl"
    results.write_text(_record_line() + "\n")
    line = one_error_line(runner.invoke(main, ["export-kernelbench", str(results), "--level", "3", "--out", str(out)]))
    assert "no records of level 3" in line and "levels there: 1" in line
    assert not out.exists()
    out.write_text("{}")
    line = one_error_line(runner.invoke(main, ["import-kernelbench", str(out), "--level", "1",
                                               "--out", str(tmp_path / "imported.jsonl")]))
    assert "nothing to import" in line and not (tmp_path / "imported.jsonl").exists()


def test_an_output_path_that_cannot_be_written_is_an_error_before_anything_runs(runner, no_run, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad = blocker / "out"  # a folder under a file: never creatable, root or not
    results = tmp_path / "r.jsonl"
    results.write_text(_record_line() + "\n")
    for args, option in [
        (["eval", "--problem", str(RELU), "--candidate", str(CORRECT), "--device", "cpu", "--out", str(bad / "r.jsonl")],
         "--out"),
        (["demo", "--device", "cpu", "--out", str(bad / "d.jsonl")], "--out"),
        (["report", str(results), "--html", str(bad / "r.html")], "--html"),
        (["report", str(results), "--plots", str(bad / "plots")], "--plots"),
        (["export-kernelbench", str(results), "--level", "1", "--out", str(bad / "e.json")], "--out"),
    ]:
        line = one_error_line(runner.invoke(main, args))
        assert f"{option} {bad}" in line and "cannot write there" in line, args
    ok = tmp_path / "new" / "folder" / "r.html"  # a missing folder is made, not an error
    assert runner.invoke(main, ["report", str(results), "--html", str(ok)]).exit_code == 0 and ok.exists()


def test_a_malformed_problem_is_skipped_by_report_suite_import_and_agent_too(runner, tmp_path, capsys):
    suite, _ = _suite_with_a_bad_problem(tmp_path)
    results = tmp_path / "r.jsonl"
    results.write_text(_record_line() + "\n")
    result = runner.invoke(main, ["report", str(results), "--suite", str(suite), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["universe"] == ["level1/5_ReLU"]
    assert re.search(r"Warning: skipped problem .*7_Broken\.py", result.stderr)
    kb = tmp_path / "eval_results.json"
    kb.write_text(json.dumps({"5": [{"sample_id": 0, "compiled": True, "correctness": True, "runtime": 1.0}]}))
    result = runner.invoke(main, ["import-kernelbench", str(kb), "--level", "1", "--problems", str(suite),
                                  "--out", str(tmp_path / "imported.jsonl")])
    assert result.exit_code == 0, result.output
    assert "7_Broken" in result.stderr
    assert json.loads((tmp_path / "imported.jsonl").read_text())["problem"] == "level1/5_ReLU"
    from kbv.agent.cli import _problems

    chosen = _problems(None, str(suite), ())
    assert [p.key for p in chosen] == ["level1/5_ReLU"] and "7_Broken" in capsys.readouterr().err


def test_the_existing_out_error_is_the_only_thing_on_stderr(runner, fake_run, tmp_path):
    """No progress bar (nor its blank lines) before an error raised ahead of the run."""
    out = tmp_path / "r.jsonl"
    out.write_text(_record_line() + "\n")
    result = runner.invoke(main, ["eval", "--problem", str(RELU), "--candidate", str(CORRECT), "--out", str(out),
                                  "--device", "cpu"])
    assert result.stderr == one_error_line(result) + "\n"


def test_python_m_kbv_cli_runs_the_command_as_the_gpu_script_calls_it():
    """scripts/gpu_check.py runs ``python -m kbv.cli trace ...`` and ``... suite build ...``."""
    import subprocess
    import sys

    assert '"-m", "kbv.cli"' in (ROOT / "scripts" / "gpu_check.py").read_text()
    done = subprocess.run([sys.executable, "-m", "kbv.cli", "--version"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "version" in done.stdout


def test_import_kernelbench_into_an_existing_out_needs_append_or_overwrite(runner, tmp_path):
    kb = tmp_path / "eval_results.json"
    kb.write_text(json.dumps({"5": [{"sample_id": 0, "compiled": True, "correctness": True, "runtime": 1.0}]}))
    out = tmp_path / "imported.jsonl"
    args = ["import-kernelbench", str(kb), "--level", "1", "--out", str(out)]
    assert runner.invoke(main, args).exit_code == 0 and len(out.read_text().splitlines()) == 1
    line = one_error_line(runner.invoke(main, args))  # never a silent append
    assert "--append" in line and "--overwrite" in line and len(out.read_text().splitlines()) == 1
    assert runner.invoke(main, args + ["--append"]).exit_code == 0 and len(out.read_text().splitlines()) == 2
    assert runner.invoke(main, args + ["--overwrite"]).exit_code == 0 and len(out.read_text().splitlines()) == 1
    assert "only one of" in one_error_line(runner.invoke(main, args + ["--append", "--overwrite"]))


@pytest.mark.parametrize("value, expected", [
    ("level1/5_ReLU", RELU),  # as `kbv problems builtin` lists it
    ("builtin:level1/5_ReLU.py", RELU),
    ("production:level1/1_Mm_bf16", builtin_suite_dir().parent / "production" / "level1" / "1_Mm_bf16.py"),
    (str(RELU), RELU),  # a file, as ever
])
def test_problem_takes_a_file_or_a_shipped_problems_name(value, expected) -> None:
    assert cli.ProblemFile().convert(value, None, None) == expected


def test_every_problem_option_takes_a_shipped_problems_name() -> None:
    """``kbv eval``, ``kbv roofline`` and ``kbv agent run`` read ``--problem`` alike."""
    from kbv.problems.named import ProblemFile

    for command in (main.commands["eval"], main.commands["roofline"], main.commands["agent"].commands["run"]):
        option = next(p for p in command.params if p.name == "problem")
        assert isinstance(option.type, ProblemFile), command.name


@pytest.mark.parametrize("value", ["level1/99_Nope", "nosuite:level1/5_ReLU", "level1", "evaluator/heldout.json"])
def test_an_unknown_problem_is_one_line_naming_how_to_list_them(runner, value) -> None:
    result = runner.invoke(main, ["eval", "--problem", value, "--candidate", str(CORRECT), "--out", "x.jsonl"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"'{value}' is no problem file, nor a shipped problem (kbv problems SUITE lists them" in result.output


def test_python_callers_may_name_the_cache_folder_as_a_string(tmp_path) -> None:
    """``EvalOptions(cache_dir="...")`` from Python: a path, as from the command line (a str made the build step a
    harness error)."""
    from kbv.eval import EvalOptions

    assert EvalOptions(cache_dir=str(tmp_path)).cache_dir == tmp_path
