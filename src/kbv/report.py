"""Rendering records and their aggregates as terminal tables (figures come from ``kbv.metrics``)."""

from __future__ import annotations

from typing import Any, Iterable

from rich.console import Console
from rich.table import Table

from kbv.metrics import by_level, speedup_of
from kbv.protocol import FAST_P_THRESHOLDS

_STYLE = {"correct": "green", "incorrect": "red", "rejected": "magenta", "compile_error": "yellow",
          "runtime_error": "yellow", "timeout": "yellow"}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _speedup_cell(record: dict[str, Any], baseline: str) -> str:
    value = speedup_of(record, baseline)
    if value is None:
        return "-"
    entry = record["speedup"][baseline]
    low, high = entry.get("ci_low"), entry.get("ci_high")
    return f"{value:.2f}x [{low:.2f}, {high:.2f}]" if low is not None and high is not None else f"{value:.2f}x"


def _failure_note(record: dict[str, Any]) -> str:
    if record.get("error"):
        err = record["error"]
        message = str(err.get("message", ""))
        return f"{err.get('stage', '')}: {message}"[:90]
    corr = record.get("correctness") or {}
    failed = corr.get("failed_distributions") or []
    if failed:
        dist = (corr.get("distributions") or {}).get(failed[0], {})
        return f"fails {', '.join(failed)}: {dist.get('reason', '')}"[:90]
    return ""


def records_table(records: list[dict[str, Any]]) -> Table:
    table = Table(title="Results per candidate", show_lines=False)
    for col in ("problem", "sample", "verdict", "standard", "speedup verified [95% CI]", "speedup standard",
                "peak mem cand / ref", "flags", "note"):
        table.add_column(col, overflow="fold")
    for r in records:
        verdict = r.get("verdict", "")
        mem = r.get("memory_bytes") or {}
        table.add_row(
            str(r.get("problem")), str(r.get("sample")), f"[{_STYLE.get(verdict, '')}]{verdict}[/]",
            str(r.get("standard_verdict")), _speedup_cell(r, "verified"), _speedup_cell(r, "standard"),
            f"{_bytes(mem.get('candidate_peak'))} / {_bytes(mem.get('reference_peak'))}",
            ", ".join(r.get("flags") or []), _failure_note(r),
        )
    return table


def summary_table(records: Iterable[dict[str, Any]]) -> Table:
    table = Table(title="Summary (verified protocol | standard protocol)")
    table.add_column("group")
    table.add_column("n", justify="right")
    table.add_column("compiled", justify="right")
    table.add_column("correct", justify="right")
    for p in FAST_P_THRESHOLDS:
        table.add_column(f"fast_{p:g}", justify="right")
    table.add_column("geomean speedup", justify="right")
    table.add_column("mem. eff.", justify="right")
    for g in by_level(records):
        table.add_row(
            g.name, str(g.n), _pct(g.compiled), f"{_pct(g.correct_verified)} | {_pct(g.correct_standard)}",
            *[f"{_pct(g.fast_p_verified[p])} | {_pct(g.fast_p_standard[p])}" for p in FAST_P_THRESHOLDS],
            f"{_x(g.geomean_verified)} | {_x(g.geomean_standard)}", _pct(g.memory_efficiency),
        )
    return table


def print_report(records: list[dict[str, Any]], console: Console | None = None) -> None:
    console = console or Console()
    console.print(records_table(records))
    console.print(summary_table(records))
    console.print(
        "fast_p: share of all candidates that are correct and faster than p x the baseline; verified = D1-D4 "
        "checks and the TF32 baseline, standard = D1 + allclose(1e-2) and the fp32 (TF32 off) baseline. "
        "Geomean over correct candidates. Memory efficiency: correct candidates whose peak <= the reference's."
    )
