"""The ``kbv`` command: parses flags and calls the library (no evaluation logic lives here).

Exit codes (README, "Exit codes"): 0 done; 1 ``--fail-on`` met (or a failed check such as ``kbv verify``); 2 a user
error (one line ``Error: ...``); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

from kbv.cli import startup

_STARTING = startup.guard()  # Ctrl-C during the imports below: exit 130 quietly (released at the end)

import json
import os
import shlex
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn

from kbv import envinfo, protocol
from kbv.problems.candidates import Candidate, Pair, pair_candidates
from kbv.eval import CompileResult, EvalOptions
from kbv.eval.options import OptionsError
from kbv.problems import (Problem, ProblemFormatError, discover, load_problem, load_problem_in_suite, resolve_suite,
                          shipped_suites)
from kbv.problems.named import ProblemFile
from kbv.records import Record, read_records
from kbv.report.metrics import compare_runs
from kbv.report.text import csv_report, json_report, markdown_report, pair_block, print_report, print_table
from kbv.eval.runner import Interrupted, Progress, run_pairs

EXIT_FAIL_ON = 1  # --fail-on met
EXIT_INTERRUPTED = startup.EXIT_INTERRUPTED  # Ctrl-C (128 + SIGINT)
FAIL_ON = {
    "incorrect": lambda r: r.get("verdict") == "incorrect",
    "rejected": lambda r: r.get("verdict") == "rejected",
    "any-failure": lambda r: r.get("verdict") != "correct",
}


from kbv.cli.console import make_console  # noqa: E402
from kbv.cli.checks import EXIT_USAGE, UserError, check_profile, resolved_device  # noqa: E402, F401  (kbv.cli's names)


console = make_console()  # kept for modules that import it; commands make their own (COLUMNS is read then)


def _warn(line: str) -> None:
    click.echo(f"Warning: {line.removeprefix('kbv: ')}", err=True)


class OneLineUsageError(click.UsageError):
    """click's usage error, shown as one line ``Error: ...`` (naming ``--help``) instead of a usage block."""

    def show(self, file: Any = None) -> None:
        where = f" (see {self.ctx.command_path} --help)" if self.ctx is not None else ""
        click.echo(f"Error: {self.format_message()}{where}", err=True)


def _one_line(exc: click.UsageError) -> OneLineUsageError:
    return exc if isinstance(exc, OneLineUsageError) else OneLineUsageError(exc.format_message(), exc.ctx)


class KbvGroup(click.Group):
    """The ``kbv`` group: known user mistakes raised anywhere below become ``Error: ...`` (exit 2), and Ctrl-C
    outside a run exits 130 without a traceback."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["kbv.argv"] = list(args)
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line(exc) from None
        except (OptionsError, ProblemFormatError) as exc:
            raise UserError(str(exc)) from None
        except click.ClickException as exc:  # a command's bare "Error: ..." is a user's mistake too: exit 2, not 1
            if exc.exit_code == 1:
                raise UserError(exc.format_message()) from None
            raise
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(EXIT_INTERRUPTED)


class BarProgress(Progress):
    """A rich progress bar over builds and evaluations."""

    def __init__(self, console: Console) -> None:
        self.bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TextColumn("{task.fields[last]}"), console=console)
        self.started = False

    def start(self, builds: int, evaluations: int) -> None:
        self.bar.start()
        self.started = True
        self.builds = self.bar.add_task("build", total=builds, last="")
        self.evals = self.bar.add_task("evaluate", total=evaluations, last="")

    def built(self, pair: Pair, result: CompileResult) -> None:
        self.bar.update(self.builds, advance=1, last=f"{pair.candidate.path.name}: {'ok' if result.ok else result.verdict}")

    def evaluated(self, record: Record) -> None:
        self.bar.update(self.evals, advance=1, last=f"{record.problem} #{record.sample}: {record.verdict}")

    def headers(self, info: dict[str, Any]) -> None:
        if info.get("error"):
            self.bar.console.print(f"precompiled torch/extension.h not built: {info['error']}")
        else:
            self.bar.console.print(f"precompiled torch/extension.h built for later builds: "
                                   f"{len(info.get('variants', []))} flag sets in {info.get('seconds', 0):.0f} s")

    def stop(self) -> None:
        if self.started:  # rich prints a blank line for each stop, started or not
            self.bar.stop()
            self.started = False


def _options(device: str, protocol_: str, precision: str, timeout: float, build_timeout: float, trials: int,
             profile: str, timing_pairs: int | None, speedup_bound: float, require_custom_kernels: bool = False,
             strict_precision: bool = False, standard_tolerance: str = protocol.DEFAULT_STANDARD_TOLERANCE,
             build_workers: int | None = None, preset: str | None = None, gpu_share: int = 1,
             threads: int | None = None) -> EvalOptions:
    """``EvalOptions`` from the shared flags of ``eval`` and ``demo`` (``--build-workers`` is the runner's),
    validated: a bad option is an ``Error:`` before anything runs, never a candidate's ``runtime_error``."""
    options = EvalOptions(device=device, protocol=protocol_, precision=precision, timeout=timeout,
                          build_timeout=build_timeout, trials=trials, profile=profile, timing_pairs=timing_pairs,
                          speedup_bound=speedup_bound, require_custom_kernels=require_custom_kernels,
                          strict_precision=strict_precision, standard_tolerance=standard_tolerance, preset=preset,
                          gpu_share=gpu_share, threads=threads)
    try:
        options.validate()
    except OptionsError as exc:
        raise UserError(str(exc)) from None
    if build_workers is not None and build_workers < 1:
        raise UserError(f"--build-workers must be at least 1 (got {build_workers})")
    return options


def writable(path: Path, option: str) -> Path:
    """``path`` can be written (its folder is made where missing): else an ``Error:`` before anything runs, not a
    traceback once the work is done. A file that was not there is not left behind."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists()
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        if not existed:
            path.unlink()
    except OSError as exc:
        raise UserError(f"{option} {path}: cannot write there ({exc.strerror or exc})") from None
    return path


def writable_dir(path: Path, option: str) -> Path:
    """A folder files can be written into (made where missing), else an ``Error:`` before anything runs."""
    import tempfile

    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError as exc:
        raise UserError(f"{option} {path}: cannot write there ({exc.strerror or exc})") from None
    return path


def suite_dir(name: str | Path | None, option: str) -> Path:
    try:
        return resolve_suite(name)
    except FileNotFoundError as exc:
        raise UserError(f"{option}: {exc} (shipped: {', '.join(shipped_suites())})") from None


def discover_or_skip(folder: Path, err: Console) -> list[Problem]:
    """The problems of a suite folder; a malformed one is skipped with its reason (the rest still run)."""
    skipped: list[tuple[Path, str]] = []
    found = discover(folder, skipped)
    for path, why in skipped:
        _warn(f"skipped problem {path}: {why}")
    return found


def _eval_flags(f):  # shared flags of `eval` and `demo`
    for option in reversed([
        click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
                     help="Where to evaluate: auto (a GPU when torch sees one, else the CPU), cpu or cuda."),
        click.option("--protocol", "protocol_", type=click.Choice(sorted(protocol.PROTOCOLS)), default="both",
                     show_default=True, help="Which baselines to time (correctness always runs D1-D6)."),
        click.option("--precision", type=click.Choice(list(protocol.PRECISIONS)), default="fp32", show_default=True,
                     help="The precision inputs and weights are cast to (sets the tolerances)."),
        click.option("--timeout", type=float, default=180.0, show_default=True,
                     help="Seconds per stage (correctness, performance)."),
        click.option("--build-timeout", type=float, default=600.0, show_default=True,
                     help="Seconds for the compile stage (import and extension builds)."),
        click.option("--trials", type=int, default=protocol.DEFAULT_TRIALS_PER_DISTRIBUTION, show_default=True,
                     help="Correctness trials per distribution, each with a fresh seed."),
        click.option("--profile", default="auto", show_default=True,
                     help="Size profile: auto (small on CPU, default sizes on GPU), default, or a profile name."),
        click.option("--build-workers", type=int, default=None,
                     help="Parallel builds (default: the number of CPU cores)."),
        click.option("--require-custom-kernels", is_flag=True, default=False,
                     help="A correct kernel flagged fallback or partial_fallback gets the verdict rejected."),
        click.option("--strict-precision", is_flag=True, default=False,
                     help="A correct kernel flagged low_precision (float64 check) gets the verdict rejected."),
        click.option("--speedup-bound", type=float, default=protocol.DEFAULT_SPEEDUP_BOUND, show_default=True,
                     help="Flag speedups above this (speedup_above_bound)."),
        click.option("--timing-pairs", type=int, default=None,
                     help="Fresh (reference, candidate) process pairs for timing (default: 3 on CUDA, 1 on CPU)."),
        click.option("--gpu-share", type=int, default=1, show_default=True,
                     help="Pairs in flight per GPU: their correctness runs share it, timing always has it to itself."),
        click.option("--threads", type=int, default=None,
                     help="Torch threads in every worker of both roles, and on the CPU the CPUs they are pinned to "
                          "(default: 1 on the CPU; on a GPU as many as the worker's pinned CPUs)."),
        click.option("--standard-tolerance", type=click.Choice(sorted(protocol.STANDARD_TOLERANCES)),
                     default=protocol.DEFAULT_STANDARD_TOLERANCE, show_default=True,
                     help="KernelBench's standard check: v0 (allclose 1e-2, v0/v0.1) or current (1e-4 fp32, 1e-2 "
                          "bf16); recorded in env.standard_tolerance."),
        click.option("--preset", type=click.Choice(sorted(protocol.PRESETS)), default=None,
                     help="A named rule set: reward = the verified baseline only, cached reference timings with a "
                          "short re-measure, one timing pair (correctness checks unchanged). It overrides "
                          "--protocol and --timing-pairs."),
    ]):
        f = option(f)
    return f


def _resume_command(ctx: click.Context) -> str:
    argv = ctx.find_root().meta.get("kbv.argv") or sys.argv[1:]
    args = [a for a in argv if a not in ("--resume", "--append", "--overwrite")]
    return shlex.join(["kbv", *args, "--resume"])


def _run(ctx: click.Context, pairs: list[Pair], options: EvalOptions, out: Path, resume: bool,
         build_workers: int | None, existing: str, err: Console, resumable: bool = True) -> None:
    bar = BarProgress(err)
    t0 = time.monotonic()
    try:
        summary = run_pairs(pairs, options, out, resume=resume, progress=bar, existing=existing, notice=_warn,
                            build_workers=build_workers or envinfo.cpu_count())
    except Interrupted as exc:
        bar.stop()
        click.echo(f"Interrupted: {exc.recorded} pairs recorded in {out}, {exc.remaining} not evaluated.", err=True)
        if resumable:
            click.echo(f"Continue with: {_resume_command(ctx)}", err=True)
        sys.stderr.flush()
        sys.stdout.flush()
        if exc.stuck:
            os._exit(EXIT_INTERRUPTED)  # a thread that never returned must not hold the exit
        ctx.exit(EXIT_INTERRUPTED)
    except OptionsError as exc:
        bar.stop()
        raise UserError(str(exc)) from None
    finally:
        bar.stop()
    err.print(f"{summary.evaluated} evaluated, {summary.skipped} already recorded, in "
              f"{time.monotonic() - t0:.0f} s -> {summary.out}")


@click.group(cls=KbvGroup)
@click.version_option(package_name="kbv")
def main() -> None:
    """kbv: is this kernel correct on every input it must handle, and how fast is it, honestly?"""


@main.command("eval")
@click.option("--problem", type=ProblemFile(),
              help="One problem file, or a shipped problem as `kbv problems` lists it (level1/5_ReLU, "
                   "SUITE:level1/...), with --candidate.")
@click.option("--candidate", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="One candidate file defining ModelNew (with --problem).")
@click.option("--problems", help="A suite folder (level*/ subfolders) of problems, or a shipped suite's name.")
@click.option("--candidates", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A folder of candidates named level_<L>_problem_<id>_sample_<s>_kernel.py or like the problems.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The results file (JSONL, one record per pair).")
@click.option("--resume", is_flag=True, help="Skip pairs already recorded in --out.")
@click.option("--append", is_flag=True, help="Add records to an existing --out (pairs already there run again).")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out.")
@click.option("--fail-on", "fail_on", type=click.Choice(list(FAIL_ON)), multiple=True,
              help="Exit 1 when a pair of this run is incorrect, rejected, or anything but correct (any-failure); "
                   "may be repeated.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the records of this run's pairs on stdout (JSON lines; with --resume those already "
                   "recorded too); progress and messages go to stderr.")
@_eval_flags
@click.pass_context
def eval_cmd(ctx, problem, candidate, problems, candidates, out, resume, append, overwrite, fail_on, as_json,
             **flags) -> None:
    """Evaluate one candidate (--problem/--candidate) or a folder of them (--problems/--candidates)."""
    options = _options(**flags)
    err = make_console(stderr=True)
    if sum((resume, append, overwrite)) > 1:
        raise UserError("give only one of --resume, --append and --overwrite")
    if problem and candidate and not (problems or candidates):
        pairs = [Pair(load_problem_in_suite(problem), Candidate.from_path(candidate))]
    elif problems and candidates and not (problem or candidate):
        folder = suite_dir(problems, "--problems")
        found = discover_or_skip(folder, err)
        pairs, unmatched = pair_candidates(found, [candidates])
        if not pairs:
            names = ", ".join(p.name for p in unmatched[:10]) + (f" and {len(unmatched) - 10} more"
                                                                  if len(unmatched) > 10 else "")
            raise UserError(f"no candidate in {candidates} matches a problem of {folder}"
                            + (f" (not matched: {names})" if unmatched else " (no .py files)"))
        for path in unmatched:
            _warn(f"no problem for candidate {path}")
    else:
        raise click.UsageError("give --problem and --candidate, or --problems and --candidates")
    resolved_device(options.device)
    check_profile(options.profile, [p.problem for p in pairs])
    writable(out, "--out")
    existing = "overwrite" if overwrite else "append" if append else "error"
    _run(ctx, pairs, options, out, resume, flags["build_workers"], existing, err)
    keys = {p.key for p in pairs}
    latest: dict[tuple[str, str, int], dict[str, Any]] = {}  # this run's pairs, the last record of each
    for r in read_records(out):
        key = (r.get("problem"), r.get("candidate_sha256"), int(r.get("sample", 0)))
        if key in keys:
            latest[key] = r
    records = list(latest.values())
    if as_json:
        for r in records:
            click.echo(json.dumps(r))
    elif len(pairs) == 1 and records:
        for line in pair_block(records[-1]):
            make_console().print(line, markup=False)
    else:
        print_report(compare_runs({out.stem: list(read_records(out))}), make_console())
    failing = [f"{r['problem']} #{r.get('sample', 0)} ({r.get('verdict')})" for r in records
               if any(FAIL_ON[cond](r) for cond in fail_on)]
    if failing:
        click.echo(f"--fail-on {','.join(fail_on)}: {len(failing)} of {len(keys)} pairs: "
                   + ", ".join(failing[:5]) + (" ..." if len(failing) > 5 else ""), err=True)
        ctx.exit(EXIT_FAIL_ON)


def _written_by_demo(path: Path, examples: Path) -> bool:
    """Whether every line of a file is a kbv record of one of the bundled examples (a file ``kbv demo`` wrote)."""
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    if not lines:
        return False
    for line in lines:
        try:
            data = json.loads(line)
        except ValueError:
            return False
        if not (isinstance(data, dict) and str(data.get("schema", "")).startswith("kbv.result/")
                and str(data.get("candidate", "")).startswith(str(examples))):
            return False
    return True


@main.command()
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("kbv-demo.jsonl"),
              show_default=True, help="The results file; replaced only when an earlier kbv demo wrote it.")
@_eval_flags
@click.pass_context
def demo(ctx, out, **flags) -> None:
    """Evaluate the bundled example candidates on the built-in suite and print the report."""
    options = _options(**flags)
    err = make_console(stderr=True)
    resolved = resolved_device(options.device)
    examples = Path(str(resources.files("kbv") / "examples")).resolve()
    folders = [examples / "common", examples / resolved]
    pairs, _ = pair_candidates(discover(resolve_suite(None)), folders)
    check_profile(options.profile, [p.problem for p in pairs])
    if out.exists() and not _written_by_demo(out, examples):
        raise UserError(f"{out} exists and was not written by kbv demo: give another --out (kbv demo replaces only "
                        "its own results)")
    writable(out, "--out")
    err.print(f"kbv demo: {len(pairs)} example candidates on the built-in suite, device {resolved}")
    _run(ctx, pairs, options, out, False, flags["build_workers"], "overwrite", err, resumable=False)
    print_report(compare_runs({"demo": list(read_records(out))}), make_console())


NOT_WRITTEN_BY_KBV = frozenset({"edited", "forged", "inserted"})  # verification's kinds a report leaves out


def _run_labels(paths: list[Path]) -> dict[str, Path]:
    """A label per results file (its stem) or agent run folder (its name), made unique with primes."""
    labels: dict[str, Path] = {}
    for path in paths:
        label = (path.name or path.resolve().name) if path.is_dir() else path.stem
        while label in labels:
            label = f"{label}'"
        labels[label] = path
    return labels


@main.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "json", "csv"]), default="table",
              show_default=True, help="table (the terminal), markdown, json or csv (json and csv with per-candidate rows).")
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write a self-contained HTML report (tables and plots) here.")
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Also write the plots (PNG and SVG) into this folder.")
@click.option("--suite", help="Count rates over this suite's problems (a folder or a shipped suite's name; missing "
                              "kernels fail); default: problems in any run.")
@click.option("--per-candidate/--no-per-candidate", default=None, help="Per-candidate table (default: one run).")
@click.option("--generations", "generation_files", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="kbv generate records of a run (default: generations.jsonl beside each results file).")
@click.option("--include-failing", is_flag=True,
              help="Count records that fail verification (edited, forged or inserted after kbv wrote them); by "
                   "default they are left out of every figure, with a warning.")
def report(results, fmt, html_out, plots_dir, suite, per_candidate, generation_files, include_failing) -> None:
    """Compare one or more results files (one per model or run) and agent run folders (kbv agent run --out DIR:
    its final.jsonl is the run's results, its audit.jsonl the "Agent runs" section), side by side."""
    from kbv.report.agent import AUDIT_FILE, FINAL_FILE, agent_problems, is_agent_run, load_agent_run
    from kbv.report.metrics import universe_of
    from kbv.verify_cmd import verified_records  # warns on stderr: records failing verification, unauthenticated ones

    if html_out:
        writable(html_out, "--html")
    if plots_dir:
        writable_dir(plots_dir, "--plots")
    labels = _run_labels(list(results))
    files: dict[str, Path] = {}  # label -> results file (an agent run's final.jsonl)
    agent: dict[str, list[dict[str, Any]]] = {}  # label -> per-problem summaries of an agent run
    for label, path in labels.items():
        if not path.is_dir():
            files[label] = path
            continue
        if not is_agent_run(path):
            raise UserError(f"{path} is a folder without {AUDIT_FILE}: give results files or agent run folders "
                            "(kbv agent run --out DIR)")
        agent[label] = load_agent_run(path)
        if not agent[label]:
            raise UserError(f"{path / AUDIT_FILE}: no agent run lines (kbv.agent/1)")
        files[label] = path / FINAL_FILE
    read = {label: sum(1 for _ in read_records(path, warn=_warn)) if path.is_file() else 0
            for label, path in files.items()}
    if not any(read.values()) and not agent:
        raise UserError("no kbv records in " + ", ".join(str(p) for p in labels.values()))
    for label, n in read.items():
        if n:
            continue
        if label in agent:  # kept: the problems it attempted count as failed for it
            _warn(f"{labels[label]}: no final kernels ({FINAL_FILE}); its problems count as failed")
        else:
            _warn(f"{labels[label]}: no kbv records (left out)")
    runs = {label: list(verified_records(path, warn=_warn)) if read[label] else []
            for label, path in files.items() if read[label] or label in agent}
    if not include_failing:
        for label, records in runs.items():
            kept = [r for r in records if r.get("authenticated") not in NOT_WRITTEN_BY_KBV]
            if len(kept) < len(records):
                _warn(f"{files[label]}: {len(records) - len(kept)} record(s) left out of the figures: edited, forged "
                      f"or inserted after kbv wrote them (kbv verify {shlex.quote(str(files[label]))} lists them; "
                      "--include-failing counts them)")
                runs[label] = kept
    from kbv.study.figures import apply_to_comparison, attach_generations, study_universe

    before = list(runs)
    try:  # kbv generate's records: runs labelled by model, generated problems in the universe, generation figures
        runs, generation = attach_generations(files, runs, generation_files)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    renamed = dict(zip(before, runs))  # attach_generations keeps the order
    agent = {renamed.get(label, label): summaries for label, summaries in agent.items()}
    universe = ([p.key for p in discover_or_skip(suite_dir(suite, "--suite"), make_console(stderr=True))] if suite
                else study_universe(runs, generation))
    if agent and not suite:  # a problem an agent attempted without a final kernel is failed, not absent
        universe = sorted(set(universe if universe is not None else universe_of(runs)) | agent_problems(agent))
    comparison = compare_runs(runs, universe)
    apply_to_comparison(comparison, runs, generation)
    comparison.agent = agent
    out = make_console()
    if fmt == "json":
        click.echo(json_report(comparison))
    elif fmt == "markdown":
        click.echo(markdown_report(comparison))
    elif fmt == "csv":
        click.echo(csv_report(comparison), nl=False)
    else:
        print_report(comparison, out, per_candidate)
    if plots_dir:
        from kbv.report.plots import save_plots

        try:
            written = save_plots(comparison, plots_dir)
        except ImportError as exc:
            raise UserError(f"plots need matplotlib ({exc}): pip install 'kbv[report]'") from None
        if fmt == "table":
            for path in written:
                out.print(f"plot: {path}")
    if html_out:
        from kbv.report.html import write_html

        write_html(comparison, html_out)
        if fmt == "table":
            out.print(f"HTML report: {html_out}")


@main.command("export-kernelbench")
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--level", type=int, required=True, help="The KernelBench level to export (eval_results.json is per level).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write eval_results.json.")
@click.option("--protocol", "protocol_", type=click.Choice(["verified", "standard"]), default="verified",
              show_default=True, help="Whose verdict and timings become KernelBench's correctness and runtime.")
@click.option("--pass-at-k", "pass_at_k_out", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write KernelBench's pass_at_k_results.json here.")
@click.option("--on-duplicate", type=click.Choice(["error", "last"]), default="error", show_default=True,
              help="A (problem, sample) recorded more than once: an error, or the last record wins.")
def export_kernelbench(results, level, out, protocol_, pass_at_k_out, on_duplicate) -> None:
    """Write results in KernelBench's eval_results.json layout (one level)."""
    from kbv.report.kernelbench import export_eval_results, export_pass_at_k, write_json

    records = [r for path in results for r in read_records(path, warn=_warn)]
    if not records:
        raise UserError("no kbv records in " + ", ".join(map(str, results)))
    try:
        data = export_eval_results(records, level, protocol_, on_duplicate)
    except ValueError as exc:
        hint = " (give --on-duplicate last to keep the last record of each)" if "more than once" in str(exc) else ""
        raise UserError(f"{exc}{hint}") from None
    if not data:  # an empty eval_results.json would read as a run that attempted nothing
        levels = sorted({r.get("level") for r in records if isinstance(r.get("level"), int)})
        raise UserError(f"no records of level {level} in " + ", ".join(map(str, results))
                        + (f" (levels there: {', '.join(map(str, levels))})" if levels else " (no levels recorded)"))
    writable(out, "--out")
    if pass_at_k_out:
        writable(pass_at_k_out, "--pass-at-k")
    write_json(data, out)
    if pass_at_k_out:
        write_json(export_pass_at_k(records, level, protocol_), pass_at_k_out, indent=2)
    make_console().print(f"{out}")


@main.command("import-kernelbench")
@click.argument("eval_results", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--level", type=int, required=True, help="The KernelBench level the file holds.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The kbv results file to write (JSONL).")
@click.option("--problems", "problems_dir", help="The suite the run was evaluated on (maps ids to problem names).")
@click.option("--source", default=None, help="A name for the imported run (default: the file's path).")
@click.option("--append", is_flag=True, help="Add the imported records to an existing --out.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out.")
def import_kernelbench(eval_results, level, out, problems_dir, source, append, overwrite) -> None:
    """Convert a KernelBench eval_results.json (compiled / correctness / runtime) into kbv records."""
    from kbv.report.kernelbench import import_eval_results, load_eval_results
    from kbv.records import RecordWriter

    if append and overwrite:
        raise UserError("give only one of --append and --overwrite")
    if out.exists() and out.stat().st_size and not (append or overwrite):
        raise UserError(f"{out} already holds records: pass --append to add to it or --overwrite to replace it")

    problems_list = (discover_or_skip(suite_dir(problems_dir, "--problems"), make_console(stderr=True))
                     if problems_dir else None)
    try:
        records = import_eval_results(load_eval_results(eval_results), level, problems_list,
                                      source=source or str(eval_results))
    except ValueError as exc:
        raise UserError(f"{eval_results}: {exc}") from None
    if not records:
        raise UserError(f"{eval_results}: no KernelBench entries (nothing to import)")
    if overwrite and out.exists():
        out.unlink()
    writer = RecordWriter(writable(out, "--out"))
    for data in records:
        writer.append(Record(**{k: v for k, v in data.items()}))
    make_console().print(f"{len(records)} records -> {out}")


@main.command()
@click.argument("suite", required=False)
def problems(suite) -> None:
    """List the shipped suites, or the problems of SUITE (a shipped suite name or a folder)."""
    console = make_console()
    if suite is None:
        for name in shipped_suites():
            found = discover(resolve_suite(name))
            console.print(f"{name}: {len(found)} problems ({resolve_suite(name)})")
        return
    folder = suite_dir(suite, "SUITE")
    header = ["problem", "level", "id", "profiles", "skips", "mode"]
    rows = [[p.key, str(p.level), str(p.problem_id), ", ".join(p.profiles) or "-",
             ", ".join(f"{k}: {v}" for k, v in p.skip.items()) or "-", p.mode]
            for p in discover_or_skip(folder, console)]
    print_table(console, str(suite), header, rows, keep=1)


@main.command("protocol")
def protocol_cmd() -> None:
    """Print the protocol: distributions, tolerances, baselines, verdict precedence and flags."""
    console = make_console()
    print_table(console, "Distributions", ["name", "scale", "shift", "meaning"],
                [[d.name, f"{d.scale:g}", f"{d.shift:g}", d.description] for d in protocol.DISTRIBUTIONS], keep=1)
    print_table(console, "Tolerances (see kbv/protocol.py for the formulas)",
                ["precision", "rtol", "atol_scale", "atol_floor", "centred_rtol", "resolution_factor"],
                [[name, *(f"{v:g}" for v in vars(tol).values())] for name, tol in protocol.TOLERANCES.items()], keep=1)
    print_table(console, "Baselines", ["name", "float32_matmul_precision", "cuda.matmul.fp32_precision",
                                       "cudnn.allow_tf32", "cudnn.conv.fp32_precision", "meaning"],
                [[b.name, b.float32_matmul_precision, b.matmul_fp32_precision, str(b.cudnn_allow_tf32),
                  b.cudnn_conv_fp32_precision, b.description] for b in protocol.BASELINES.values()], keep=1)
    console.print("Verdict precedence: " + " > ".join(protocol.VERDICT_PRECEDENCE))
    print_table(console, "Flags", ["flag", "meaning"], [[name, meaning] for name, meaning in protocol.FLAGS.items()],
                keep=1)


DEFAULT_ROOFLINE_HARDWARE = "H200 SXM"


@main.command("roofline")
@click.option("--problem", type=ProblemFile(), help="One problem file, or a shipped problem (level1/5_ReLU).")
@click.option("--problems", help="A suite folder (level*/ subfolders) of problems, or a shipped suite's name.")
@click.option("--hardware", "hardware_name", default=None,
              help=f"The hardware whose ceilings bound the table: a registry or torch/nvidia-smi name ('NVIDIA H200', "
                   f"'NVIDIA H100 80GB HBM3', 'cpu', ...); default {DEFAULT_ROOFLINE_HARDWARE}.")
@click.option("--device", "device_name", default=None,
              help="Old name of --hardware (a hardware name; still works, with a warning).")
@click.option("--precision", type=click.Choice(list(protocol.PRECISIONS)), default="fp32", show_default=True,
              help="The precision the problem is counted at.")
@click.option("--profile", default="auto", show_default=True,
              help="Size profile: auto (small for the cpu hardware, default sizes for a GPU), default, or a name.")
@click.option("--fp32-matmul", type=click.Choice(["tf32", "ieee"]), default="tf32", show_default=True,
              help="Roof for fp32 matmuls: tf32 (the verified baseline) or ieee (the standard one: the FP32 roof).")
@click.option("--datasheet", is_flag=True, help="Ignore measured ceilings saved by `kbv calibrate`.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (an object for --problem, keyed by file for --problems).")
def roofline_cmd(problem, problems, hardware_name, device_name, precision, profile, fp32_matmul, datasheet,
                 as_json) -> None:
    """Roofline bounds: FLOPs per precision, minimum bytes, intensity, regime and t_roofline on some hardware."""
    from kbv import roofline
    from kbv.roofline import hardware
    from kbv.files import cache_dir as default_cache_dir
    from kbv.problems import resolve_profile

    if bool(problem) == bool(problems):
        raise click.UsageError("give --problem or --problems")
    if device_name is not None:
        if hardware_name is not None:
            raise UserError("give --hardware only (--device is its old name)")
        _warn(f"kbv roofline --device names the hardware: use --hardware {shlex.quote(device_name)}")
        hardware_name = device_name
    hardware_name = hardware_name or DEFAULT_ROOFLINE_HARDWARE
    try:
        ceilings = hardware.ceilings_for(hardware_name, default_cache_dir(), prefer_measured=not datasheet)
    except KeyError as exc:
        raise UserError(str(exc.args[0])) from None
    found = [load_problem(problem)] if problem else discover_or_skip(suite_dir(problems, "--problems"),
                                                                     make_console(stderr=True))
    check_profile(profile, found)
    kind = "cpu" if ceilings.name == "cpu" else "cuda"
    results: dict[Path, roofline.Roofline] = {}
    for p in found:
        try:
            counts = roofline.count_isolated(p.path, resolve_profile(profile, kind, p), precision,
                                             fp32_matmul=fp32_matmul)
            results[p.path] = roofline.Roofline(counts, ceilings)
        except Exception as exc:  # one problem that cannot be counted does not stop a suite
            if problem:
                raise UserError(f"{p.path}: {type(exc).__name__}: {exc}") from None
            _warn(f"{p.path}: {type(exc).__name__}: {exc}")
    if as_json:
        data = {str(p): r.to_json() for p, r in results.items()}
        click.echo(json.dumps(data[str(found[0].path)] if problem else data, indent=2))
        return
    placeholder = ceilings.source == "placeholder"
    title = f"Roofline on {ceilings.name} ({ceilings.source} ceilings" + (
        ": not a datasheet; run kbv calibrate to measure them)" if placeholder else ")")
    header = ["problem", "GFLOP", "MB", "FLOP/B", "regime", "t_roofline_ms", "notes"]
    rows = []
    for path, r in results.items():
        notes = ["launch-bound"] if r.launch_bound else []
        notes += ["placeholder ceilings"] if placeholder else []
        notes += [r.counts.fallback] if r.counts.fallback else []
        notes += ["uncounted: " + ", ".join(r.counts.uncounted)] if r.counts.uncounted else []
        rows.append([f"{path.parent.name}/{path.stem}", f"{r.total_flops / 1e9:.3f}", f"{r.bytes / 1e6:.1f}",
                     f"{r.intensity:.2f}", r.regime, f"{r.t_roofline_ms:.4f}", "; ".join(notes) or "-"])
    print_table(make_console(), title, header, rows, keep=1)


@main.command("calibrate")
@click.option("--device", "device_", default="auto", show_default=True, help="cpu, cuda, cuda:N or auto.")
@click.option("--save/--no-save", default=True, show_default=True,
              help="Save under $KBV_CACHE_DIR/ceilings.json, where `kbv roofline` and `kbv eval` prefer them.")
@click.option("--json", "as_json", is_flag=True, help="Print the measured ceilings as JSON.")
def calibrate_cmd(device_, save, as_json) -> None:
    """Measure achievable ceilings: a large matmul per precision and a device-to-device copy (median of runs)."""
    import torch

    from kbv.roofline import hardware
    from kbv.files import cache_dir as default_cache_dir

    if device_ in ("auto", "cpu", "cuda"):
        device = resolved_device(device_)
    elif device_.startswith("cuda:") and device_[5:].isdigit():
        if int(device_[5:]) >= len(envinfo.gpu_indices()):
            raise UserError(f"--device {device_}: torch sees {len(envinfo.gpu_indices())} CUDA devices")
        device = device_
    else:
        raise UserError(f"--device must be cpu, cuda, cuda:N or auto (got {device_!r})")
    if device == "cpu":
        torch.set_num_threads(1)  # kbv's CPU workers run single-threaded: measure the roof they can reach
    measured = hardware.calibrate(device)
    path = hardware.save_measured(measured, default_cache_dir()) if save else None
    if as_json:
        click.echo(json.dumps(measured.to_json(), indent=2))
        return
    make_console().print(f"{measured.name}: " + ", ".join(f"{k} {v / 1e12:.2f} TFLOP/s"
                                                          for k, v in measured.flops.items())
                         + f"; copy {measured.bandwidth / 1e9:.1f} GB/s" + (f" -> {path}" if path else ""))


from kbv.cli.trace import trace_cmd  # noqa: E402

main.add_command(trace_cmd)

from kbv.cli.lint import lint_cmd  # noqa: E402

main.add_command(lint_cmd)

from kbv.cli.suite import import_atrex_cmd, suite  # noqa: E402

main.add_command(suite)
main.add_command(import_atrex_cmd)

from kbv.study.cli import generate  # noqa: E402

main.add_command(generate)

from kbv.agent.cli import agent, task  # noqa: E402

main.add_command(agent)
main.add_command(task)

from kbv.verify_cmd import verify_cmd  # noqa: E402

main.add_command(verify_cmd)

startup.release(_STARTING)


if __name__ == "__main__":
    sys.exit(main())
