"""``kbv suite build|score`` and ``kbv import-atrex``: trace-weighted suites (flags -> library calls)."""

from __future__ import annotations

import json
from pathlib import Path

import click
from kbv.cli.console import make_console
from kbv.cli.checks import UserError
from kbv.report.text import print_table

# as wide as the terminal, or COLUMNS; piped without COLUMNS, wide enough for its tables


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


@click.group("suite")
def suite() -> None:
    """Build importance-weighted suites from traces, and score runs on them."""


@suite.command("build")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="The suite folder.")
@click.option("--coverage", type=click.FloatRange(0, 1, min_open=True), default=0.9, show_default=True,
              help="Share of each phase's (and level's) recorded time the selected entries must reach.")
@click.option("--max-shapes", type=click.IntRange(1), default=8, show_default=True,
              help="Most shapes per problem (the hottest; held-out ones included).")
@click.option("--held-out", type=click.IntRange(0), default=0, show_default=True,
              help="Shapes per problem moved to evaluator/heldout.json (never the hottest).")
@click.option("--force", is_flag=True, help="Replace a suite already in --out.")
def build_cmd(traces, out, coverage, max_shapes, held_out, force) -> None:
    """Select the hot operators and modules of TRACE.json files into problems with weights."""
    from kbv.tracesuite.build import TraceError, build_suite

    try:
        result = build_suite(traces, out, coverage, max_shapes, held_out, force)
    except (TraceError, FileExistsError, ValueError) as exc:
        raise UserError(str(exc)) from None
    header = ["phase", "level", "problems", "recorded us", "selected", "unreproducible", "dropped", "of phase"]
    rows = []
    for phase, levels in result.levels.items():
        for level, f in levels.items():
            rec = f["recorded_us"] or 1.0
            rows.append([phase, f"{level} ({f['view']})", str(f["problems"]), f"{f['recorded_us']:.1f}",
                         _pct(f["raw_sum"]), _pct(f["unreproducible_us"] / rec), _pct(f["dropped_us"] / rec),
                         _pct(f["share_of_phase"])])
    print_table(make_console(), f"Coverage (target {coverage:.0%}; weights sum to 1 per phase and level)", header,
                rows, right=header[2:])
    header = ["problem", "shapes", "held out", *result.weights["phases"]]
    rows = [[p.key, str(len(p.shapes)), str(len(p.held_out)),
             *(_num((result.weights["phases"][ph].get(p.key) or {}).get("weight")) for ph in result.weights["phases"])]
            for p in result.problems]
    print_table(make_console(), f"{len(result.problems)} problems in {out}", header, rows, keep=1, right=header[1:])
    cpu_only = [k for k, v in result.provenance["problems"].items() if v.get("cpu_only")]
    if cpu_only:
        make_console().print("[yellow]CPU-only operators (the trace ran on the CPU; these cannot run on a GPU):[/yellow] "
                      + ", ".join(cpu_only))
    if result.skipped:
        rows = [[k.entry.phase, k.entry.label, f"{k.entry.time_us:.1f}", k.reason]
                for k in sorted(result.skipped, key=lambda k: -k.entry.time_us)[:15]]
        print_table(make_console(), f"Skipped entries ({len(result.skipped)}; all in evaluator/provenance.json)",
                    ["phase", "entry", "time us", "reason"], rows, right=["time us"])


@suite.command("score")
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--suite", "suite_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True,
              help="A built suite (its evaluator/weights.json).")
@click.option("--baseline", type=click.Choice(["verified", "standard"]), default="verified", show_default=True,
              help="Whose verdicts and speedups count.")
@click.option("--json", "as_json", is_flag=True, help="Print the score as JSON.")
def score_cmd(results, suite_dir, baseline, as_json) -> None:
    """The weighted attainment S_agg of a run (RESULTS.jsonl files) on a built suite."""
    from kbv.records import read_records
    from kbv.tracesuite.weights import WeightsError, aggregate, load_weights

    try:
        weights = load_weights(suite_dir)
    except WeightsError as exc:
        raise UserError(str(exc)) from None
    def warn(line: str) -> None:
        click.echo(f"Warning: {line}", err=True)

    records = [r for path in results for r in read_records(path, warn=warn)]
    if not records:
        raise UserError("no kbv records in " + ", ".join(map(str, results)))
    agg = aggregate(records, weights, baseline)
    if as_json:
        click.echo(json.dumps(agg, indent=2))
        return
    header = ["phase", "S_agg", "level S_agg", "covered", "correct", "memory-bound share", "compute-bound share"]
    rows = []
    for phase in weights["phases"]:
        f = agg[phase]
        levels = ", ".join(f"{k} {_num(v['s_agg'])}" for k, v in f["levels"].items())
        rows.append([phase, _num(f["s_agg"]), levels, _pct(f["covered_weight"]), _pct(f["correct_weight"]),
                     _pct((f["regimes"].get("memory") or {}).get("weight_share")),
                     _pct((f["regimes"].get("compute") or {}).get("weight_share"))])
    rows.append(["overall", _num(agg["overall"]["s_agg"]), f"phases by {agg['overall']['basis']}", "", "", "", ""])
    print_table(make_console(), f"S_agg ({baseline}; failed or missing kernels count 0)", header, rows, keep=1,
                right=header[1:])


@click.command("import-atrex")
@click.argument("data_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="The suite folder.")
@click.option("--held-out", type=click.IntRange(0), default=0, show_default=True,
              help="Shapes per problem moved to evaluator/heldout.json (never the first).")
@click.option("--validate/--no-validate", default=True, show_default=True,
              help="Run every shape once (meta device, or the CPU for small shapes) and record the outcome.")
@click.option("--force", is_flag=True, help="Replace a suite already in --out.")
def import_atrex_cmd(data_dir, out, held_out, validate, force) -> None:
    """Turn Atrex-Bench operator directories (DATA_DIR/<op>/ or one such directory) into a kbv suite."""
    from kbv.tracesuite.atrex import AtrexError, import_atrex

    try:
        result = import_atrex(data_dir, out, held_out, validate, force)
    except (AtrexError, FileExistsError) as exc:
        raise UserError(str(exc)) from None
    rows = []
    for op in result.operators:
        statuses = list(op.validated.values())
        ok = sum(1 for s in statuses if s in ("meta", "cpu"))
        rows.append([op.key, op.name, str(op.phase), str(len(op.visible)), str(len(op.held_out)),
                     f"{ok}/{len(statuses)}" if statuses else "not run", "; ".join(op.warnings) or "-"])
    print_table(make_console(), f"{len(result.operators)} Atrex operators -> {out} "
                                f"(importance sum {result.weights['importance_sum']:.4f}, normalised per phase)",
                ["problem", "operator", "phase", "shapes", "held out", "validated", "notes"], rows, keep=1)
    for name, why in result.errors.items():
        make_console().print(f"[yellow]not imported[/yellow] {name}: {why}")
