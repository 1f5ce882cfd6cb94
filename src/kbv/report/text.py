"""Rendering a comparison of runs as terminal tables, Markdown, JSON or CSV (figures come from ``kbv.report.metrics``)."""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import asdict
from typing import Any, Callable, Collection

from rich.console import Console
from rich.table import Table

from kbv.report.agent import AGENT_FIELDS, AGENT_NOTE, agent_figures, agent_rows
from kbv.report.metrics import (
    VERDICT_KEY, Decomposition, GroupSummary, RunComparison, attainment_of, finite_number, level_of_key, roofline_of,
    speedup_of, tf32_effect_possible, triton_interpreted,
)
from kbv.protocol import FAST_P_THRESHOLDS

NO_TF32_EFFECT = "no TF32 effect possible"

_STYLE = {"correct": "green", "incorrect": "red", "rejected": "magenta", "compile_error": "yellow",
          "runtime_error": "yellow", "timeout": "yellow",
          "ok": "green", "flagged": "yellow", "error": "red"}  # the last three: kbv lint's statuses


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
    placeholder = {run: any(ceilings_source(r) == "placeholder" for r in comparison.records.get(run, []))
                   for run in comparison.runs}
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
                attainment_cell(g.attainment_median, placeholder[run]),
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
            tf32 = tf32_possible(group_records(comparison, run, d.group))
            for step in ("(a) TF32 baseline", "(b) hidden distributions", "(c) hack rejection", "residual"):
                e = d.effects[step]
                if step.startswith("(a)") and not tf32:
                    cells.append(NO_TF32_EFFECT)
                    continue
                cells.append(f"{signed(e['geomean'], lambda v: f'{v:.2f}x')} / "
                             f"{signed(e['fast_1'], lambda v: f'{100 * v:.0f} pts')}")
            cells.append(f"{times(last.geomean)} / fast_1 {pct(last.fast_1)}")
            rows.append([d.group, run, *cells])
    return header, rows


def group_records(comparison: RunComparison, run: str, group: str) -> list[dict[str, Any]]:
    """The records of a run that a decomposition group ("overall" or "level N") counts."""
    records = comparison.records.get(run, [])
    if not group.startswith("level "):
        return records
    level = group.split(" ", 1)[1]
    return [r for r in records if str(r.get("level") if isinstance(r.get("level"), int)
                                      else level_of_key(str(r.get("problem")))) == level]


def tf32_possible(records: list[dict[str, Any]]) -> bool:
    """Whether step (a) can show anything but noise: some record ran where the baselines differ (not on the CPU,
    with TF32-eligible work, or records that do not say)."""
    return any(tf32_effect_possible(r) is not False for r in records)


def mover_lines(d: Decomposition, records: list[dict[str, Any]] | None = None) -> list[str]:
    """The problems each step moved most; step (a) is left out where no TF32 effect is possible (``records``: the
    group's records; without them step (a) is always shown)."""
    by_problem = {str(r.get("problem")): r for r in records or []}
    no_tf32 = records is not None and not tf32_possible(records)
    lines = []
    for step in d.steps[1:4]:
        if not step.moved:
            continue
        if step.name.startswith("(a)") and no_tf32:
            lines.append(f"{step.name}: {NO_TF32_EFFECT} (the CPU, or no TF32-eligible matmul or convolution)")
            continue
        parts = []
        for m in step.moved:
            s, v = m.get("standard"), m.get("verified")
            if step.name.startswith("(a)"):
                r = by_problem.get(m["problem"])
                noise = r is not None and ci_contains_one(r, "verified") and ci_contains_one(r, "standard")
                note = f"{times(s)} -> {times(v)}" + (" (both intervals contain 1.0)" if noise else "")
            else:
                note = f"standard {times(s)}, {m.get('verdict')}" + (f" ({', '.join(m['failed'])})" if m.get("failed")
                                                                      else "")
            parts.append(f"{m['problem']} {note}")
        lines.append(f"{step.name}: " + "; ".join(parts))
    return lines


def candidate_name(record: dict[str, Any]) -> str:
    """The candidate's file name (its path's last part), else the start of its hash."""
    name = str(record.get("candidate") or "").replace("\\", "/").rsplit("/", 1)[-1]
    return name or str(record.get("candidate_sha256") or "?")[:12]


def ceilings_source(record: dict[str, Any]) -> str | None:
    ceilings = roofline_of(record).get("ceilings")
    return ceilings.get("source") if isinstance(ceilings, dict) else None


def attainment_cell(value: float | None, placeholder: bool) -> str:
    """Roofline attainment: marked when the ceilings are placeholders (the CPU: no bound to be above, so never
    suspect) and suspect above 1 against real ones."""
    if value is None:
        return "-"
    if placeholder:
        return f"{value:.2f} (placeholder ceilings)"
    return f"{value:.2f}" + (" suspect (>1)" if value > 1 else "")


def record_rows(records: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["problem", "candidate", "sample", "verdict", "standard", "speedup verified [95% CI]",
              "speedup standard", "peak mem kernel / ref", "attainment", "flags", "note"]
    rows = []
    for r in records:
        mem = r.get("memory_bytes") or {}
        rows.append([str(r.get("problem")), candidate_name(r), str(r.get("sample")), str(r.get("verdict")),
                     str(r.get("standard_verdict")), speedup_cell(r, "verified"), speedup_cell(r, "standard"),
                     f"{human_bytes(mem.get('candidate_peak'))} / {human_bytes(mem.get('reference_peak'))}",
                     attainment_cell(attainment_of(r), ceilings_source(r) == "placeholder"),
                     ", ".join(r.get("flags") or []), failure_note(r)])
    return header, rows


WIDE_COLUMNS = 120  # from this console width up the per-candidate table has every column (split as needed)


def compact_record_rows(records: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The per-candidate table for a narrow terminal: one row per candidate, each protocol's verdict over its
    speedup (``short_speedup_cell``), so that a row's verdicts and speedups stay side by side."""
    header = ["problem #sample", "verified", "standard"]
    rows = [[f"{r.get('problem')} #{r.get('sample')}",
             f"{r.get('verdict')}\n{short_speedup_cell(r, 'verified')}",
             f"{r.get('standard_verdict')}\n{short_speedup_cell(r, 'standard')}"] for r in records]
    return header, rows


def record_detail_rows(records: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The rest of ``record_rows`` for a narrow terminal, one line each in one column: the candidate's file, peak
    memory, roofline attainment, flags and the note (lines with nothing to say are left out)."""
    header = ["problem #sample", "candidate, memory, attainment, flags, note"]
    rows = []
    for r in records:
        mem = r.get("memory_bytes") or {}
        lines = [candidate_name(r)]
        if finite_number(mem.get("candidate_peak")) is not None or finite_number(mem.get("reference_peak")) is not None:
            lines.append(f"peak mem: kernel {human_bytes(mem.get('candidate_peak'))}, "
                         f"ref {human_bytes(mem.get('reference_peak'))}")
        att = attainment_of(r)
        if att is not None:
            lines.append(f"attainment {attainment_cell(att, ceilings_source(r) == 'placeholder')}")
        if r.get("flags"):
            lines.append(f"flags: {', '.join(r.get('flags') or [])}")
        note = failure_note(r)
        if note:
            lines.append(note)
        rows.append([f"{r.get('problem')} #{r.get('sample')}", "\n".join(lines)])
    return header, rows


COMPACT_NOTE = ("verified / standard: the verdict, then the speedup [95% CI]; ~1: the interval contains 1.0; "
                "Triton interpreter: timed under the Triton interpreter (the CPU); not counted: the kernel is not "
                "correct under that protocol, so no figure counts its speedup.")


def speedup_interval(record: dict[str, Any], baseline: str) -> tuple[float, float] | None:
    entry = ((record.get("speedup") or {}).get(baseline)) or {}
    low, high = finite_number(entry.get("ci_low")), finite_number(entry.get("ci_high"))
    return (low, high) if low is not None and high is not None else None


def ci_contains_one(record: dict[str, Any], baseline: str) -> bool:
    ci = speedup_interval(record, baseline)
    return ci is not None and ci[0] <= 1.0 <= ci[1]


def ratio_text(x: float) -> str:
    """A speedup or bound to two decimals, or to two significant digits below 0.1 (a kernel timed under the Triton
    interpreter runs at thousandths of the reference's speed: "0.00x" read as no figure at all)."""
    return f"{x:.2f}" if abs(x) >= 0.1 or x == 0 else f"{x:.2g}"


def speedup_text(value: float, ci: tuple[float, float] | None) -> str:
    """``1.02x [0.97, 1.07]``: a speedup and its interval (``ratio_text``)."""
    return f"{ratio_text(value)}x" + (f" [{ratio_text(ci[0])}, {ratio_text(ci[1])}]" if ci else "")


def speedup_figure(record: dict[str, Any], baseline: str) -> str | None:
    """A record's speedup under ``baseline`` with its interval (``speedup_text``), or None where it has none."""
    value = speedup_of(record, baseline)
    return None if value is None else speedup_text(value, speedup_interval(record, baseline))


def speedup_cell(record: dict[str, Any], baseline: str) -> str:
    """A speedup with its interval; marked when the interval contains 1.0, when the kernel is not correct under
    that protocol (so the figure does not count) and when it was timed under the Triton interpreter (the CPU)."""
    cell = speedup_figure(record, baseline)
    if cell is None:
        return "-"
    if ci_contains_one(record, baseline):
        cell += " ~1 (interval contains 1.0)"
    if triton_interpreted(record):
        cell += " (Triton interpreter)"
    verdict = record.get(VERDICT_KEY[baseline])
    if verdict != "correct":
        cell = f"({cell}; {verdict}, not counted)"
    return cell


def short_speedup_cell(record: dict[str, Any], baseline: str) -> str:
    """``speedup_cell`` for a narrow table, under the verdict: the same figures and marks in fewer words ("~1" alone
    for an interval that contains 1.0), then "Triton interpreter" and "not counted" (a kernel not correct under that
    protocol) each on a line of its own."""
    cell = speedup_figure(record, baseline)
    if cell is None:
        return "-"
    if ci_contains_one(record, baseline):
        cell += " ~1"
    if triton_interpreted(record):
        cell += "\nTriton interpreter"
    if record.get(VERDICT_KEY[baseline]) != "correct":
        cell += "\nnot counted"
    return cell


_speedup_cell = speedup_cell  # the name other modules used before


NOTE_CHARS = 100  # a per-candidate note longer than this ends in "…" (the record has the whole text)


def _shortened(text: str) -> str:
    return text if len(text) <= NOTE_CHARS else text[:NOTE_CHARS - 1].rstrip() + "…"


def failure_note(record: dict[str, Any]) -> str:
    auth = record.get("authenticated")  # kbv.verify_cmd.verified_records: unauthenticated, edited, forged, ...
    mark = f"{auth}; " if auth not in (None, "verified", "unverified") else ""
    if record.get("error"):
        err = record["error"]
        return mark + _shortened(f"{err.get('stage', '')}: {err.get('message', '')}")
    corr = record.get("correctness") or {}
    failed = corr.get("failed_distributions") or []
    if failed:
        dist = (corr.get("distributions") or {}).get(failed[0], {})
        return mark + _shortened(f"fails {', '.join(failed)}: {dist.get('reason', '')}")
    return mark.removesuffix("; ")


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


def _token_width(text: str) -> int:
    return max((len(w) for w in str(text).split()), default=0)


def fit_columns(header: list[str], rows: list[list[str]], width: int | None, keep: int = 2
                ) -> list[tuple[list[str], list[list[str]]]]:
    """Split a table's columns into tables that each fit ``width`` characters, so that no cell is ever cut inside
    a word or number (cells wrap only at spaces); the first ``keep`` columns (what a row is) repeat in each."""
    if not width or not header:
        return [(header, rows)]
    need = [max(_token_width(h), *(_token_width(r[i]) for r in rows)) + 3 if rows else _token_width(h) + 3
            for i, h in enumerate(header)]
    keep = min(keep, len(header))
    fixed = 1 + sum(need[:keep])
    chunks: list[list[int]] = []
    current: list[int] = []
    used = fixed
    for i in range(keep, len(header)):
        if current and used + need[i] > width:
            chunks.append(current)
            current, used = [], fixed
        current.append(i)
        used += need[i]
    if current or not chunks:
        chunks.append(current)
    out = []
    for chunk in chunks:
        idx = list(range(keep)) + chunk
        out.append(([header[i] for i in idx], [[row[i] for i in idx] for row in rows]))
    return out


# a figure as kbv prints one ("1.50x", "[1.40,", "12.3%", "1e-06", "0.98x]", "2.0 KiB" is two words): never folded
_NUMBER = re.compile(r"[(\[~]*[-+]?(\d[\d.,]*(e[-+]?\d+)?|inf|nan)(x|%|ms|s)?[)\],;:]*", re.IGNORECASE)
_FOLD_FLOOR = 8  # a word longer than the room left folds, down to this width (a number never does)


def _line_width(text: str) -> int:
    return max((len(line) for line in str(text).splitlines()), default=0)


def _number_width(text: str) -> int:
    return max((len(w) for w in str(text).split() if _NUMBER.fullmatch(w)), default=0)


def _column_widths(header: list[str], rows: list[list[str]], width: int | None
                   ) -> tuple[list[int | None], list[int]]:
    """(widths, least widths) that fit ``width`` with no number cut (rich's own shrinking may crop a table): each
    column at least its longest word, the room left shared in proportion to what each would take unwrapped. Where
    even the longest words do not fit (one long name or path), the longest words fold (a line break inside the
    word, nothing lost) rather than the table being cropped at the edge; numbers never fold."""
    least = [max([_token_width(h), *(_token_width(r[i]) for r in rows)]) for i, h in enumerate(header)]
    if not width:
        return [None] * len(header), least
    most = [max([_line_width(h), *(_line_width(r[i]) for r in rows)]) for i, h in enumerate(header)]
    room = width - (len(header) + 1) - 2 * len(header)  # borders and padding
    if sum(least) > room:
        floor = [max(min(n, _FOLD_FLOOR), _number_width(h), *(_number_width(r[i]) for r in rows))
                 for i, (h, n) in enumerate(zip(header, least))]
        while sum(least) > room:
            j = max(range(len(least)), key=lambda i: least[i] - floor[i])
            if least[j] <= floor[j]:
                break  # nothing left to fold: the table is wider than the terminal (printed whole, not cropped)
            least[j] -= 1
        return [min(n, m) for n, m in zip(least, most)], least
    if sum(most) <= room:
        return [None] * len(header), least
    spare = room - sum(least)
    want = [m - n for m, n in zip(most, least)]
    total = sum(want) or 1
    widths = [n + (spare * w) // total for n, w in zip(least, want)]
    return [min(w, m) for w, m in zip(widths, most)], least


def _rich_table(title: str, header: list[str], rows: list[list[str]], style_cols: Collection[int] = (),
                width: int | None = None, right: Collection[str] = ()) -> Table:
    table = Table(title=title)
    widths, least = _column_widths(header, rows, width)
    for i, col in enumerate(header):
        table.add_column(col, overflow="fold", width=widths[i], justify="right" if col in right else "left",
                         min_width=least[i])
    for row in rows:
        cells = list(row)
        for i in style_cols:
            first, sep, rest = cells[i].partition("\n")
            if first in _STYLE:  # the whole cell, or its first line (a verdict over a speedup)
                cells[i] = f"[{_STYLE[first]}]{first}[/]{sep}{rest}"
        table.add_row(*cells)
    return table


def print_table(console: Console, title: str, header: list[str], rows: list[list[str]],
                style: str | Collection[str] | None = None, keep: int = 2, right: Collection[str] = ()) -> None:
    """A table on the console, split by columns to the console's width (``COLUMNS``) so nothing is cut; ``style``
    names the columns whose verdicts (a cell, or a cell's first line) are coloured, ``right`` the columns aligned
    right (numbers)."""
    styled = {style} if isinstance(style, str) else set(style or ())
    chunks = fit_columns(header, rows, console.width, keep)
    for n, (h, r) in enumerate(chunks):
        style_cols = [i for i, col in enumerate(h) if col in styled]
        console.print(_rich_table(title if n == 0 else f"{title} (continued)", h, r, style_cols=style_cols,
                                  width=console.width, right=right), crop=False)


def print_candidates(console: Console, title: str, records: list[dict[str, Any]]) -> None:
    """The per-candidate table: every column of ``record_rows`` on a console at least ``WIDE_COLUMNS`` wide or
    where they fit in one table; else (80 columns, say) two narrow tables, verdicts and speedups
    (``compact_record_rows``) and then the rest (``record_detail_rows``), so that no row is split across tables."""
    header, rows = record_rows(records)
    width = console.width
    if not width or width >= WIDE_COLUMNS or len(fit_columns(header, rows, width, keep=1)) == 1:
        print_table(console, title, header, rows, style="verdict", keep=1)
        return
    print_table(console, title, *compact_record_rows(records), style=("verified", "standard"), keep=1)
    print_table(console, f"{title} (details)", *record_detail_rows(records), keep=1)
    console.print(COMPACT_NOTE, highlight=False)


TIME_NOTE = ("Where the time went: seconds per pair from the records' wall_seconds (compile is the build; a part is "
             "<stage>/<part>, and other is what no part was charged with); share: of the evaluation time "
             "(correctness plus performance) summed over the run's pairs.")


GPU_NOTE = ("The shared GPU (--gpu-share): from the records' env.timeline, from the first correctness stage asked for "
            "to the last timing left, the seconds a timing held the GPU alone, correctness stages ran (how many at "
            "once on average), only a timing's set-up or wind-down ran, and nothing of the run's ran.")


def gpu_rows(comparison: RunComparison) -> tuple[list[str], list[list[str]]]:
    """Each run on a shared GPU: its span and what held the GPU over it (``kbv.report.metrics.gpu_use``)."""
    header = ["run", "span s", "timing alone s", "correctness s", "correctness at once", "set-up only s", "idle s"]
    rows = []
    for run in comparison.runs:
        use = comparison.gpu_use.get(run)
        if use:
            inside = use.get("correctness_mean_inside")
            rows.append([run, f"{use['span_s']:.1f}", f"{use['alone_s']:.1f}", f"{use['correctness_s']:.1f}",
                         f"{inside:.2f}" if inside is not None else "-", f"{use['place_only_s']:.1f}",
                         f"{use['idle_s']:.1f}"])
    return header, rows


def time_rows(comparison: RunComparison) -> tuple[list[str], list[list[str]]]:
    """Each run's stages, then their parts (largest first): pairs, median and total seconds, share."""
    header = ["run", "stage / part", "pairs", "median s", "total s", "share"]
    rows = []
    for run in comparison.runs:
        for key, figures in comparison.time_spent.get(run, {}).items():
            name = key if "/" not in key else "  " + key.split("/", 1)[1]  # under its stage
            rows.append([run, name, f"{figures['pairs']:.0f}", f"{figures['median_s']:.2f}",
                         f"{figures['total_s']:.1f}", pct(figures["share"])])
    return header, rows


def print_report(comparison: RunComparison, console: Console | None = None, per_candidate: bool | None = None) -> None:
    console = console or Console()
    if per_candidate if per_candidate is not None else len(comparison.runs) == 1:
        for run in comparison.runs:
            print_candidates(console, f"Results per candidate: {run}", comparison.records[run])
    for title, cols in TERMINAL_TABLES:
        print_table(console, title, *_columns(summary_rows(comparison), cols))
    print_table(console, "From the standard to the verified figure (geomean speedup / fast_1), step by step",
                *decomposition_rows(comparison))
    for run in comparison.runs:
        overall = comparison.decomposition[run][-1]
        for line in mover_lines(overall, comparison.records[run]):
            console.print(f"  {run} {line}", highlight=False)
    family_cols = ("group", "run", "n", "correct ver|std", "DSL adoption", "fast_1 ver|std", "geomean ver|std",
                   "exploit rate")
    print_table(console, "Per problem family", *_columns(summary_rows(comparison, comparison.families), family_cols))
    if any(comparison.regimes.values()):
        print_table(console, "Memory- vs compute-bound", *_columns(
            summary_rows(comparison, comparison.regimes), family_cols + ("attainment",)))
    if comparison.generation:
        from kbv.study.figures import GENERATION_NOTE, generation_rows

        print_table(console, "Generation (every generated sample)", *generation_rows(comparison.generation), keep=1)
        console.print(GENERATION_NOTE, highlight=False)
    if comparison.agent:
        print_table(console, "Agent runs", *agent_rows(comparison.agent))
        console.print(AGENT_NOTE, highlight=False)
    if any(comparison.time_spent.values()):
        print_table(console, "Where the time went", *time_rows(comparison), keep=2,
                    right=("pairs", "median s", "total s", "share"))
        console.print(TIME_NOTE, highlight=False)
    if comparison.gpu_use:
        header, rows = gpu_rows(comparison)
        print_table(console, "The shared GPU", header, rows, keep=1, right=tuple(header[1:]))
        console.print(GPU_NOTE, highlight=False)
    console.print(
        f"Over {len(comparison.universe)} problem{'s' if len(comparison.universe) != 1 else ''}, one sample each "
        "(sample 0, else the lowest); missing kernels count as failed; "
        "two different candidates for one problem are separate runs. "
        "fast_p: share correct and faster than p x the baseline. exploit rate: share whose kernel passes D1 but fails "
        "D2-D6 or is rejected. S_agg: the suite's weights x roofline attainment, failures as 0. "
        "verified = D1-D6 checks and the TF32 baseline; "
        "standard = D1 + allclose(1e-2) and the fp32 (TF32 off) baseline. Speedups of kernels that are not correct "
        "are shown in parentheses and never counted. Definitions: kbv/report/metrics.py.", highlight=False
    )


def pair_block(record: dict[str, Any]) -> list[str]:
    """One evaluated pair as a compact block of lines: verdicts, failed distributions with their reasons, both
    speedups with intervals, memory, roofline and flags (what a single-pair ``kbv eval`` prints)."""
    lines = [f"{record.get('problem')}  <-  {candidate_name(record)} (sample {record.get('sample')})",
             f"  verdict: {record.get('verdict')}   standard protocol: {record.get('standard_verdict')}"]
    err = record.get("error")
    if isinstance(err, dict) and err:
        lines.append(f"  error ({err.get('stage', '?')}, {err.get('kind', '?')}): {err.get('message', '')}")
    corr = record.get("correctness") or {}
    dists = corr.get("distributions") or {}
    for name in corr.get("failed_distributions") or []:
        lines.append(f"  fails {name}: {(dists.get(name) or {}).get('reason', '')}")
    for baseline in ("verified", "standard"):
        if speedup_of(record, baseline) is not None:
            lines.append(f"  speedup {baseline}: {speedup_cell(record, baseline)}")
    mem = record.get("memory_bytes") or {}
    if mem.get("candidate_peak") is not None or mem.get("reference_peak") is not None:
        lines.append(f"  peak memory: kernel {human_bytes(mem.get('candidate_peak'))}, reference "
                     f"{human_bytes(mem.get('reference_peak'))}")
    att = attainment_of(record)
    if att is not None:
        lines.append(f"  roofline attainment: {attainment_cell(att, ceilings_source(record) == 'placeholder')}")
    lines.append(f"  flags: {', '.join(record.get('flags') or []) or '-'}")
    return lines


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
        for line in mover_lines(comparison.decomposition[run][-1], comparison.records[run]):
            parts.append(f"- {run} {line}")
    parts += ["", "## Per problem family", "", table(*summary_rows(comparison, comparison.families)), ""]
    if any(comparison.regimes.values()):
        parts += ["## Memory- vs compute-bound", "", table(*summary_rows(comparison, comparison.regimes)), ""]
    if comparison.generation:
        from kbv.study.figures import GENERATION_NOTE, generation_rows

        parts += ["## Generation", "", GENERATION_NOTE, "", table(*generation_rows(comparison.generation)), ""]
    if comparison.agent:
        parts += ["## Agent runs", "", AGENT_NOTE, "", table(*agent_rows(comparison.agent)), ""]
    if any(comparison.time_spent.values()):
        parts += ["## Where the time went", "", TIME_NOTE, "", table(*time_rows(comparison)), ""]
    if comparison.gpu_use:
        parts += ["## The shared GPU", "", GPU_NOTE, "", table(*gpu_rows(comparison)), ""]
    return "\n".join(parts)


CANDIDATE_FIELDS = ("run", "problem", "candidate", "candidate_sha256", "sample", "verdict", "standard_verdict",
                    "speedup_verified", "speedup_verified_ci_low", "speedup_verified_ci_high", "counted_verified",
                    "speedup_standard", "speedup_standard_ci_low", "speedup_standard_ci_high", "counted_standard",
                    "timing", "failed_distributions", "flags", "candidate_peak_bytes", "reference_peak_bytes",
                    "attainment", "ceilings_source", "error")


def candidate_rows(comparison: RunComparison) -> list[dict[str, Any]]:
    """One row per record of every run (all samples): what the per-candidate table shows, as plain values.
    ``counted_*``: whether the speedup counts (the kernel is correct under that protocol); ``timing``:
    ``triton_interpreter`` for Triton kernels timed on the CPU, else ``native``."""
    rows = []
    for run in comparison.runs:
        for r in comparison.records[run]:
            mem = r.get("memory_bytes") or {}
            err = r.get("error") if isinstance(r.get("error"), dict) else None
            row: dict[str, Any] = {"run": run, "problem": r.get("problem"), "candidate": r.get("candidate"),
                                   "candidate_sha256": r.get("candidate_sha256"), "sample": r.get("sample"),
                                   "verdict": r.get("verdict"), "standard_verdict": r.get("standard_verdict")}
            for baseline in ("verified", "standard"):
                ci = speedup_interval(r, baseline)
                row[f"speedup_{baseline}"] = speedup_of(r, baseline)
                row[f"speedup_{baseline}_ci_low"], row[f"speedup_{baseline}_ci_high"] = ci if ci else (None, None)
                row[f"counted_{baseline}"] = r.get(VERDICT_KEY[baseline]) == "correct"
            row.update(timing="triton_interpreter" if triton_interpreted(r) else "native",
                       failed_distributions=list((r.get("correctness") or {}).get("failed_distributions") or []),
                       flags=list(r.get("flags") or []), candidate_peak_bytes=finite_number(mem.get("candidate_peak")),
                       reference_peak_bytes=finite_number(mem.get("reference_peak")), attainment=attainment_of(r),
                       ceilings_source=ceilings_source(r),
                       error=f"{err.get('stage', '')}: {err.get('message', '')}" if err else None)
            rows.append({k: row[k] for k in CANDIDATE_FIELDS})
    return rows


def json_report(comparison: RunComparison) -> str:
    data = asdict(comparison)
    data.pop("records")
    data["candidates"] = candidate_rows(comparison)
    if comparison.agent:  # "agent" holds the summaries as kbv.agent.audit gives them; these are derived from them
        data["agent_figures"] = {run: [agent_figures(s) for s in summaries]
                                 for run, summaries in comparison.agent.items()}
    return json.dumps(data, indent=2, default=str)


def csv_report(comparison: RunComparison) -> str:
    """Group rows (kind level, family, regime) and then one row per record (kind candidate, with the columns of
    ``CANDIDATE_FIELDS`` after the group columns; lists joined with ';'); with agent runs, one row per (run,
    problem) of kind agent, with ``kbv.report.agent.AGENT_FIELDS`` (prefixed ``agent_``) after all the others."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    fields = [f for f in GroupSummary.__dataclass_fields__ if f not in ("fast_p_verified", "fast_p_standard",
                                                                         "pass_at_k")]
    extra = [f for f in CANDIDATE_FIELDS if f != "run"]
    group_width = len(fields) + 2 * len(FAST_P_THRESHOLDS)
    agent_cols = [f"agent_{f}" for f in AGENT_FIELDS] if comparison.agent else []
    writer.writerow(["kind", "run", *fields, *[f"fast_{p:g}_verified" for p in FAST_P_THRESHOLDS],
                     *[f"fast_{p:g}_standard" for p in FAST_P_THRESHOLDS], *extra, *agent_cols])
    for kind, groups in (("level", comparison.levels), ("family", comparison.families),
                         ("regime", comparison.regimes)):
        for run in comparison.runs:
            for g in groups.get(run, []):
                writer.writerow([kind, run, *[getattr(g, f) for f in fields],
                                 *[g.fast_p_verified[p] for p in FAST_P_THRESHOLDS],
                                 *[g.fast_p_standard[p] for p in FAST_P_THRESHOLDS], *[""] * len(extra),
                                 *[""] * len(agent_cols)])
    for row in candidate_rows(comparison):
        cells = [";".join(map(str, v)) if isinstance(v, list) else ("" if v is None else v)
                 for v in (row[f] for f in extra)]
        writer.writerow(["candidate", row["run"], *[""] * group_width, *cells, *[""] * len(agent_cols)])
    for run, summaries in comparison.agent.items():
        for s in summaries:
            figures = agent_figures(s)
            values = [";".join("" if x is None else str(x) for x in v) if isinstance(v, list)
                      else ("" if v is None else v) for v in (figures[f] for f in AGENT_FIELDS)]
            writer.writerow(["agent", run, *[""] * (group_width + len(extra)), *values])
    return buf.getvalue()
