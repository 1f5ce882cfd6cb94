"""Rendering a comparison of runs as terminal tables, Markdown, JSON or CSV (figures come from ``kbv.report.metrics``)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from typing import Any, Callable

from rich.console import Console
from rich.table import Table

from kbv.report.metrics import Decomposition, GroupSummary, RunComparison, finite_number, speedup_of
from kbv.protocol import FAST_P_THRESHOLDS

_STYLE = {"correct": "green", "incorrect": "red", "rejected": "magenta", "compile_error": "yellow",
          "runtime_error": "yellow", "timeout": "yellow"}


def pct(x: Any) -> str:
    x = finite_number(x)
    return "-" if x is None else f"{100 * x:.0f}%"


def times(x: Any) -> str:
    x = finite_number(x)
    return "-" if x is None else f"{x:.2f}x"


def signed(x: float | None, fmt: Callable[[float], str]) -> str:
    return "-" if x is None else ("+" if x >= 0 else "") + fmt(x)


def human_bytes(n: Any) -> str:
    n = finite_number(n)
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# ---------------------------------------------------------------------------------------------------------------
# Rows shared by every format


def summary_rows(comparison: RunComparison, groups: dict[str, list[GroupSummary]] | None = None
                 ) -> tuple[list[str], list[list[str]]]:
    groups = groups if groups is not None else comparison.levels
    ks = sorted({k for gs in groups.values() for g in gs for k in g.pass_at_k})
    header = ["group", "run", "n", "compiled", "correct ver|std", "DSL adoption",
              *[f"fast_{p:g} ver|std" for p in FAST_P_THRESHOLDS], "geomean ver|std", "geomean, failures=1 ver|std",
              "correct but slower", "mem. efficiency", "mem. ratio (ref/kernel)", "raised peak", "exploit rate",
              "attainment", "S_agg", *[f"pass@{k}" for k in ks]]
    names = list(dict.fromkeys(g.name for gs in groups.values() for g in gs))
    rows = []
    for name in names:
        for run in comparison.runs:
            g = next((x for x in groups.get(run, []) if x.name == name), None)
            if g is None:
                continue
            rows.append([
                g.name, run, str(g.n), pct(g.compiled), f"{pct(g.correct_verified)} | {pct(g.correct_standard)}",
                pct(g.dsl_adoption),
                *[f"{pct(g.fast_p_verified[p])} | {pct(g.fast_p_standard[p])}" for p in FAST_P_THRESHOLDS],
                f"{times(g.geomean_verified)} | {times(g.geomean_standard)}",
                f"{times(g.geomean_all_verified)} | {times(g.geomean_all_standard)}",
                pct(g.correct_but_slower), pct(g.memory_efficiency), times(g.memory_leaderboard_ratio),
                pct(g.memory_raised_share), pct(g.exploit_rate),
                "-" if g.attainment_median is None else f"{g.attainment_median:.2f}",
                "-" if g.s_agg is None else f"{g.s_agg:.3f}",
                *[pct(g.pass_at_k.get(k)) for k in ks],
            ])
    return header, rows


def decomposition_rows(comparison: RunComparison) -> tuple[list[str], list[list[str]]]:
    header = ["group", "run", "standard", "(a) TF32 baseline", "(b) hidden distributions", "(c) hack rejection",
              "residual", "verified"]
    rows = []
    for run in comparison.runs:
        for d in comparison.decomposition.get(run, []):
            first, last = d.steps[0], d.steps[-1]
            cells = [f"{times(first.geomean)} / fast_1 {pct(first.fast_1)}"]
            for step in ("(a) TF32 baseline", "(b) hidden distributions", "(c) hack rejection", "residual"):
                e = d.effects[step]
                cells.append(f"{signed(e['geomean'], lambda v: f'{v:.2f}x')} / "
                             f"{signed(e['fast_1'], lambda v: f'{100 * v:.0f} pts')}")
            cells.append(f"{times(last.geomean)} / fast_1 {pct(last.fast_1)}")
            rows.append([d.group, run, *cells])
    return header, rows


def mover_lines(d: Decomposition) -> list[str]:
    lines = []
    for step in d.steps[1:4]:
        if not step.moved:
            continue
        parts = []
        for m in step.moved:
            s, v = m.get("standard"), m.get("verified")
            note = f"{times(s)} -> {times(v)}" if step.name.startswith("(a)") else \
                f"standard {times(s)}, {m.get('verdict')}" + (f" ({', '.join(m['failed'])})" if m.get("failed") else "")
            parts.append(f"{m['problem']} {note}")
        lines.append(f"{step.name}: " + "; ".join(parts))
    return lines


def record_rows(records: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["problem", "sample", "verdict", "standard", "speedup verified [95% CI]", "speedup standard",
              "peak mem kernel / ref", "flags", "note"]
    rows = []
    for r in records:
        mem = r.get("memory_bytes") or {}
        rows.append([str(r.get("problem")), str(r.get("sample")), str(r.get("verdict")), str(r.get("standard_verdict")),
                     _speedup_cell(r, "verified"), _speedup_cell(r, "standard"),
                     f"{human_bytes(mem.get('candidate_peak'))} / {human_bytes(mem.get('reference_peak'))}",
                     ", ".join(r.get("flags") or []), failure_note(r)])
    return header, rows


def _speedup_cell(record: dict[str, Any], baseline: str) -> str:
    value = speedup_of(record, baseline)
    if value is None:
        return "-"
    entry = record["speedup"][baseline]
    low, high = entry.get("ci_low"), entry.get("ci_high")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)):
        return f"{value:.2f}x [{low:.2f}, {high:.2f}]"
    return f"{value:.2f}x"


def failure_note(record: dict[str, Any]) -> str:
    if record.get("error"):
        err = record["error"]
        return f"{err.get('stage', '')}: {err.get('message', '')}"[:100]
    corr = record.get("correctness") or {}
    failed = corr.get("failed_distributions") or []
    if failed:
        dist = (corr.get("distributions") or {}).get(failed[0], {})
        return f"fails {', '.join(failed)}: {dist.get('reason', '')}"[:100]
    return ""


# ---------------------------------------------------------------------------------------------------------------
# Formats


TERMINAL_TABLES = (
    ("Correctness and speed (verified | standard protocol)",
     ("group", "run", "n", "compiled", "correct ver|std", "DSL adoption", "exploit rate", "geomean ver|std",
      "geomean, failures=1 ver|std", "correct but slower")),
    ("fast_p (verified | standard)", ("group", "run", *[f"fast_{p:g} ver|std" for p in FAST_P_THRESHOLDS])),
    ("Memory, roofline, pass@k",
     ("group", "run", "mem. efficiency", "mem. ratio (ref/kernel)", "raised peak", "attainment", "S_agg", "pass@")),
)


def _columns(table: tuple[list[str], list[list[str]]], wanted: tuple[str, ...]) -> tuple[list[str], list[list[str]]]:
    """The named columns of a (header, rows) table; a name ending in '@' takes every column it prefixes."""
    header, rows = table
    idx = [i for i, h in enumerate(header) if h in wanted or any(w.endswith("@") and h.startswith(w) for w in wanted)]
    return [header[i] for i in idx], [[row[i] for i in idx] for row in rows]


def _rich_table(title: str, header: list[str], rows: list[list[str]], style_col: int | None = None) -> Table:
    table = Table(title=title)
    for col in header:
        table.add_column(col, overflow="fold")
    for row in rows:
        cells = list(row)
        if style_col is not None:
            cells[style_col] = f"[{_STYLE.get(cells[style_col], '')}]{cells[style_col]}[/]"
        table.add_row(*cells)
    return table


def print_report(comparison: RunComparison, console: Console | None = None, per_candidate: bool | None = None) -> None:
    console = console or Console()
    if per_candidate if per_candidate is not None else len(comparison.runs) == 1:
        for run in comparison.runs:
            console.print(_rich_table(f"Results per candidate: {run}", *record_rows(comparison.records[run]),
                                      style_col=2))
    for title, cols in TERMINAL_TABLES:
        console.print(_rich_table(title, *_columns(summary_rows(comparison), cols)))
    console.print(_rich_table("From the standard to the verified figure (geomean speedup / fast_1), step by step",
                              *decomposition_rows(comparison)))
    for run in comparison.runs:
        overall = comparison.decomposition[run][-1]
        for line in mover_lines(overall):
            console.print(f"  {run} {line}")
    family_cols = ("group", "run", "n", "correct ver|std", "DSL adoption", "fast_1 ver|std", "geomean ver|std",
                   "exploit rate")
    console.print(_rich_table("Per problem family", *_columns(summary_rows(comparison, comparison.families),
                                                               family_cols)))
    if any(comparison.regimes.values()):
        console.print(_rich_table("Memory- vs compute-bound", *_columns(
            summary_rows(comparison, comparison.regimes), family_cols + ("attainment",))))
    console.print(
        f"Over {len(comparison.universe)} problems, one sample each (sample 0); missing kernels count as failed. "
        "fast_p: share correct and faster than p x the baseline. verified = D1-D6 checks and the TF32 baseline; "
        "standard = D1 + allclose(1e-2) and the fp32 (TF32 off) baseline. Definitions: kbv/metrics.py."
    )


def markdown_report(comparison: RunComparison) -> str:
    def table(header: list[str], rows: list[list[str]]) -> str:
        esc = [[c.replace("|", "\\|") for c in row] for row in [header, *rows]]
        lines = ["| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in esc[1:]]
        return "\n".join(lines)

    parts = ["# kbv report", "", f"{len(comparison.runs)} run(s) over {len(comparison.universe)} problems.", "",
             "## Summary (verified | standard)", "", table(*summary_rows(comparison)), "",
             "## From the standard to the verified figure", "", table(*decomposition_rows(comparison)), ""]
    for run in comparison.runs:
        for line in mover_lines(comparison.decomposition[run][-1]):
            parts.append(f"- {run} {line}")
    parts += ["", "## Per problem family", "", table(*summary_rows(comparison, comparison.families)), ""]
    if any(comparison.regimes.values()):
        parts += ["## Memory- vs compute-bound", "", table(*summary_rows(comparison, comparison.regimes)), ""]
    return "\n".join(parts)


def json_report(comparison: RunComparison) -> str:
    data = asdict(comparison)
    data.pop("records")
    return json.dumps(data, indent=2, default=str)


def csv_report(comparison: RunComparison) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    fields = [f for f in GroupSummary.__dataclass_fields__ if f not in ("fast_p_verified", "fast_p_standard",
                                                                         "pass_at_k")]
    writer.writerow(["kind", "run", *fields, *[f"fast_{p:g}_verified" for p in FAST_P_THRESHOLDS],
                     *[f"fast_{p:g}_standard" for p in FAST_P_THRESHOLDS]])
    for kind, groups in (("level", comparison.levels), ("family", comparison.families),
                         ("regime", comparison.regimes)):
        for run in comparison.runs:
            for g in groups.get(run, []):
                writer.writerow([kind, run, *[getattr(g, f) for f in fields],
                                 *[g.fast_p_verified[p] for p in FAST_P_THRESHOLDS],
                                 *[g.fast_p_standard[p] for p in FAST_P_THRESHOLDS]])
    return buf.getvalue()
