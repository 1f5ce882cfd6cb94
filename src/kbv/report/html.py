"""A comparison of runs as one self-contained HTML page (figures come from ``kbv.report.metrics``, plots from
``kbv.report.plots``).

The page needs nothing from the network: the CSS is inline, there is no script, and the plots are embedded as
base64 PNG data URIs. A Content-Security-Policy meta tag forbids every other source, so a browser opening the file
fetches nothing even if a record smuggled markup in. Every string that comes from a record (problem names,
verdicts, flags, messages, run labels) is escaped with ``html.escape``: records come from untrusted runs.
"""

from __future__ import annotations

import base64
import html
import io
import re
from pathlib import Path
from typing import Any, Callable, Iterable

from kbv.report.agent import AGENT_NOTE, agent_rows
from kbv.report.metrics import (Decomposition, GroupSummary, RunComparison, attainment_of, finite_number)
from kbv.report.text import (GPU_NOTE, NO_TF32_EFFECT, TIME_NOTE, ceilings_source, gpu_rows, group_records,
                             human_bytes, pct, speedup_cell, tf32_possible, time_rows, times)
from kbv.protocol import FAST_P_THRESHOLDS, VERDICT_PRECEDENCE

CSS_PX_PER_INCH = 96
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
VERDICT_CLASS = {v: f"v-{v.replace('_', '-')}" for v in VERDICT_PRECEDENCE}  # only known verdicts get a class
EFFECT_STEPS = ("(a) TF32 baseline", "(b) hidden distributions", "(c) hack rejection")
PLOT_CAPTIONS = {
    "fast_p": "fast_p against the threshold p, per run: verified (solid) and standard (dashed) protocols.",
    "speedup_distribution": "Speedups of correct kernels under each protocol's own baseline (log scale); "
                            "the diamond is the geometric mean.",
    "speedup_vs_memory": "Verified speedup against the memory ratio (reference peak / kernel peak) of kernels "
                         "correct under the verified protocol.",
    "roofline": "Roofline attainment against arithmetic intensity.",
    "per_level": "Correct rate and fast_1 per level under both protocols.",
    "pass_at_k": "pass@k against k over every generated sample: verified (solid) and standard (dashed).",
    "tokens_vs_speedup": "Output tokens of each verified-correct sample against its verified speedup (log scales).",
    "agent_tokens_vs_attainment": "Agent runs: tokens spent so far against the roofline attainment of the best "
                                  "kernel, per problem.",
    "agent_best_speedup_per_iteration": "Agent runs: the best verified speedup so far at each iteration, per "
                                        "problem (log scale).",
}

CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       margin: 24px 32px; color: #1b1f24; background: #ffffff; font-size: 14px; line-height: 1.4; }
h1 { font-size: 24px; margin: 0 0 6px 0; }
h2 { font-size: 19px; margin: 32px 0 8px 0; padding-bottom: 4px; border-bottom: 2px solid #d0d7de; }
h3 { font-size: 15px; margin: 18px 0 6px 0; }
p.note, .note { color: #57606a; font-size: 12.5px; max-width: 1100px; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 6px 0 12px 0; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; vertical-align: top; }
th { background: #f2f4f7; text-align: center; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.label, th.label { text-align: left; white-space: nowrap; }
tbody tr:nth-child(even) td { background: #fafbfc; }
tr.sep td { border-top: 2px solid #8c959f; }
tr.effect td { color: #3d4751; font-style: italic; }
tr.total td { font-weight: 600; }
td.moved { font-size: 12px; max-width: 520px; }
td.wrap { min-width: 100px; max-width: 320px; overflow-wrap: break-word; font-size: 12px; }
td.failed { min-width: 190px; }
table.candidates td, table.candidates th { padding: 2px 5px; }
table.groups td, table.groups th { padding: 3px 6px; }
td.problem { white-space: normal; overflow-wrap: anywhere; min-width: 235px; max-width: 280px; }
.std { color: #57606a; }
.sep-bar { color: #8c959f; padding: 0 2px; }
.v-correct { color: #1a7f37; font-weight: 600; }
.v-incorrect { color: #cf222e; font-weight: 600; }
.v-rejected { color: #8250df; font-weight: 600; }
.v-compile-error, .v-runtime-error, .v-timeout { color: #9a6700; font-weight: 600; }
.run-chip { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px; }
.plots { display: flex; flex-wrap: wrap; gap: 18px; align-items: flex-start; }
figure { margin: 0; border: 1px solid #d0d7de; border-radius: 6px; padding: 8px; background: #fff;
         box-sizing: border-box; flex: 0 1 auto; min-width: 0; }
figure img { max-width: 100%; height: auto; display: block; }
figcaption { color: #57606a; font-size: 12.5px; margin-top: 4px; }
ul.meta { margin: 4px 0; padding-left: 20px; }
"""


# ---------------------------------------------------------------------------------------------------------------
# Formatting (every value passes through one of these; strings from records through ``esc``)


def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)








def signed_times(x: Any) -> str:
    x = finite_number(x)
    return "-" if x is None else f"{x:+.2f}x"


def signed_points(x: Any) -> str:
    x = finite_number(x)
    return "-" if x is None else f"{100 * x:+.0f} pts"


def plain(x: Any, digits: int = 2) -> str:
    x = finite_number(x)
    return "-" if x is None else f"{x:.{digits}f}"




def pair(verified: str, standard: str) -> str:
    """A verified | standard cell (both already formatted, no record text)."""
    return f'{verified}<span class="sep-bar">|</span><span class="std">{standard}</span>'


def verdict_html(verdict: Any) -> str:
    cls = VERDICT_CLASS.get(verdict) if isinstance(verdict, str) else None
    text = esc(verdict if verdict is not None else "-")
    return f'<span class="{cls}">{text}</span>' if cls else text


def _td(content: str, cls: str = "num", attrs: str = "") -> str:
    return f'<td class="{cls}"{attrs}>{content}</td>'


def _table(header_rows: list[str], body_rows: Iterable[str], cls: str = "") -> str:
    head = "".join(f"<tr>{h}</tr>" for h in header_rows)
    body = "".join(body_rows)
    return f'<div class="scroll"><table class="{cls}"><thead>{head}</thead><tbody>{body}</tbody></table></div>'


def _chip(comparison: RunComparison, run: str) -> str:
    from kbv.report.plots import run_colour  # no matplotlib needed

    return f'<span class="run-chip" style="background:{run_colour(comparison, run)}"></span>'


# ---------------------------------------------------------------------------------------------------------------
# Group summaries (levels, families, regimes): metrics as rows, (group, run) as columns


def _group_metrics(groups: list[GroupSummary]) -> list[tuple[str, Callable[[GroupSummary], str]]]:
    """The rows of a summary table; rows that only ever show '-' (no data of that kind) are left out."""
    ks = sorted({k for g in groups for k in g.pass_at_k})
    rows: list[tuple[str, Callable[[GroupSummary], str], bool]] = [
        ("problems (n)", lambda g: str(g.n), True),
        ("compiled", lambda g: pct(g.compiled), True),
        ("correct ver | std", lambda g: pair(pct(g.correct_verified), pct(g.correct_standard)), True),
        ("DSL adoption", lambda g: pct(g.dsl_adoption), any(g.dsl_adoption is not None for g in groups)),
    ]
    for p in FAST_P_THRESHOLDS:
        rows.append((f"fast_{p:g} ver | std",
                     lambda g, p=p: pair(pct(g.fast_p_verified.get(p)), pct(g.fast_p_standard.get(p))), True))
    rows += [
        ("geomean speedup ver | std", lambda g: pair(times(g.geomean_verified), times(g.geomean_standard)), True),
        ("geomean, failures as 1.0 ver | std",
         lambda g: pair(times(g.geomean_all_verified), times(g.geomean_all_standard)), True),
        ("correct but slower", lambda g: pct(g.correct_but_slower), True),
        ("memory efficiency", lambda g: pct(g.memory_efficiency), True),
        ("memory ratio ref/kernel (leaderboard)", lambda g: times(g.memory_leaderboard_ratio), True),
        ("raised peak memory", lambda g: pct(g.memory_raised_share), True),
        ("exploit rate", lambda g: pct(g.exploit_rate), True),
        ("roofline attainment (median)", lambda g: plain(g.attainment_median),
         any(g.attainment_median is not None for g in groups)),
        ("S_agg", lambda g: plain(g.s_agg, 3), any(g.s_agg is not None for g in groups)),
    ]
    for k in ks:
        rows.append((f"pass@{k}", lambda g, k=k: pct(g.pass_at_k.get(k)), True))
    return [(name, fn) for name, fn, shown in rows if shown]


def group_table(comparison: RunComparison, groups: dict[str, list[GroupSummary]], what: str) -> str:
    names = list(dict.fromkeys(g.name for run in comparison.runs for g in groups.get(run, [])))
    if not names:
        return ""
    lookup = {(run, g.name): g for run in comparison.runs for g in groups.get(run, [])}
    runs = comparison.runs
    top = f'<th class="label" rowspan="2">{esc(what)}</th>' + "".join(
        f'<th colspan="{len(runs)}">{esc(name)}</th>' for name in names)
    second = "".join(f"<th>{_chip(comparison, run)}{esc(run)}</th>" for _ in names for run in runs)
    body = []
    for label, fn in _group_metrics(list(lookup.values())):
        cells = "".join(_td(fn(lookup[(run, name)]) if (run, name) in lookup else "-")
                        for name in names for run in runs)
        body.append(f'<tr>{_td(esc(label), "label")}{cells}</tr>')
    return _table([top, second], body, "summary")


COMPACT = {"problems (n)": "n", "correct ver | std": "correct", "fast_1 ver | std": "fast_1",
           "geomean speedup ver | std": "geomean",
           "memory efficiency": "mem. eff.", "exploit rate": "exploit", "roofline attainment (median)": "attainment",
           "S_agg": "S_agg"}


def compact_group_table(comparison: RunComparison, groups: dict[str, list[GroupSummary]], what: str) -> str:
    """Groups as rows (many of them: families), a few metrics per run as columns."""
    names = list(dict.fromkeys(g.name for run in comparison.runs for g in groups.get(run, [])))
    if not names:
        return ""
    lookup = {(run, g.name): g for run in comparison.runs for g in groups.get(run, [])}
    metrics = [(COMPACT[label], fn) for label, fn in _group_metrics(list(lookup.values())) if label in COMPACT]
    runs = comparison.runs
    top = f'<th class="label" rowspan="2">{esc(what)}</th>' + "".join(
        f'<th colspan="{len(metrics)}">{_chip(comparison, run)}{esc(run)}</th>' for run in runs)
    second = "".join(f"<th>{esc(label)}</th>" for _ in runs for label, _ in metrics)
    body = []
    for name in names:
        cells = "".join(_td(fn(lookup[(run, name)]) if (run, name) in lookup else "-")
                        for run in runs for _, fn in metrics)
        body.append(f'<tr>{_td(esc(name), "label")}{cells}</tr>')
    return _table([top, second], body, "groups")


# ---------------------------------------------------------------------------------------------------------------
# Decomposition of the standard -> verified drop


def _moved_html(step_name: str, moved: list[dict[str, Any]]) -> str:
    parts = []
    for m in moved or []:
        if not isinstance(m, dict):
            continue
        s, v = m.get("standard"), m.get("verified")
        if step_name.startswith("(a)"):
            note = f"{times(s)} &rarr; {times(v)}"
        else:
            failed = m.get("failed")
            failed_txt = ", ".join(str(f) for f in failed) if isinstance(failed, (list, tuple)) else ""
            note = f"standard {times(s)}, {verdict_html(m.get('verdict'))}"
            if failed_txt:
                note += f" (fails {esc(failed_txt)})"
        parts.append(f"<b>{esc(m.get('problem'))}</b> {note}")
    return "; ".join(parts) if parts else ""


def decomposition_table(comparison: RunComparison, run: str) -> str:
    decomps: list[Decomposition] = comparison.decomposition.get(run, [])
    if not decomps:
        return ""
    header = ('<th class="label">group</th><th class="label">step</th><th>kernels</th><th>geomean</th>'
              '<th>fast_1</th><th>&Delta; geomean</th><th>&Delta; fast_1</th><th class="label">moved most</th>')
    body = []
    for d in decomps:
        # (row class, step, kernels, geomean, fast_1, delta geomean, delta fast_1, moved), all HTML already
        rows: list[tuple[str, str, str, str, str, str, str, str]] = []
        no_tf32 = not tf32_possible(group_records(comparison, run, d.group))
        for step in d.steps:
            effect = d.effects.get(step.name) or {}
            if no_tf32 and step.name.startswith("(a)"):
                rows.append(("", esc(step.name), str(step.kernels), times(step.geomean), pct(step.fast_1),
                             NO_TF32_EFFECT, "", ""))
                continue
            if step.name == "verified":
                residual = d.effects.get("residual") or {}
                rows.append(("effect", "residual (stricter D1 checks, kernels only the verified check accepts)",
                             "", "", "", signed_times(residual.get("geomean")),
                             signed_points(residual.get("fast_1")), ""))
            rows.append(("", esc(step.name), str(step.kernels), times(step.geomean), pct(step.fast_1),
                         signed_times(effect.get("geomean")) if effect else "",
                         signed_points(effect.get("fast_1")) if effect else "",
                         _moved_html(step.name, step.moved)))
        total = d.effects.get("total") or {}
        rows.append(("total", "total: standard &rarr; verified", "", "", "", signed_times(total.get("geomean")),
                     signed_points(total.get("fast_1")), ""))
        for i, (cls, step, kernels, g, f, dg, df, moved) in enumerate(rows):
            classes = " ".join(c for c in (cls, "sep" if i == 0 else "") if c)
            group_cell = _td(esc(d.group), "label", f' rowspan="{len(rows)}"') if i == 0 else ""
            body.append(f'<tr class="{classes}">{group_cell}{_td(step, "label")}{_td(kernels)}{_td(g)}'
                        f'{_td(f)}{_td(dg)}{_td(df)}{_td(moved, "moved")}</tr>')
    return _table([header], body, "decomposition")


# ---------------------------------------------------------------------------------------------------------------
# Per candidate


def _speedup_cell(record: dict[str, Any], baseline: str) -> str:
    """As the terminal shows it (kbv.report.text.speedup_cell): the interval, ~1 where it contains 1.0, the
    Triton interpreter, and in parentheses, not counted, for a kernel that is not correct."""
    return esc(speedup_cell(record, baseline))


def _failed_cell(record: dict[str, Any]) -> str:
    corr = record.get("correctness") if isinstance(record.get("correctness"), dict) else {}
    failed = corr.get("failed_distributions") if isinstance(corr.get("failed_distributions"), list) else []
    dists = corr.get("distributions") if isinstance(corr.get("distributions"), dict) else {}
    parts = []
    for name in failed:
        name = str(name)
        dist = dists.get(name) if isinstance(dists.get(name), dict) else {}
        reason = dist.get("reason")
        text = f"<b>{esc(name)}</b>"
        if reason:
            text += f": {esc(str(reason)[:160])}"
        parts.append(text)
    error = record.get("error")
    if isinstance(error, dict) and error:
        parts.append(f"<i>{esc(error.get('stage', ''))}</i>: {esc(str(error.get('message', ''))[:200])}")
    return "<br>".join(parts)


def candidate_table(comparison: RunComparison) -> str:
    header = ('<th class="label">problem</th><th>sample</th><th class="label">run</th><th>verdict</th>'
              '<th>standard verdict</th><th>speedup verified [95% CI]</th><th>speedup standard [95% CI]</th>'
              '<th>peak memory kernel / ref</th><th class="label">flags</th>'
              '<th class="label">failed distributions / error</th>')
    rows = []
    for i, run in enumerate(comparison.runs):
        for r in comparison.records.get(run, []):
            if isinstance(r, dict):
                rows.append((str(r.get("problem")), _sample(r), i, run, r))
    rows.sort(key=lambda x: (natural_key(x[0]), x[1], x[2]))
    body = []
    previous = None
    for problem, sample, _, run, r in rows:
        mem = r.get("memory_bytes") if isinstance(r.get("memory_bytes"), dict) else {}
        flags = r.get("flags") if isinstance(r.get("flags"), list) else []
        cls = ' class="sep"' if previous is not None and previous != (problem, sample) else ""
        previous = (problem, sample)
        body.append(
            f"<tr{cls}>{_td(esc(problem), 'label problem')}{_td(esc(r.get('sample')))}"
            f"{_td(_chip(comparison, run) + esc(run), 'label')}"
            f"{_td(verdict_html(r.get('verdict')), 'label')}{_td(verdict_html(r.get('standard_verdict')), 'label')}"
            f"{_td(_speedup_cell(r, 'verified'))}{_td(_speedup_cell(r, 'standard'))}"
            f"{_td(human_bytes(mem.get('candidate_peak')) + ' / ' + human_bytes(mem.get('reference_peak')))}"
            f"{_td(esc(', '.join(str(f) for f in flags)), 'wrap')}{_td(_failed_cell(r), 'wrap failed')}</tr>")
    return _table([header], body, "candidates")


def natural_key(text: str) -> list[Any]:
    """``level1/2_x`` before ``level1/10_y``."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text)]


def _sample(record: dict[str, Any]) -> int:
    try:
        return int(record.get("sample", 0))
    except (TypeError, ValueError):
        return 0


# ---------------------------------------------------------------------------------------------------------------
# Plots


def plot_images(comparison: RunComparison) -> tuple[dict[str, tuple[str, int]], str | None]:
    """Every available plot as (base64 PNG data URI, width in CSS px), by name; and why there are none, when
    matplotlib is absent. The PNG has twice the pixels of its CSS size, so it is sharp on high-density screens and
    its text shows at the figure's point size at 100% zoom."""
    from kbv.report import plots

    images, failures = {}, []
    for name, make in plots.FIGURES.items():
        try:
            fig = make(comparison)
        except ImportError as exc:
            return {}, f"plots left out: matplotlib is not installed ({exc})"
        except Exception as exc:  # one odd record must not cost the whole report
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if fig is None:
            continue
        try:
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png", dpi=2 * CSS_PX_PER_INCH, metadata={"Software": None})
            uri = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
            images[name] = (uri, round(fig.get_figwidth() * CSS_PX_PER_INCH))
        finally:
            plots.close(fig)
    return images, ("plots that failed: " + "; ".join(failures)) if failures else None


def plots_section(comparison: RunComparison) -> str:
    images, why = plot_images(comparison)
    note = f'<p class="note">{esc(why)}</p>' if why else ""
    if not images:
        return note or '<p class="note">No plots: the records carry no data to plot.</p>'
    figures = "".join(
        f'<figure id="plot-{name}" style="max-width:{width + 18}px"><img src="{uri}" width="{width}" '
        f'alt="{esc(name)} plot"><figcaption>{esc(PLOT_CAPTIONS.get(name, name))}</figcaption></figure>'
        for name, (uri, width) in images.items())
    return f'{note}<div class="plots">{figures}</div>'


# ---------------------------------------------------------------------------------------------------------------
# The page


def _run_meta(comparison: RunComparison) -> str:
    items = []
    for run in comparison.runs:
        records = [r for r in comparison.records.get(run, []) if isinstance(r, dict)]
        envs = [r.get("env") for r in records if isinstance(r.get("env"), dict)]
        details = []
        if envs:
            env = envs[0]
            device = env.get("device") if isinstance(env.get("device"), dict) else {}
            for label, value in (("device", device.get("name") or env.get("device_kind")), ("torch", env.get("torch")),
                                 ("CUDA", env.get("cuda")), ("precision", env.get("precision")),
                                 ("kbv", env.get("kbv"))):
                if value:
                    details.append(f"{label} {esc(value)}")
        samples = len({(str(r.get("problem")), _sample(r)) for r in records})
        problems = len({str(r.get("problem")) for r in records})
        items.append(f"<li>{_chip(comparison, run)}<b>{esc(run)}</b>: {samples} candidates on {problems} problems"
                     + (f" ({', '.join(details)})" if details else "") + "</li>")
    return f'<ul class="meta">{"".join(items)}</ul>'


DEFINITIONS = (
    "Figures are defined in kbv/metrics.py. One sample per problem (sample 0, or the lowest present) for every "
    "figure except pass@k; rates and fast_p count over every problem of the universe, a missing or failed kernel "
    "counting as not correct. <b>verified</b> = checks on D1-D6 and the TF32 baseline; <b>standard</b> = "
    "KernelBench's D1 + allclose(1e-2) and the fp32 (TF32 off) baseline. fast_p: correct and faster than p x the "
    "baseline. Geomean speedups are over correct kernels; 'failures as 1.0' is BackendBench's figure over every "
    "problem. Memory efficiency: share of verified-correct kernels whose peak memory is not above the reference's. "
    "Exploit rate: share of problems whose kernel passes D1 but fails D2-D6, or is rejected."
)


def _placeholder_note(comparison: RunComparison) -> str:
    """A warning where roofline attainments rest on placeholder ceilings (the CPU) or exceed 1."""
    records = [r for run in comparison.runs for r in comparison.records.get(run, []) if isinstance(r, dict)]
    notes = []
    if any(ceilings_source(r) == "placeholder" for r in records):
        notes.append("Roofline attainment here uses <b>placeholder ceilings</b> (the CPU entry: not a datasheet; "
                     "run <code>kbv calibrate</code> to measure them): read it as a rough scale only.")
    if any((a := attainment_of(r)) is not None and a > 1 for r in records):
        notes.append("Some attainments are <b>above 1 (suspect)</b>: faster than the bound, so the bound or the "
                     "timing is wrong.")
    return f'<p class="note warn">{" ".join(notes)}</p>' if notes else ""


def _generation_section(comparison: RunComparison) -> str:
    if not comparison.generation:
        return ""
    from kbv.study.figures import generation_html

    return generation_html(comparison.generation)


def agent_section(comparison: RunComparison) -> str:
    """The "Agent runs" table (``kbv.report.agent.agent_rows``), every cell escaped."""
    if not comparison.agent:
        return ""
    header, rows = agent_rows(comparison.agent)
    head = "".join(f'<th class="label">{esc(h)}</th>' if i < 2 else f"<th>{esc(h)}</th>"
                   for i, h in enumerate(header))
    classes = ["label" if i < 2 or h in ("final", "stop") else "wrap" if h == "best speedup series" else "num"
               for i, h in enumerate(header)]
    body = ["<tr>" + "".join(_td(esc(c), cls) for c, cls in zip(row, classes)) + "</tr>" for row in rows]
    return f'<h2 id="agent">Agent runs</h2><p class="note">{esc(AGENT_NOTE)}</p>' + _table([head], body, "agent")


def _figures_section(section_id: str, title: str, note: str, header: list[str], rows: list[list[str]],
                     labels: int) -> str:
    """A titled table of figures: its first ``labels`` columns labels, the rest numbers, every cell escaped."""
    head = "".join(f'<th class="label">{esc(h)}</th>' if i < labels else f"<th>{esc(h)}</th>"
                   for i, h in enumerate(header))
    body = ["<tr>" + "".join(_td(esc(c), "label" if i < labels else "num") for i, c in enumerate(row)) + "</tr>"
            for row in rows]
    return f'<h2 id="{section_id}">{esc(title)}</h2><p class="note">{esc(note)}</p>' + _table([head], body, section_id)


def time_section(comparison: RunComparison) -> str:
    """The "Where the time went" table (``kbv.report.text.time_rows``), every cell escaped."""
    if not any(comparison.time_spent.values()):
        return ""
    return _figures_section("time", "Where the time went", TIME_NOTE, *time_rows(comparison), labels=2)


def gpu_section(comparison: RunComparison) -> str:
    """The "The shared GPU" table (``kbv.report.text.gpu_rows``), every cell escaped; empty without a shared GPU."""
    if not comparison.gpu_use:
        return ""
    return _figures_section("gpu", "The shared GPU", GPU_NOTE, *gpu_rows(comparison), labels=1)


def render_html(comparison: RunComparison, title: str = "kbv report") -> str:
    """The whole report as one self-contained HTML page."""
    sections = [
        f"<h1>{esc(title)}</h1>",
        f'<p class="note">{len(comparison.runs)} run(s) over a universe of {len(comparison.universe)} problems.</p>',
        _run_meta(comparison),
        '<h2 id="summary">Summary per level</h2>',
        f'<p class="note">{DEFINITIONS}</p>',
        group_table(comparison, comparison.levels, "level"),
        _placeholder_note(comparison),
        _generation_section(comparison),
        agent_section(comparison),
        time_section(comparison),
        gpu_section(comparison),
        '<h2 id="plots">Plots</h2>',
        plots_section(comparison),
        '<h2 id="decomposition">From the standard to the verified figure</h2>',
        '<p class="note">The drop from the standard to the verified geometric-mean speedup and fast_1, in steps '
        "applied one after another so they add up: (a) the same standard-correct kernels timed against the TF32 "
        "baseline; (b) minus kernels that pass D1 but fail D2-D6; (c) minus rejected kernels; the residual is what "
        "remains between that and the verified figure. &Delta; is each step's change from the row above.</p>",
    ]
    for run in comparison.runs:
        sections.append(f"<h3>{_chip(comparison, run)}{esc(run)}</h3>")
        sections.append(decomposition_table(comparison, run))
    sections += ['<h2 id="families">Per problem family</h2>',
                 '<p class="note">Families by keyword in the problem\'s name (kbv.report.metrics.FAMILIES); level-3 '
                 "problems are whole models. Pairs read verified | standard; definitions as in the summary.</p>",
                 compact_group_table(comparison, comparison.families, "family")]
    if any(comparison.regimes.get(run) for run in comparison.runs):
        sections += ['<h2 id="regimes">Per roofline regime</h2>',
                     '<p class="note">Regime from the records\' roofline sections; the universe of each regime is '
                     "the problems whose record carries it.</p>",
                     compact_group_table(comparison, comparison.regimes, "regime")]
    sections += ['<h2 id="candidates">Per candidate</h2>', candidate_table(comparison)]
    body = "\n".join(s for s in sections if s)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )


def write_html(comparison: RunComparison, path: str | Path, title: str = "kbv report") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(comparison, title), encoding="utf-8")
    return path
