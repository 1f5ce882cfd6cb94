"""Figures of a comparison of runs (``kbv.report.metrics.RunComparison``) as matplotlib figures, PNG and SVG files.

matplotlib is imported inside the functions (with the non-interactive Agg backend), so ``import kbv.report.plots`` works
without it. Every figure function takes a RunComparison and returns a matplotlib Figure, or None when the
comparison has no data for it (no roofline sections, no timed correct kernels, ...). The figures show only figures
``kbv.report.metrics`` defines, over the same records it counts (one sample per problem: sample 0 or the lowest present).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from kbv.report.agent import best_speedups, tokens_vs_attainment
from kbv.report.metrics import (
    RunComparison,
    attainment_of,
    is_correct,
    one_per_problem,
    roofline_of,
)
from kbv.report.metrics import finite_number
from kbv.report.metrics import speedup_of as _speedup_of

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

PROTOCOLS = ("verified", "standard")  # drawn in this order; verified solid, standard dashed
LINESTYLE = {"verified": "-", "standard": "--"}
# Tableau's ten colours, one per run (cycled beyond ten).
RUN_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf")
PLOT_NAMES = ("fast_p", "speedup_distribution", "speedup_vs_memory", "roofline", "per_level")
FORMATS = ("png", "svg")
PNG_DPI = 110  # files; the HTML page embeds at twice its CSS size (see kbv.report.html)


STYLE = {"font.size": 11, "axes.titlesize": 13, "axes.labelsize": 11, "legend.fontsize": 9.5, "axes.grid": True,
         "grid.alpha": 0.3}
# Read when a figure is saved: SVG text as paths (shows the same without the font) and stable element ids.
SAVE_STYLE = {"svg.fonttype": "path", "svg.hashsalt": "kbv"}


def _plt():
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(f"kbv's plots need matplotlib (pip install matplotlib): {exc}") from exc

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _styled(make: Callable[[RunComparison], Any]) -> Callable[[RunComparison], Any]:
    """Build the figure under kbv's style without touching the caller's global matplotlib settings."""

    @functools.wraps(make)
    def wrapper(comparison: RunComparison) -> Any:
        with _plt().rc_context(STYLE):
            return make(comparison)

    return wrapper


def _text(label: str) -> str:
    """A run label as literal text (a '$' would otherwise start matplotlib's mathtext)."""
    return str(label).replace("$", r"\$")


def run_colour(comparison: RunComparison, run: str) -> str:
    return RUN_COLOURS[comparison.runs.index(run) % len(RUN_COLOURS)]


def _chosen(comparison: RunComparison, run: str) -> list[dict[str, Any]]:
    """The records the figures count: one per problem, in universe order."""
    chosen = one_per_problem(comparison.records.get(run, []))
    return [chosen[k] for k in sorted(chosen)]


def _horizontal() -> dict[str, Any]:
    """boxplot's horizontal orientation (``orientation`` since matplotlib 3.10, ``vert`` before)."""
    import matplotlib

    major, minor = (int(x) for x in matplotlib.__version__.split(".")[:2])
    return {"orientation": "horizontal"} if (major, minor) >= (3, 10) else {"vert": False}


def _log_axis(axis: Any, suffix: str = "") -> None:
    """Ticks of a log axis (limits already set) labelled as plain numbers (0.5x, 1x, 2x), not 5x10^-1: evenly
    spaced values over less than a decade, 1-2-5 per decade up to three decades, powers of ten beyond."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    low, high = sorted(axis.get_view_interval())
    decades = math.log10(high / low) if low > 0 else 10.0
    if decades < 1.0:
        locator: Any = MaxNLocator(nbins=7, steps=[1, 2, 2.5, 5, 10])
    else:
        locator = LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 3 else (1.0,))
    axis.set_major_locator(locator)
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}{suffix}"))
    axis.set_minor_formatter(NullFormatter())


MARKERS = "osD^v<>ph*"


def _speedup(record: dict[str, Any], baseline: str) -> float | None:
    value = _speedup_of(record, baseline)
    return value if value is not None and math.isfinite(value) else None




# ---------------------------------------------------------------------------------------------------------------
# Figures


@_styled
def fast_p_curves(comparison: RunComparison) -> Figure | None:
    """fast_p against p from 0 to 3: one line per run and protocol (verified solid, standard dashed)."""
    lines = []
    for run in comparison.runs:
        for protocol in PROTOCOLS:
            points = [(p, v) for p, v in comparison.fast_p_curves.get(run, {}).get(protocol, []) if v is not None]
            if points:
                lines.append((run, protocol, points))
    if not lines:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 4.8), layout="constrained")
    for run, protocol, points in lines:
        ax.plot([p for p, _ in points], [100 * v for _, v in points], LINESTYLE[protocol], drawstyle="steps-post",
                color=run_colour(comparison, run), linewidth=2.2, label=f"{_text(run)} ({protocol})")
    ax.axvline(1.0, color="0.4", linewidth=1, linestyle=":")
    ax.set_xlim(0, 3)
    ax.set_ylim(0, 100)
    ax.set_xlabel("speedup threshold p (x the baseline)")
    ax.set_ylabel("fast_p: correct and faster than p (% of problems)")
    ax.set_title(f"fast_p curves over {len(comparison.universe)} problems (verified solid, standard dashed)")
    ax.legend(loc="upper right")
    return fig


@_styled
def speedup_distribution(comparison: RunComparison) -> Figure | None:
    """Speedups of correct kernels per run under both protocols: a strip of points with box and geomean."""
    rows = []  # (run, protocol, speedups)
    for run in comparison.runs:
        records = _chosen(comparison, run)
        for protocol in PROTOCOLS:
            values = [s for r in records if is_correct(r, protocol) and (s := _speedup(r, protocol)) is not None]
            rows.append((run, protocol, values))
    if not any(values for _, _, values in rows):
        return None
    plt = _plt()
    import numpy as np

    fig, ax = plt.subplots(figsize=(8.5, 1.4 + 0.6 * len(rows)), layout="constrained")
    rng = np.random.default_rng(0)  # jitter only; the same picture every time
    labels = []
    labelled = False
    all_values = [v for _, _, values in rows for v in values]
    for i, (run, protocol, values) in enumerate(rows):
        y = len(rows) - 1 - i
        labels.append((y, f"{_text(run)}\n{protocol} (n={len(values)})"))
        colour = run_colour(comparison, run)
        if not values:
            continue
        if len(values) > 1:
            ax.boxplot([values], positions=[y], **_horizontal(), widths=0.55, showfliers=False, manage_ticks=False,
                       medianprops={"color": colour, "linewidth": 2}, boxprops={"color": "0.35"},
                       whiskerprops={"color": "0.35"}, capprops={"color": "0.35"})
        jitter = rng.uniform(-0.2, 0.2, len(values))
        ax.scatter(values, y + jitter, s=24, alpha=0.8, zorder=3, linewidths=1.2,
                   edgecolors="none" if protocol == "verified" else colour,
                   facecolors=colour if protocol == "verified" else "none")
        geomean = math.exp(sum(math.log(v) for v in values) / len(values))
        ax.plot([geomean], [y], marker="D", markersize=9, color="black", zorder=4, linestyle="none",
                label=None if labelled else "geometric mean")
        labelled = True
    ax.axvline(1.0, color="0.3", linewidth=1, linestyle=":")
    ax.set_xscale("log")
    low, high = min(all_values), max(all_values)
    ax.set_xlim(min(low, 0.9) / 1.25, max(high, 1.1) * 1.25)
    _log_axis(ax.xaxis, "x")
    ax.set_yticks([y for y, _ in labels], [label for _, label in labels])
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("speedup over the baseline (log scale; > 1 is faster)")
    ax.set_title("Speedups of correct kernels (filled: verified, hollow: standard)")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.grid(False, axis="y")
    ax.legend(loc="best")
    return fig


@_styled
def speedup_vs_memory(comparison: RunComparison) -> Figure | None:
    """Verified speedup against reference peak / kernel peak memory, per run (log-log)."""
    series = []
    for run in comparison.runs:
        points = []
        for r in _chosen(comparison, run):
            mem = r.get("memory_bytes") if isinstance(r.get("memory_bytes"), dict) else {}
            cand, ref = finite_number(mem.get("candidate_peak")), finite_number(mem.get("reference_peak"))
            s = _speedup(r, "verified")
            if is_correct(r, "verified") and s is not None and cand and ref and cand > 0 and ref > 0:
                points.append((ref / cand, s))
        if points:
            series.append((run, points))
    if not series:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 5), layout="constrained")
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    for run, points in series:
        ax.scatter([x for x, _ in points], [y for _, y in points], s=40, alpha=0.75,
                   marker=MARKERS[comparison.runs.index(run) % len(MARKERS)], color=run_colour(comparison, run),
                   label=f"{_text(run)} (n={len(points)})", zorder=3)
    ax.axvline(1.0, color="0.3", linewidth=1, linestyle=":")
    ax.axhline(1.0, color="0.3", linewidth=1, linestyle=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(min(min(xs), 0.8) / 1.3, max(max(xs), 1.25) * 1.3)
    ax.set_ylim(min(min(ys), 0.8) / 1.3, max(max(ys), 1.25) * 1.3)
    _log_axis(ax.xaxis, "x")
    _log_axis(ax.yaxis, "x")
    ax.set_xlabel("reference peak / kernel peak memory (log; > 1 uses less memory)")
    ax.set_ylabel("verified speedup (log; > 1 is faster)")
    ax.set_title("Speed against memory of kernels correct under the verified protocol")
    ax.legend(loc="best")
    return fig


@_styled
def roofline(comparison: RunComparison) -> Figure | None:
    """Roofline attainment against arithmetic intensity, where records carry ``roofline`` sections."""
    series = []
    for run in comparison.runs:
        points = []
        for r in _chosen(comparison, run):
            intensity, attainment = finite_number(roofline_of(r).get("intensity")), attainment_of(r)
            if intensity is not None and intensity > 0 and attainment is not None and math.isfinite(attainment):
                points.append((intensity, attainment, is_correct(r, "verified"), roofline_of(r).get("regime")))
        if points:
            series.append((run, points))
    if not series:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 5), layout="constrained")
    for run, points in series:
        colour = run_colour(comparison, run)
        for correct, label in ((True, "correct"), (False, "not correct")):
            sel = [(x, y) for x, y, c, _ in points if c == correct]
            if sel:
                ax.scatter([x for x, _ in sel], [y for _, y in sel], s=45, alpha=0.8, zorder=3, edgecolors=colour,
                           marker=MARKERS[comparison.runs.index(run) % len(MARKERS)],
                           facecolors=colour if correct else "none", linewidths=1.5,
                           label=f"{_text(run)}: {label} (n={len(sel)})")
    ys = [y for _, pts in series for _, y, _, _ in pts]
    ax.axhline(1.0, color="0.3", linewidth=1, linestyle=":")
    ax.set_xscale("log")
    _log_axis(ax.xaxis)
    ax.set_ylim(0, max(1.05, max(ys) * 1.05))
    ax.set_xlabel("arithmetic intensity (FLOP / byte, log scale)")
    ax.set_ylabel("roofline attainment (share of the bound)")
    placeholder = any(((roofline_of(r).get("ceilings") or {}).get("source")) == "placeholder"
                      for run in comparison.runs for r in _chosen(comparison, run))
    ax.set_title("Roofline attainment of kernels (filled: correct under the verified protocol)"
                 + ("\nplaceholder ceilings (the CPU): a rough scale, not a datasheet bound" if placeholder else ""))
    if max(ys) > 1:
        ax.text(0.01, 0.99, "above 1 (dotted line): suspect", transform=ax.transAxes, va="top", fontsize=9)
    ax.legend(loc="best")
    return fig


@_styled
def per_level_bars(comparison: RunComparison) -> Figure | None:
    """Correct rate and fast_1 per level (and overall), per run, under both protocols."""
    groups = list(dict.fromkeys(g.name for run in comparison.runs for g in comparison.levels.get(run, []) if g.n))
    if not groups:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4 + 0.25 * math.ceil(len(comparison.runs) / 2)),
                             layout="constrained", sharey=True)
    bars = [(run, protocol) for run in comparison.runs for protocol in PROTOCOLS]
    width = 0.8 / len(bars)
    panels = (("correct", lambda g, pr: g.correct_verified if pr == "verified" else g.correct_standard),
              ("fast_1", lambda g, pr: (g.fast_p_verified if pr == "verified" else g.fast_p_standard).get(1.0)))
    for ax, (title, value) in zip(axes, panels):
        for j, (run, protocol) in enumerate(bars):
            by_name = {g.name: g for g in comparison.levels.get(run, [])}
            heights = [100 * (value(by_name[n], protocol) or 0.0) if n in by_name else 0.0 for n in groups]
            xs = [i - 0.4 + width * (j + 0.5) for i in range(len(groups))]
            colour = run_colour(comparison, run)
            ax.bar(xs, heights, width * 0.95, color=colour if protocol == "verified" else "white",
                   edgecolor=colour, hatch=None if protocol == "verified" else "//", linewidth=1.5,
                   label=f"{_text(run)} ({protocol})")
        ax.set_xticks(range(len(groups)), groups)
        ax.set_ylim(0, 105)
        ax.set_title(f"{title} per level")
        ax.grid(False, axis="x")
    axes[0].set_ylabel("% of problems")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4)
    fig.suptitle("Correct rate and fast_1 per level (verified filled, standard hatched)")
    return fig


FIGURES: dict[str, Callable[[RunComparison], Any]] = {
    "fast_p": fast_p_curves,
    "speedup_distribution": speedup_distribution,
    "speedup_vs_memory": speedup_vs_memory,
    "roofline": roofline,
    "per_level": per_level_bars,
}

# ---------------------------------------------------------------------------------------------------------------
# Plots of kbv generate's runs (the figures come from kbv.study.figures; None when a comparison has none)


def pass_at_k_plot(comparison: Any) -> Any:
    """pass@k against k per run: verified solid, standard dashed."""
    figs = getattr(comparison, "generation", None) or {}
    runs = [r for r in comparison.runs if r in figs and figs[r]["pass_at_k"]["verified"]]
    if not runs or max(len(figs[r]["pass_at_k"]["verified"]) for r in runs) < 2:
        return None
    plt = _plt()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(8.5, 4.4), layout="constrained")
        for run in runs:
            for proto in ("verified", "standard"):
                curve = sorted((int(k), v) for k, v in figs[run]["pass_at_k"][proto].items())
                ax.plot([k for k, _ in curve], [100 * v for _, v in curve], LINESTYLE[proto], marker="o",
                        color=run_colour(comparison, run), linewidth=2, label=f"{_text(run)} ({proto})")
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, 100)
        ax.set_xlabel("k (samples)")
        ax.set_ylabel("pass@k (% of problems generated)")
        ax.set_title("pass@k over every generated sample (verified solid, standard dashed)")
        ax.legend(loc="lower right")
    return fig


def tokens_vs_speedup_plot(comparison: Any) -> Any:
    """Output tokens against verified speedup, one point per verified-correct sample with its own usage."""
    figs = getattr(comparison, "generation", None) or {}
    series = {run: [(p["output_tokens"], p["speedup"]) for p in figs[run].get("correct_points", [])
                    if p["speedup"] is not None and p["output_tokens"] and p["output_tokens"] > 0]
              for run in comparison.runs if run in figs}
    series = {run: pts for run, pts in series.items() if pts}
    if not series:
        return None
    plt = _plt()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(8.5, 4.6), layout="constrained")
        for run, pts in series.items():
            rho = figs[run]["rank_correlation"]["speedup"]["rho"]
            label = _text(run) + (f" (rho {rho:+.2f})" if rho is not None else "")
            ax.scatter([t for t, _ in pts], [v for _, v in pts], s=22, alpha=0.75,
                       color=run_colour(comparison, run), label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        tokens = [t for pts in series.values() for t, _ in pts]
        speedups = [v for pts in series.values() for _, v in pts] + [1.0]
        ax.set_xlim(min(tokens) / 1.5, max(tokens) * 1.5)
        ax.set_ylim(min(speedups) / 1.5, max(speedups) * 1.5)
        _log_axis(ax.xaxis)
        _log_axis(ax.yaxis, "x")
        ax.axhline(1.0, color="0.4", linewidth=1, linestyle=":")
        ax.set_xlabel("output tokens of the sample")
        ax.set_ylabel("verified speedup")
        ax.set_title("Output tokens against speedup (verified-correct samples)")
        ax.legend(loc="best")
    return fig


FIGURES.update({"pass_at_k": pass_at_k_plot, "tokens_vs_speedup": tokens_vs_speedup_plot})

# ---------------------------------------------------------------------------------------------------------------
# Plots of agent runs (kbv agent run folders; the series come from kbv.report.agent; None without agent runs)


def _agent_lines(comparison: Any, points_of: Callable[[dict[str, Any]], list[tuple[int, float]]]
                 ) -> list[tuple[str, str, str, list[tuple[int, float]]]]:
    """(run, problem, colour, points) per (run, problem) of the agent runs that has points."""
    agent = getattr(comparison, "agent", None) or {}
    lines = []
    for i, (run, summaries) in enumerate(agent.items()):
        colour = (run_colour(comparison, run) if run in comparison.runs
                  else RUN_COLOURS[(len(comparison.runs) + i) % len(RUN_COLOURS)])
        for s in summaries:
            points = points_of(s)
            if points:
                lines.append((run, str(s.get("problem")), colour, points))
    return lines


def _agent_legend(ax: Any, lines: list[tuple[str, str, str, list[tuple[int, float]]]]) -> None:
    if len(lines) <= 12:
        ax.legend(loc="best")
    else:  # many problems: one entry per run
        from matplotlib.lines import Line2D

        runs = dict.fromkeys((run, colour) for run, _, colour, _ in lines)
        ax.legend([Line2D([], [], color=c, linewidth=2) for _, c in runs], [_text(r) for r, _ in runs], loc="best")


def _agent_steps(plt: Any, lines: list[tuple[str, str, str, list[tuple[Any, float]]]]) -> tuple[Any, Any]:
    """A figure with one step line per (run, problem) of ``lines``: (x, y) points, the running best's changes."""
    fig, ax = plt.subplots(figsize=(8.5, 4.6), layout="constrained")
    for n, (run, problem, colour, pts) in enumerate(lines):
        ax.plot([x for x, _ in pts], [y for _, y in pts], drawstyle="steps-post", marker=MARKERS[n % len(MARKERS)],
                markersize=5, color=colour, linewidth=1.8, alpha=0.85, label=f"{_text(run)}: {_text(problem)}")
    return fig, ax


def agent_tokens_vs_attainment_plot(comparison: Any) -> Any:
    """Cumulative tokens (log) against the roofline attainment of the running best kernel, one line per (run,
    problem) of the agent runs; iterations whose best has no attainment are left out."""
    lines = _agent_lines(comparison, tokens_vs_attainment)
    if not lines:
        return None
    plt = _plt()
    with plt.rc_context(STYLE):
        fig, ax = _agent_steps(plt, lines)
        tokens = [t for *_, pts in lines for t, _ in pts]
        ys = [a for *_, pts in lines for _, a in pts]
        ax.set_xscale("log")
        ax.set_xlim(min(tokens) / 1.5, max(tokens) * 1.5)
        _log_axis(ax.xaxis)
        from matplotlib.ticker import FuncFormatter

        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))  # token counts: 2,000, not 2e+03
        ax.set_ylim(0, max(1.05, max(ys) * 1.05))
        ax.axhline(1.0, color="0.4", linewidth=1, linestyle=":")
        ax.set_xlabel("tokens spent so far (prompt + completion, log scale)")
        ax.set_ylabel("roofline attainment of the best kernel")
        ax.set_title("Agent runs: tokens against attainment (the running best kernel)")
        _agent_legend(ax, lines)
    return fig


def agent_best_speedup_plot(comparison: Any) -> Any:
    """The running best verified speedup against the iteration, one line per (run, problem) of the agent runs."""
    lines = _agent_lines(comparison, best_speedups)
    if not lines:
        return None
    plt = _plt()
    with plt.rc_context(STYLE):
        fig, ax = _agent_steps(plt, lines)
        speedups = [v for *_, pts in lines for _, v in pts] + [1.0]
        ax.set_yscale("log")
        ax.set_ylim(min(speedups) / 1.25, max(speedups) * 1.25)
        _log_axis(ax.yaxis, "x")
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.axhline(1.0, color="0.4", linewidth=1, linestyle=":")
        ax.set_xlabel("iteration")
        ax.set_ylabel("best verified speedup so far (log scale)")
        ax.set_title("Agent runs: the best verified speedup per iteration")
        _agent_legend(ax, lines)
    return fig


FIGURES.update({"agent_tokens_vs_attainment": agent_tokens_vs_attainment_plot,
                "agent_best_speedup_per_iteration": agent_best_speedup_plot})


def figures(comparison: RunComparison) -> dict[str, Figure]:
    """Every available figure, by name stem (those without data left out). The caller closes them."""
    out = {}
    for name, make in FIGURES.items():
        fig = make(comparison)
        if fig is not None:
            out[name] = fig
    return out


def close(fig: Figure) -> None:
    _plt().close(fig)


def save_plots(comparison: RunComparison, out_dir: str | Path, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """Write every available figure as ``<stem>.png`` and ``<stem>.svg`` under ``out_dir``; the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, fig in figures(comparison).items():
        try:
            with _plt().rc_context(SAVE_STYLE):
                for fmt in formats:
                    path = out_dir / f"{name}.{fmt}"
                    fig.savefig(path, format=fmt, dpi=PNG_DPI, metadata={"Date": None} if fmt == "svg" else None)
                    written.append(path)
        finally:
            close(fig)
    return written
