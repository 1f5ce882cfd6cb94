"""The ``kbv`` command: parses flags and calls the library (no evaluation logic lives here)."""

from __future__ import annotations

import json
import sys
import time
from importlib import resources
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kbv import envinfo, protocol
from kbv.problems.candidates import Candidate, Pair, pair_candidates
from kbv.eval import CompileResult, EvalOptions
from kbv.problems import discover, load_problem, resolve_suite, shipped_suites
from kbv.records import Record, read_records
from kbv.report.metrics import compare_runs
from kbv.report.text import csv_report, json_report, markdown_report, print_report
from kbv.eval.runner import Progress, run_pairs

console = Console(width=None if sys.stdout.isatty() else 200)


class BarProgress(Progress):
    """A rich progress bar over builds and evaluations."""

    def __init__(self) -> None:
        self.bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TextColumn("{task.fields[last]}"), console=console)

    def start(self, builds: int, evaluations: int) -> None:
        self.bar.start()
        self.builds = self.bar.add_task("build", total=builds, last="")
        self.evals = self.bar.add_task("evaluate", total=evaluations, last="")

    def built(self, pair: Pair, result: CompileResult) -> None:
        self.bar.update(self.builds, advance=1, last=f"{pair.candidate.path.name}: {'ok' if result.ok else result.verdict}")

    def evaluated(self, record: Record) -> None:
        self.bar.update(self.evals, advance=1, last=f"{record.problem} #{record.sample}: {record.verdict}")

    def stop(self) -> None:
        self.bar.stop()


def _options(device: str, protocol_: str, precision: str, timeout: float, build_timeout: float, trials: int,
             profile: str, timing_pairs: int | None, speedup_bound: float, require_custom_kernels: bool = False,
             strict_precision: bool = False, standard_tolerance: str = protocol.DEFAULT_STANDARD_TOLERANCE,
             build_workers: int | None = None) -> EvalOptions:
    """``EvalOptions`` from the shared flags of ``eval`` and ``demo`` (``--build-workers`` is the runner's)."""
    return EvalOptions(device=device, protocol=protocol_, precision=precision, timeout=timeout,
                       build_timeout=build_timeout, trials=trials, profile=profile, timing_pairs=timing_pairs,
                       speedup_bound=speedup_bound, require_custom_kernels=require_custom_kernels,
                       strict_precision=strict_precision, standard_tolerance=standard_tolerance)


def _eval_flags(f):  # shared flags of `eval` and `demo`
    for option in reversed([
        click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True),
        click.option("--protocol", "protocol_", type=click.Choice(sorted(protocol.PROTOCOLS)), default="both",
                     show_default=True, help="Which baselines to time (correctness always runs D1-D6)."),
        click.option("--precision", type=click.Choice(list(protocol.PRECISIONS)), default="fp32", show_default=True),
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
        click.option("--standard-tolerance", type=click.Choice(sorted(protocol.STANDARD_TOLERANCES)),
                     default=protocol.DEFAULT_STANDARD_TOLERANCE, show_default=True,
                     help="KernelBench's standard check: v0 (allclose 1e-2, v0/v0.1) or current (1e-4 fp32, 1e-2 "
                          "bf16); recorded in env.standard_tolerance."),
    ]):
        f = option(f)
    return f


def _run(pairs: list[Pair], options: EvalOptions, out: Path, resume: bool, build_workers: int | None) -> None:
    bar = BarProgress()
    t0 = time.monotonic()
    try:
        summary = run_pairs(pairs, options, out, resume=resume, progress=bar,
                            build_workers=build_workers or envinfo.cpu_count())
    finally:
        bar.stop()
    console.print(f"{summary.evaluated} evaluated, {summary.skipped} already recorded, in "
                  f"{time.monotonic() - t0:.0f} s -> {summary.out}")


@click.group()
@click.version_option(package_name="kbv")
def main() -> None:
    """kbv: is this kernel correct on every input it must handle, and how fast is it, honestly?"""


@main.command("eval")
@click.option("--problem", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--candidate", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--problems", help="A suite folder (level*/ subfolders) of problems, or a shipped suite's name.")
@click.option("--candidates", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A folder of candidates named level_<L>_problem_<id>_sample_<s>_kernel.py or like the problems.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--resume", is_flag=True, help="Skip pairs already recorded in --out.")
@_eval_flags
def eval_cmd(problem, candidate, problems, candidates, out, resume, **flags) -> None:
    """Evaluate one candidate (--problem/--candidate) or a folder of them (--problems/--candidates)."""
    options = _options(**flags)
    build_workers = flags["build_workers"]
    if problem and candidate:
        pairs = [Pair(load_problem(problem), Candidate.from_path(candidate))]
    elif problems and candidates:
        try:
            suite_dir = resolve_suite(problems)
        except FileNotFoundError as exc:
            raise click.BadParameter(str(exc), param_hint="'--problems'") from None
        pairs, unmatched = pair_candidates(discover(suite_dir), [candidates])
        for path in unmatched:
            console.print(f"[yellow]no problem for candidate {path}[/]")
    else:
        raise click.UsageError("give --problem and --candidate, or --problems and --candidates")
    _run(pairs, options, out, resume, build_workers)
    print_report(compare_runs({out.stem: list(read_records(out))}), console)


@main.command()
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("kbv-demo.jsonl"),
              show_default=True)
@_eval_flags
def demo(out, **flags) -> None:
    """Evaluate the bundled example candidates on the built-in suite and print the report."""
    options = _options(**flags)
    build_workers = flags["build_workers"]
    resolved = envinfo.resolve_device(options.device)
    examples = Path(str(resources.files("kbv") / "examples"))
    folders = [examples / "common", examples / resolved]
    pairs, _ = pair_candidates(discover(resolve_suite(None)), folders)
    out.unlink(missing_ok=True)
    console.print(f"kbv demo: {len(pairs)} example candidates on the built-in suite, device {resolved}")
    _run(pairs, options, out, False, build_workers)
    print_report(compare_runs({"demo": list(read_records(out))}), console)


def _run_labels(paths: list[Path]) -> dict[str, Path]:
    labels: dict[str, Path] = {}
    for path in paths:
        label = path.stem
        while label in labels:
            label = f"{label}'"
        labels[label] = path
    return labels


@main.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "json", "csv"]), default="table",
              show_default=True)
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write a self-contained HTML report (tables and plots) here.")
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Also write the plots (PNG and SVG) into this folder.")
@click.option("--suite", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Count rates over this suite's problems (missing kernels fail); default: problems in any run.")
@click.option("--per-candidate/--no-per-candidate", default=None, help="Per-candidate table (default: one run).")
def report(results, fmt, html_out, plots_dir, suite, per_candidate) -> None:
    """Compare one or more results files (one per model or run), side by side."""
    from kbv.verify_cmd import verified_records  # warns on stderr: records failing verification, unauthenticated ones

    runs = {label: list(verified_records(path)) for label, path in _run_labels(list(results)).items()}
    universe = [p.key for p in discover(suite)] if suite else None
    comparison = compare_runs(runs, universe)
    if fmt == "json":
        click.echo(json_report(comparison))
    elif fmt == "markdown":
        click.echo(markdown_report(comparison))
    elif fmt == "csv":
        click.echo(csv_report(comparison), nl=False)
    else:
        print_report(comparison, console, per_candidate)
    if plots_dir:
        from kbv.report.plots import save_plots

        try:
            written = save_plots(comparison, plots_dir)
        except ImportError as exc:
            raise click.ClickException(f"plots need matplotlib ({exc}): pip install 'kbv[report]'") from None
        if fmt == "table":
            for path in written:
                console.print(f"plot: {path}", highlight=False)
    if html_out:
        from kbv.report.html import write_html

        write_html(comparison, html_out)
        if fmt == "table":
            console.print(f"HTML report: {html_out}")


@main.command("export-kernelbench")
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--level", type=int, required=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--protocol", "protocol_", type=click.Choice(["verified", "standard"]), default="verified",
              show_default=True, help="Whose verdict and timings become KernelBench's correctness and runtime.")
@click.option("--pass-at-k", "pass_at_k_out", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write KernelBench's pass_at_k_results.json here.")
@click.option("--on-duplicate", type=click.Choice(["error", "last"]), default="error", show_default=True)
def export_kernelbench(results, level, out, protocol_, pass_at_k_out, on_duplicate) -> None:
    """Write results in KernelBench's eval_results.json layout (one level)."""
    from kbv.report.kernelbench import export_eval_results, export_pass_at_k, write_json

    records = [r for path in results for r in read_records(path)]
    write_json(export_eval_results(records, level, protocol_, on_duplicate), out)
    if pass_at_k_out:
        write_json(export_pass_at_k(records, level, protocol_), pass_at_k_out, indent=2)
    console.print(f"{out}")


@main.command("import-kernelbench")
@click.argument("eval_results", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--level", type=int, required=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--problems", "problems_dir", help="The suite the run was evaluated on (maps ids to problem names).")
@click.option("--source", default=None, help="A name for the imported run (default: the file's path).")
def import_kernelbench(eval_results, level, out, problems_dir, source) -> None:
    """Convert a KernelBench eval_results.json (compiled / correctness / runtime) into kbv records."""
    from kbv.report.kernelbench import import_eval_results, load_eval_results
    from kbv.records import RecordWriter

    problems_list = discover(resolve_suite(problems_dir)) if problems_dir else None
    records = import_eval_results(load_eval_results(eval_results), level, problems_list,
                                  source=source or str(eval_results))
    writer = RecordWriter(out)
    for data in records:
        writer.append(Record(**{k: v for k, v in data.items()}))
    console.print(f"{len(records)} records -> {out}")


@main.command()
@click.argument("suite", required=False)
def problems(suite) -> None:
    """List the shipped suites, or the problems of SUITE (a shipped suite name or a folder)."""
    if suite is None:
        for name in shipped_suites():
            found = discover(resolve_suite(name))
            console.print(f"{name}: {len(found)} problems ({resolve_suite(name)})")
        return
    table = Table(title=str(suite))
    for col in ("problem", "level", "id", "profiles", "skips", "mode"):
        table.add_column(col)
    for p in discover(resolve_suite(suite)):
        table.add_row(p.key, str(p.level), str(p.problem_id), ", ".join(p.profiles) or "-",
                      ", ".join(f"{k}: {v}" for k, v in p.skip.items()) or "-", p.mode)
    console.print(table)


@main.command("protocol")
def protocol_cmd() -> None:
    """Print the protocol: distributions, tolerances, baselines, verdict precedence and flags."""
    t = Table(title="Distributions")
    t.add_column("name")
    t.add_column("scale")
    t.add_column("shift")
    t.add_column("meaning")
    for d in protocol.DISTRIBUTIONS:
        t.add_row(d.name, f"{d.scale:g}", f"{d.shift:g}", d.description)
    console.print(t)
    t = Table(title="Tolerances (see kbv/protocol.py for the formulas)")
    for col in ("precision", "rtol", "atol_scale", "atol_floor", "centred_rtol", "resolution_factor"):
        t.add_column(col)
    for name, tol in protocol.TOLERANCES.items():
        t.add_row(name, *(f"{v:g}" for v in vars(tol).values()))
    console.print(t)
    t = Table(title="Baselines")
    for col in ("name", "float32_matmul_precision", "cuda.matmul.fp32_precision", "cudnn.allow_tf32",
                "cudnn.conv.fp32_precision", "meaning"):
        t.add_column(col)
    for b in protocol.BASELINES.values():
        t.add_row(b.name, b.float32_matmul_precision, b.matmul_fp32_precision, str(b.cudnn_allow_tf32),
                  b.cudnn_conv_fp32_precision, b.description)
    console.print(t)
    console.print("Verdict precedence: " + " > ".join(protocol.VERDICT_PRECEDENCE))
    t = Table(title="Flags")
    t.add_column("flag")
    t.add_column("meaning")
    for name, meaning in protocol.FLAGS.items():
        t.add_row(name, meaning)
    console.print(t)


@main.command("roofline")
@click.option("--problem", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--problems", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A suite folder (level*/ subfolders) of problems.")
@click.option("--device", "device_name", default="H200 SXM", show_default=True,
              help="A registry or torch/nvidia-smi device name ('NVIDIA H200', 'NVIDIA H100 80GB HBM3', 'cpu', ...).")
@click.option("--precision", type=click.Choice(list(protocol.PRECISIONS)), default="fp32", show_default=True)
@click.option("--profile", default="default", show_default=True, help="Size profile (default: the default sizes).")
@click.option("--fp32-matmul", type=click.Choice(["tf32", "ieee"]), default="tf32", show_default=True,
              help="Roof for fp32 matmuls: tf32 (the verified baseline) or ieee (the standard one: the FP32 roof).")
@click.option("--datasheet", is_flag=True, help="Ignore measured ceilings saved by `kbv calibrate`.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (an object for --problem, keyed by file for --problems).")
def roofline_cmd(problem, problems, device_name, precision, profile, fp32_matmul, datasheet, as_json) -> None:
    """Roofline bounds: FLOPs per precision, minimum bytes, intensity, regime and t_roofline on a device."""
    from kbv import roofline
    from kbv.roofline import hardware
    from kbv.files import cache_dir as default_cache_dir

    if bool(problem) == bool(problems):
        raise click.UsageError("give --problem or --problems")
    try:
        ceilings = hardware.ceilings_for(device_name, default_cache_dir(), prefer_measured=not datasheet)
    except KeyError as exc:
        raise click.ClickException(str(exc.args[0])) from None
    paths = [problem] if problem else [p.path for p in discover(problems)]
    results: dict[Path, roofline.Roofline] = {}
    for path in paths:
        try:
            counts = roofline.count_isolated(path, profile, precision, fp32_matmul=fp32_matmul)
            results[path] = roofline.Roofline(counts, ceilings)
        except Exception as exc:  # one problem that cannot be counted does not stop a suite
            if problem:
                raise click.ClickException(f"{path}: {type(exc).__name__}: {exc}") from None
            console.print(f"[yellow]{path}: {type(exc).__name__}: {exc}[/]")
    if as_json:
        data = {str(p): r.to_json() for p, r in results.items()}
        click.echo(json.dumps(data[str(problem)] if problem else data, indent=2))
        return
    table = Table(title=f"Roofline on {ceilings.name} ({ceilings.source} ceilings)")
    for col in ("problem", "GFLOP", "MB", "FLOP/B", "regime", "t_roofline_ms", "notes"):
        table.add_column(col, justify="left" if col in ("problem", "regime", "notes") else "right")
    for path, r in results.items():
        notes = ["launch-bound"] if r.launch_bound else []
        notes += [r.counts.fallback] if r.counts.fallback else []
        notes += ["uncounted: " + ", ".join(r.counts.uncounted)] if r.counts.uncounted else []
        table.add_row(f"{path.parent.name}/{path.stem}", f"{r.total_flops / 1e9:.3f}", f"{r.bytes / 1e6:.1f}",
                      f"{r.intensity:.2f}", r.regime, f"{r.t_roofline_ms:.4f}", "; ".join(notes) or "-")
    console.print(table)


@main.command("calibrate")
@click.option("--device", "device_", default="auto", show_default=True, help="cpu, cuda, cuda:N or auto.")
@click.option("--save/--no-save", default=True, show_default=True,
              help="Save under $KBV_CACHE_DIR/ceilings.json, where `kbv roofline` and `kbv eval` prefer them.")
@click.option("--json", "as_json", is_flag=True)
def calibrate_cmd(device_, save, as_json) -> None:
    """Measure achievable ceilings: a large matmul per precision and a device-to-device copy (median of runs)."""
    import torch

    from kbv.roofline import hardware
    from kbv.files import cache_dir as default_cache_dir

    device = envinfo.resolve_device(device_) if device_ in ("auto", "cpu", "cuda") else device_
    if device == "cpu":
        torch.set_num_threads(1)  # kbv's CPU workers run single-threaded: measure the roof they can reach
    measured = hardware.calibrate(device)
    path = hardware.save_measured(measured, default_cache_dir()) if save else None
    if as_json:
        click.echo(json.dumps(measured.to_json(), indent=2))
        return
    console.print(f"{measured.name}: " + ", ".join(f"{k} {v / 1e12:.2f} TFLOP/s" for k, v in measured.flops.items())
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


if __name__ == "__main__":
    sys.exit(main())
