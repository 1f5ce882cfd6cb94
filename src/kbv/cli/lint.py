"""``kbv lint PROBLEMS``: flags problems whose outputs a cheating kernel can pass (the screen is in kbv.lint)."""

from __future__ import annotations

import json
from collections import defaultdict

import click
from rich.console import Console

from kbv.cli.console import make_console
from kbv.cli.checks import UserError, check_profile, resolved_device

from kbv import protocol
from kbv.lint import DEFAULT_TIMEOUT, Finding, LintOptions, LintResult, collect, lint
from kbv.problems import ProblemFormatError, load_problem
from kbv.report.text import print_table as fitted_table


def _finding_lines(findings: list[Finding]) -> str:
    """One line per (check, subject), naming the distributions where it holds."""
    groups: dict[tuple[str, str | None], list[str]] = defaultdict(list)
    for f in findings:
        dists = groups[(f.check, f.subject)]
        if f.distribution and f.distribution not in dists:
            dists.append(f.distribution)
    return "\n".join(f"{check}{' ' + subject if subject else ''} [{' '.join(dists)}]"
                     for (check, subject), dists in groups.items()) or "-"


def print_table(results: list[LintResult], console: Console) -> None:
    """The results as a table as wide as the console (split by columns where needed: no word or number cut)."""
    header = ["problem", "status", "findings", "notes (D2-D6 only)", "KernelBench-only"]
    rows = []
    for r in results:
        status = "ok" if r.ok else "error" if r.error is not None else "flagged"
        findings = f"error: {r.error}" if r.error is not None else _finding_lines(r.findings)
        standard = ", ".join(sorted({s["check"] for s in r.standard_only})) or "-"
        rows.append([r.problem, status, findings, _finding_lines(r.notes), standard])
    fitted_table(console, "kbv lint: cheat outputs that pass the verified check", header, rows, style="status",
                 keep=1)
    flagged = sum(not r.ok for r in results)
    console.print(f"{len(results)} problems, {flagged} flagged. Notes hold only on D2-D6 (untimed: not flagged "
                  f"unless --strict); KernelBench-only: cheats that pass KernelBench's allclose on D1 but not kbv's "
                  f"check. --json has every detail.")


@click.command("lint")
@click.argument("problems", nargs=-1, required=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Where to run: auto (a GPU when torch sees one, else the CPU), cpu or cuda.")
@click.option("--precision", type=click.Choice(list(protocol.PRECISIONS)), default="fp32", show_default=True,
              help="The precision inputs and weights are cast to (sets the tolerances).")
@click.option("--profile", default="auto", show_default=True,
              help="auto (small on CPU, default sizes on GPU), small, default, or another profile name.")
@click.option("--seeds", type=click.IntRange(min=2), default=protocol.DEFAULT_TRIALS_PER_DISTRIBUTION,
              show_default=True, help="Fresh seeds per distribution; a cheat must pass on every one.")
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True,
              help="Seconds per problem (its own process); past it the problem gets an error entry.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Problems screened at once (CPU threads are split among them).")
@click.option("--strict", is_flag=True, help="Flag checks that hold only on D2-D6 too (notes).")
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list of {problem, path, findings, notes, standard_only, error, ok, ...}.")
def lint_cmd(problems, device, precision, profile, seeds, timeout, jobs, strict, as_json) -> None:
    """Screen PROBLEMS (files, suite folders or shipped suite names) for weak outputs: exit code 1 if any problem
    is flagged or fails, 0 otherwise."""
    options = LintOptions(device=device, precision=precision, profile=profile, seeds=seeds, timeout=timeout,
                          jobs=jobs, strict=strict)
    try:  # options checked before any problem runs: a bad one is an Error, never an error entry per problem
        options.validate()
        files = collect(problems)
    except (FileNotFoundError, ValueError) as exc:
        raise UserError(str(exc)) from None
    resolved_device(device)
    loaded = []
    for path in files:
        try:
            loaded.append(load_problem(path))
        except (ProblemFormatError, OSError):
            pass  # a malformed problem gets its own error entry from lint
    check_profile(profile, loaded)
    err = Console(stderr=True)
    try:
        if as_json:
            results = lint(problems, options)
        else:
            with err.status("kbv lint") as status:
                results = lint(problems, options, on_result=lambda r: status.update(f"kbv lint: {r.problem} done"))
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        raise UserError(str(exc)) from None
    if as_json:
        click.echo(json.dumps([r.to_json() for r in results], indent=2))
    else:
        print_table(results, make_console())
    click.get_current_context().exit(0 if all(r.ok for r in results) else 1)
