"""kbv.report.plots (matplotlib figures, PNG/SVG files) and kbv.report.html (one self-contained HTML page).

The comparison is two runs: the real H200 suite records and a modified copy of them (incorrect kernels with failed
hidden distributions, rejected and compile-error kernels, other speedups and memory peaks, a hostile problem name).
The browser check renders the page in headless Chromium and checks that the embedded plots really show.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from kbv.report import html as html_report
from kbv.report import plots
from kbv.report.metrics import compare_runs

ROOT = Path(__file__).resolve().parents[1]
SUITE_JSONL = ROOT / "docs" / "results" / "h200-2026-11-29" / "suite.jsonl.gz"
HOSTILE = "level1/99_<script>alert('x')</script>&Evil"
CHROMIUM = os.environ.get("KBV_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def real_records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in gzip.decompress(SUITE_JSONL.read_bytes()).decode().splitlines() if line.strip()]


def modified_run(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A second run: the same problems with other outcomes, so every decomposition step has something to do."""
    out = copy.deepcopy(records)
    for i, r in enumerate(out):
        s = r["speedup"]
        # other speedups: the standard one inflated more than the verified one (TF32 off baseline is slower)
        s["verified"]["value"] *= 0.6 + 0.15 * (i % 12)
        s["standard"]["value"] = s["verified"]["value"] * (1.0 + 0.1 * (i % 5))
        for b in ("verified", "standard"):
            s[b]["ci_low"], s[b]["ci_high"] = s[b]["value"] * 0.97, s[b]["value"] * 1.03
        if i % 7 == 3:  # uses more memory than the reference
            r["memory_bytes"]["candidate_peak"] *= 2
            r["flags"] = [*r["flags"], "memory_above_reference"]
        elif i % 7 == 5:
            r["memory_bytes"]["candidate_peak"] //= 2
        if i % 5 == 1:  # passes D1 (and so the standard check), fails a hidden distribution
            failed = ["D4"] if i % 2 else ["D2", "D3"]
            r["verdict"] = "incorrect"
            r["correctness"]["failed_distributions"] = failed
            for d in failed:
                r["correctness"]["distributions"][d].update(status="failed", reason=f"max error 0.5 > tol on {d}")
        elif i % 9 == 4:  # right outputs, broken rule
            r["verdict"] = "rejected"
            r["flags"] = [*r["flags"], "input_mutated"]
        elif i % 11 == 6:
            r["verdict"] = r["standard_verdict"] = "compile_error"
            r["stage"] = "compile"
            r["speedup"] = {"verified": None, "standard": None}
            r["error"] = {"stage": "compile", "kind": "build", "message": "nvcc: error <b>bold</b> & co"}
    hostile = copy.deepcopy(records[4])
    hostile.update(problem=HOSTILE, problem_id=99, flags=["<img src=x onerror=alert(1)>"], verdict="incorrect")
    hostile["correctness"]["failed_distributions"] = ["D3"]
    hostile["correctness"]["distributions"]["D3"].update(status="failed", reason="<script>bad()</script>")
    out.append(hostile)
    return out


def with_roofline(records: list[dict[str, Any]], shift: float = 0.0) -> list[dict[str, Any]]:
    """Roofline sections in both shapes (attainment a float, or {"candidate": float})."""
    out = copy.deepcopy(records)
    for i, r in enumerate(out):
        intensity = 0.25 * 2 ** (i % 10)
        a = shift + (0.2 + 0.07 * (i % 11) if i % 2 else 0.3 + 0.05 * (i % 9))
        r["roofline"] = {"attainment": {"candidate": a} if i % 2 else a,
                         "intensity": intensity, "regime": "memory" if intensity < 20 else "compute",
                         "weight": 1.0 / len(out)}
    return out


RUNS = ("h200 <reference>", "model-x & friends $5")


@pytest.fixture(scope="module")
def comparison():
    real = real_records()
    return compare_runs({RUNS[0]: real, RUNS[1]: modified_run(real)})


@pytest.fixture(scope="module")
def page(comparison) -> str:
    return html_report.render_html(comparison, title="kbv <test> report")


# ---------------------------------------------------------------------------------------------------------------
# Plots


def test_save_plots_writes_png_and_svg_and_skips_roofline_without_data(comparison, tmp_path):
    written = plots.save_plots(comparison, tmp_path)
    stems = {p.stem for p in written}
    assert stems == {"fast_p", "speedup_distribution", "speedup_vs_memory", "per_level"}  # no roofline data
    for stem in stems:
        png, svg = tmp_path / f"{stem}.png", tmp_path / f"{stem}.svg"
        assert png in written and svg in written
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        assert "<svg" in svg.read_text()[:2000]
    assert not (tmp_path / "roofline.png").exists()
    assert plots.roofline(comparison) is None


def test_roofline_plot_and_regimes_when_records_carry_roofline(tmp_path):
    real = real_records()
    comparison = compare_runs({"a": with_roofline(real), "b": with_roofline(modified_run(real), shift=0.12)})
    written = plots.save_plots(comparison, tmp_path)
    assert tmp_path / "roofline.png" in written and tmp_path / "roofline.svg" in written
    page = html_report.render_html(comparison)
    assert 'id="plot-roofline"' in page and 'id="regimes"' in page
    assert "roofline attainment (median)" in page and "S_agg" in page


def test_figures_absent_without_data():
    empty = compare_runs({"empty": []})
    assert plots.figures(empty) == {}
    nothing_correct = compare_runs({"r": [{"problem": "level1/1_x", "level": 1, "sample": 0,
                                           "verdict": "compile_error", "standard_verdict": "compile_error"}]})
    assert set(plots.figures(nothing_correct)) == {"fast_p", "per_level"}
    page = html_report.render_html(empty)
    assert "<h1>kbv report</h1>" in page


def test_figures_have_titles_labels_and_legends(comparison):
    for name, fig in plots.figures(comparison).items():
        try:
            for ax in fig.axes:
                assert ax.get_xlabel() or ax.get_xticklabels(), name
            assert any(ax.get_title() for ax in fig.axes) or fig._suptitle is not None, name
            assert fig.legends or any(ax.get_legend() is not None for ax in fig.axes), name
        finally:
            plots.close(fig)


# ---------------------------------------------------------------------------------------------------------------
# The page


def test_page_has_every_section_and_run(page, comparison):
    for run in RUNS:
        assert html_report.esc(run) in page
    assert "h200 <reference>" not in page  # run labels are escaped too
    for step in ("standard", "(a) TF32 baseline", "(b) hidden distributions", "(c) hack rejection", "residual",
                 "verified", "total: standard"):
        assert f">{html_report.esc(step)}" in page or f">{step}" in page, step
    for heading in ('id="summary"', 'id="plots"', 'id="decomposition"', 'id="families"', 'id="candidates"'):
        assert heading in page
    assert 'id="regimes"' not in page  # no roofline data
    for name in ("fast_p", "speedup_distribution", "speedup_vs_memory", "per_level"):
        assert f'id="plot-{name}"' in page
    assert 'id="plot-roofline"' not in page
    for label in ("fast_1.5 ver | std", "geomean, failures as 1.0 ver | std", "memory efficiency",
                  "memory ratio ref/kernel (leaderboard)", "raised peak memory", "exploit rate"):
        assert label in page
    for family in {g.name for g in comparison.families[RUNS[0]]}:
        assert f">{family}<" in page
    # every candidate of both runs has its row
    assert page.count("<tr") > sum(len(v) for v in comparison.records.values())
    assert "fails D2, D3" in page or "fails D4" in page  # the decomposition names what a step removed


def test_page_is_self_contained(page):
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page.lower().replace("&lt;script", "")
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:)""", page)  # only data: URIs as sources
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert page.count("data:image/png;base64,") == 4


def test_record_text_is_escaped(page):
    assert "<script>" not in page
    assert "level1/99_&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&amp;Evil" in page
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;script&gt;bad()&lt;/script&gt;" in page
    assert "<b>bold</b>" not in page and "nvcc: error &lt;b&gt;bold&lt;/b&gt; &amp; co" in page
    assert "<h1>kbv &lt;test&gt; report</h1>" in page


def test_without_matplotlib_the_page_still_renders(tmp_path):
    """``import kbv.report.plots`` works without matplotlib; the page leaves the plots out and says why."""
    script = (
        "import gzip, json, sys\n"
        "sys.modules['matplotlib'] = None  # as if it were not installed\n"
        "import kbv.report.plots, kbv.report.html\n"
        "from kbv.report.metrics import compare_runs\n"
        f"records = [json.loads(l) for l in gzip.open({str(SUITE_JSONL)!r}, 'rt')]\n"
        "page = kbv.report.html.render_html(compare_runs({'r': records}))\n"
        "assert 'plots left out: matplotlib is not installed' in page and 'data:image' not in page\n"
        "assert 'id=\"decomposition\"' in page\n"
        "try:\n"
        f"    kbv.report.plots.save_plots(compare_runs({{'r': records}}), {str(tmp_path)!r})\n"
        "except ImportError as exc:\n"
        "    assert 'pip install matplotlib' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('save_plots without matplotlib')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_a_failing_plot_costs_only_that_plot(comparison, monkeypatch):
    def broken(_):
        raise ValueError("odd <data>")

    monkeypatch.setitem(plots.FIGURES, "speedup_vs_memory", broken)
    page = html_report.render_html(comparison)
    assert "plots that failed: speedup_vs_memory: ValueError: odd &lt;data&gt;" in page
    assert 'id="plot-fast_p"' in page and 'id="plot-speedup_vs_memory"' not in page


def test_write_html(comparison, tmp_path):
    path = html_report.write_html(comparison, tmp_path / "sub" / "report.html", title="t")
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


# ---------------------------------------------------------------------------------------------------------------
# The page in a browser


def _screenshot(html: str, workdir: Path, name: str) -> Any:
    import numpy as np
    from matplotlib.image import imread

    page = workdir / f"{name}.html"
    page.write_text(html, encoding="utf-8")
    png = workdir / f"{name}.png"
    profile = tempfile.mkdtemp(prefix="kbv-chromium-", dir=workdir)
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1",
           f"--user-data-dir={profile}", f"--screenshot={png}", "--window-size=1400,3000", page.as_uri()]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert png.exists(), f"chromium wrote no screenshot (rc {result.returncode}): {result.stderr[-2000:]}"
    image = imread(png)[..., :3]  # float RGB in [0, 1]
    return np.asarray(image)


def _stats(image: Any) -> dict[str, float]:
    import numpy as np

    rgb = image.astype(np.float64)
    spread = rgb.max(axis=2) - rgb.min(axis=2)
    blue, orange = (np.array([int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]) for colour in plots.RUN_COLOURS[:2])
    return {
        "non_white": float((rgb.min(axis=2) < 0.9).mean()),
        "coloured": float((spread > 0.25).sum()),  # saturated pixels: plot lines, bars, markers
        "run0": float((np.abs(rgb - blue).max(axis=2) < 0.08).sum()),  # pixels in the first run's colour
        "run1": float((np.abs(rgb - orange).max(axis=2) < 0.08).sum()),
        "std": float(rgb.std()),
    }


@pytest.mark.skipif(not Path(CHROMIUM).exists(),
                    reason=f"headless Chromium not found at {CHROMIUM} (apt-get install chromium; CI installs it)")
def test_page_renders_with_plots_in_headless_chromium(page, tmp_path):
    image = _screenshot(page, tmp_path, "report")
    assert image.shape[:2] == (3000, 1400)
    keep = os.environ.get("KBV_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(tmp_path / "report.png", keep)
    # the same page with every embedded image emptied: what a page whose images fail to load looks like
    broken = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:image/png;base64,", page)
    assert broken != page
    control = _screenshot(broken, tmp_path, "broken")
    with_plots, without = _stats(image), _stats(control)
    # not blank: the tables and headings drew
    assert with_plots["std"] > 0.05 and with_plots["non_white"] > 0.03, with_plots
    assert without["non_white"] > 0.01, without
    # the plots drew: many saturated pixels, many in each run's colour, and far more than without the images
    assert with_plots["coloured"] > 50_000, with_plots
    assert with_plots["run0"] > 5_000 and with_plots["run1"] > 5_000, with_plots
    assert with_plots["coloured"] > 5 * without["coloured"] + 20_000, (with_plots, without)
    assert with_plots["run0"] > 10 * without["run0"] + 3_000, (with_plots, without)
