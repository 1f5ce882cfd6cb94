"""``kbv agent run`` (the optimisation agent) and ``kbv task export|check|score`` (the external-agent harness)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kbv.problems.named import ProblemFile


class Fail(click.ClickException):
    """A one-line ``Error: ...`` and exit status 2."""

    exit_code = 2


def _eval_options(device: str, precision: str, timeout: float, build_timeout: float, trials: int, profile: str,
                  timing_pairs: int | None, require_custom: bool, protocol_: str, protect: list[str]):
    """The evaluation options, checked before anything runs (as ``kbv eval``'s): a bad value, or ``--device cuda``
    without a GPU, is one line ``Error: ...`` (exit 2), never an evaluation's ``runtime_error``."""
    from kbv.cli.checks import resolved_device
    from kbv.eval import EvalOptions
    from kbv.eval.options import OptionsError

    options = EvalOptions(device=device, protocol=protocol_, precision=precision, timeout=timeout,
                          build_timeout=build_timeout, trials=trials, profile=profile, timing_pairs=timing_pairs,
                          require_custom_kernels=require_custom, protect=protect)
    try:
        options.validate()
    except OptionsError as exc:
        raise Fail(str(exc)) from None
    resolved_device(device)
    return options


def _check_profile(profile: str, problems: list) -> None:
    """A named ``--profile`` must be one the problems define (``kbv eval``'s rule)."""
    from kbv.cli.checks import check_profile

    check_profile(profile, problems)


def _eval_flags(f):
    from kbv import protocol

    for option in reversed([
        click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
                     help="Where to run: auto (a GPU when torch sees one, else the CPU), cpu or cuda."),
        click.option("--precision", type=click.Choice(list(protocol.PRECISIONS)), default="fp32", show_default=True,
                     help="The precision inputs and weights are cast to (sets the tolerances)."),
        click.option("--timeout", type=float, default=180.0, show_default=True, help="Seconds per stage."),
        click.option("--build-timeout", type=float, default=600.0, show_default=True,
                     help="Seconds for the compile stage (import and extension builds)."),
        click.option("--trials", type=int, default=protocol.DEFAULT_TRIALS_PER_DISTRIBUTION, show_default=True,
                     help="Correctness trials per distribution."),
        click.option("--profile", default="auto", show_default=True,
                     help="Size profile: auto (small on CPU, default sizes on GPU), default, or a name."),
        click.option("--timing-pairs", type=int, default=None, help="Fresh process pairs for timing."),
    ]):
        f = option(f)
    return f


def _problems(problem: Path | None, problems: str | None, only: tuple[str, ...]):
    from kbv.problems import ProblemFormatError, discover, load_problem_in_suite, resolve_suite

    try:
        if problem is not None:
            return [load_problem_in_suite(problem)]
        if problems is None:
            raise Fail("give --problem or --problems")
        skipped: list[tuple[Path, str]] = []
        chosen = discover(resolve_suite(problems), skipped)
    except (FileNotFoundError, ProblemFormatError) as exc:
        raise Fail(str(exc)) from None
    for path, why in skipped:  # a malformed problem of the suite: skipped with its reason, the rest run
        click.echo(f"Warning: skipped problem {path}: {why}", err=True)
    wanted = {w.strip() for o in only for w in o.split(",") if w.strip()}
    if wanted:
        chosen = [p for p in chosen if p.key in wanted or p.path.stem in wanted or p.name in wanted]
        if not chosen:
            raise Fail(f"--only matched no problem of {problems}")
    return chosen


@click.group("agent")
def agent() -> None:
    """The optimisation agent: measure, profile, revise."""


@agent.command("run")
@click.option("--problem", type=ProblemFile(), help="The problem file, or a shipped problem (level1/5_ReLU).")
@click.option("--problems", help="A suite folder or a shipped suite's name.")
@click.option("--only", multiple=True, help="Problems of the suite to run (keys, file stems or names; repeatable).")
@click.option("--base-url", required=True, help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
@click.option("--model", required=True, help="The model name the endpoint serves.")
@click.option("--api", type=click.Choice(["chat", "completions"]), default="chat", show_default=True,
              help="The endpoint's API: chat completions or plain completions.")
@click.option("--api-key-env", default=None, help="Environment variable holding the API key (read, never stored).")
@click.option("--backend", type=click.Choice(["cuda", "triton", "cpp"]), default="triton", show_default=True,
              help="What the kernels are written in.")
@click.option("--max-iters", type=int, default=12, show_default=True, help="At most this many attempts.")
@click.option("--patience", type=int, default=3, show_default=True,
              help="Iterations without an accepted kernel before optimisation dropout.")
@click.option("--dropout", type=click.Choice(["keep-best", "reset"]), default="keep-best", show_default=True,
              help="After a failed attempt: continue from the best kernel so far, or from the start.")
@click.option("--token-budget", type=int, default=None, help="Stop once prompt + completion tokens reach this.")
@click.option("--kb", multiple=True, help="Knowledge-base folder: DIR (reference kernels) or LAYER=DIR "
                                          "(reference, notes, docs); repeatable.")
@click.option("--start", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Start from this kernel (evaluated as iteration 0) instead of the reference.")
@click.option("--target-attainment", type=float, default=None, help="Stop once the best kernel's attainment reaches this.")
@click.option("--require-custom-kernels", is_flag=True, help="Never accept a kernel that falls back to library code.")
@click.option("--ncu", is_flag=True, help="Nsight Compute metrics of each correct kernel as feedback (GPU, ncu on "
                                        "PATH; runs one untimed call outside kbv's sandbox).")
@click.option("--temperature", type=float, default=0.0, show_default=True, help="Sampling temperature.")
@click.option("--max-tokens", type=int, default=None, help="Completion tokens per request.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="The folder for the attempts, their records and the best kernel.")
@click.option("--resume", is_flag=True, help="Continue the run recorded in --out.")
@_eval_flags
def agent_run(problem, problems, only, base_url, model, api, api_key_env, backend, max_iters, patience, dropout,
              token_budget, kb, start, target_attainment, require_custom_kernels, ncu, temperature, max_tokens, out,
              resume, device, precision, timeout, build_timeout, trials, profile, timing_pairs) -> None:
    """Optimise kernels for --problem or the problems of --problems with a model behind --base-url."""
    from kbv.agent.kb import KnowledgeBase, parse_kb_option
    from kbv.agent.loop import Agent, AgentConfig, KbvEvaluator, endpoint_complete
    from kbv.study.client import Endpoint

    chosen = _problems(problem, problems, only)
    _check_profile(profile, chosen)
    if start is not None and len(chosen) > 1:
        raise Fail("--start is one problem's kernel: give one problem (--problem, or --only)")
    try:
        knowledge = KnowledgeBase.default([parse_kb_option(v) for v in kb])
    except (FileNotFoundError, ValueError) as exc:
        raise Fail(str(exc)) from None
    protect = [str(out.resolve())]
    # the loop's evaluations leave the fallback rule to the agent (its decision names the library kernels); the
    # final score applies it as kbv eval --require-custom-kernels does
    loop_opts = _eval_options(device, precision, timeout, build_timeout, trials, profile, timing_pairs,
                              False, "verified", protect)
    final_opts = _eval_options(device, precision, timeout, build_timeout, trials, profile, timing_pairs,
                               require_custom_kernels, "both", protect)
    from kbv import envinfo
    from kbv.agent import ncu as ncu_mod

    resolved = envinfo.resolve_device(device)
    note = ""
    if profile == "auto" and resolved == "cpu":
        note = "(On this CPU the kernel is evaluated at the file's `small` profile, where it has one.)"
    profiler, why = None, "not requested (--ncu)"
    if ncu:
        why = ncu_mod.unavailable(resolved) or ""
        if not why:
            size = None if profile in ("auto", "default") else profile
            profiler = ncu_mod.NcuProfiler(size, precision, timeout)
        else:
            click.echo(f"note: Nsight Compute skipped: {why}", err=True)
    config = AgentConfig(backend=backend, max_iters=max_iters, patience=patience, dropout=dropout,
                         token_budget=token_budget, target_attainment=target_attainment,
                         require_custom_kernels=require_custom_kernels, profile_note=note)
    try:
        config.validate()
    except ValueError as exc:
        raise Fail(str(exc)) from None
    endpoint = Endpoint(base_url=base_url, model=model, api=api, api_key_env=api_key_env)
    runner = Agent(endpoint_complete(endpoint, temperature=temperature, max_tokens=max_tokens),
                   KbvEvaluator(loop_opts), KbvEvaluator(final_opts), knowledge, config, out,
                   endpoint=endpoint.describe(), profiler=profiler, no_profiler_reason=why)
    try:
        summaries = runner.run(chosen, start=start, resume=resume)
    except FileExistsError as exc:
        raise Fail(str(exc)) from None
    for s in summaries:
        best = s.get("best") or {}
        final = s.get("final") or {}
        click.echo(f"{s['problem']}: {s['iterations']} iterations, {s['tokens']['total_tokens']} tokens, "
                   f"stop {s['stop']}, best iteration {best.get('iteration')} speedup {best.get('speedup')}, "
                   f"final {final.get('verdict')}")
    click.echo(f"-> {out / 'audit.jsonl'}")


@agent.command("report")
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Summaries with their per-iteration series, as JSON.")
def agent_report(runs, as_json) -> None:
    """Per problem of each agent run: iterations, tokens, decisions, dropouts, best speedup and attainment, DSL
    adoption, the final score; with --json also the per-iteration series."""
    from kbv.cli.console import make_console
    from kbv.report.text import print_table

    from kbv.agent.audit import run_summaries

    rows = [(str(run), s) for run in runs for s in run_summaries(run)]
    if not rows:
        raise Fail("no agent run lines (kbv.agent/1 audit.jsonl) in " + ", ".join(map(str, runs)))
    if as_json:
        click.echo(json.dumps([{"run": r, **s} for r, s in rows], indent=1, default=str))
        return
    header = ["run", "problem", "iters", "tokens", "accepted", "dropouts", "best speedup", "best attainment",
              "DSL adoption", "final", "stop"]
    table = []

    def fmt(x, spec=".3g"):
        return "-" if x is None else format(x, spec)

    for run, s in rows:
        best, final = s.get("best") or {}, s.get("final") or {}
        table.append([Path(run).name, str(s.get("problem")), str(s.get("iterations")),
                      str((s.get("tokens") or {}).get("total_tokens")), ",".join(map(str, s["accepted_iterations"])),
                      ",".join(map(str, s["dropouts"])), fmt(best.get("speedup")), fmt(best.get("attainment")),
                      fmt(s.get("dsl_adoption"), ".2f"),
                      f"{final.get('verdict')}{' (fallback)' if final.get('fallback') else ''}" if final else "-",
                      str(s.get("stop") or "running")])
    print_table(make_console(), "Agent runs", header, table, right=header[2:4] + header[6:9])


@click.group("task")
def task() -> None:
    """Task folders for external coding agents: export, check (public feedback), score (full protocol)."""


@task.command("export")
@click.argument("problem")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="The task folder to write.")
@click.option("--backend", type=click.Choice(["cuda", "triton", "cpp"]), default="triton", show_default=True,
              help="What the kernels are to be written in.")
@click.option("--require-custom-kernels", is_flag=True,
              help="The task asks for custom kernels (a fallback to PyTorch is rejected).")
def task_export(problem, out, backend, require_custom_kernels) -> None:
    """Write a task folder for PROBLEM (a problem file, or SUITE:KEY such as builtin:level1/5_ReLU)."""
    from kbv.agent.task import export_task
    from kbv.problems import ProblemFormatError, load_problem, resolve_suite

    try:
        if Path(problem).is_file():
            chosen = load_problem(problem)
        else:
            suite, _, key = problem.rpartition(":")
            root = resolve_suite(suite or None)
            path = root / (key if key.endswith(".py") else key + ".py")
            if not path.is_file():
                raise Fail(f"no problem {key} in suite {suite or 'builtin'}")
            chosen = load_problem(path)
        export_task(chosen, out, backend=backend, require_custom=require_custom_kernels)
    except (FileNotFoundError, FileExistsError, ProblemFormatError, ValueError) as exc:
        raise Fail(str(exc)) from None
    click.echo(f"task {chosen.key} -> {out} (run {out / 'check'})")


@task.command("check")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("candidate", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="The public feedback as JSON.")
@_eval_flags
def task_check(folder, candidate, as_json, device, precision, timeout, build_timeout, trials, profile,
               timing_pairs) -> None:
    """Evaluate the folder's candidate.py (or CANDIDATE) and print the public feedback only."""
    from kbv.agent import feedback as fb
    from kbv.agent.loop import evaluation_summary
    from kbv.agent.task import TaskError, check_task, read_task
    from kbv.problems import ProblemFormatError

    from kbv.agent.task import task_problem

    try:
        task_ = read_task(folder)
        options = _eval_options(device, precision, timeout, build_timeout, trials, profile, timing_pairs,
                                bool(task_.get("require_custom_kernels")), "both", [])
        _check_profile(profile, [task_problem(folder)])
        record = check_task(folder, candidate, options)
    except (TaskError, ProblemFormatError, FileNotFoundError) as exc:
        raise Fail(str(exc)) from None
    if as_json:
        click.echo(json.dumps({"feedback": fb.public_feedback(record), **evaluation_summary(record)}, indent=1))
    else:
        click.echo(fb.public_feedback(record))
    sys.exit(0 if record.get("verdict") == "correct" else 1)


@task.command("score")
@click.argument("folders", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--suite", default="builtin", show_default=True, help="The suite the tasks were exported from.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Append the kbv.result/1 records here (readable by kbv report).")
@click.option("--json", "as_json", is_flag=True, help="Print the score as JSON.")
@click.option("--protocol", "protocol_", type=click.Choice(["verified", "standard", "both"]), default="both",
              show_default=True, help="Which baselines to time.")
@_eval_flags
def task_score(folders, suite, out, as_json, protocol_, device, precision, timeout, build_timeout, trials, profile,
               timing_pairs) -> None:
    """Score the final candidate.py of each task folder with the full protocol, held-out shapes included."""
    from kbv.agent.task import TaskError, score_tasks

    from kbv.agent.task import task_problem
    from kbv.problems import ProblemFormatError

    options = _eval_options(device, precision, timeout, build_timeout, trials, profile, timing_pairs, False,
                            protocol_, [])
    try:
        _check_profile(profile, [task_problem(folder) for folder in folders])
    except (TaskError, ProblemFormatError, FileNotFoundError) as exc:
        raise Fail(str(exc)) from None
    try:
        result = score_tasks(list(folders), suite, options, out)
    except (TaskError, FileNotFoundError) as exc:
        raise Fail(str(exc)) from None
    if as_json:
        click.echo(json.dumps(result, indent=1, default=str))
        return
    for r in result["records"]:
        sp = ((r.get("speedup") or {}).get("verified") or {}).get("value")
        shapes = len(r.get("shape_results") or []) or 1
        click.echo(f"{r.get('task')}: {r.get('problem')} {r.get('verdict')} flags={','.join(r.get('flags') or [])} "
                   f"speedup={sp} shapes={shapes}")
    if result["s_agg"] is not None:
        click.echo(f"S_agg (overall): {result['s_agg']['overall']['s_agg']}")
