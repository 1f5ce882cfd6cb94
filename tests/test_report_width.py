"""The per-candidate table at 80 columns: two narrow tables (verdicts over speedups, then the details) in place of
every column split across tables; at 120 columns and more, every column as before. In-process, no worker."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from kbv.report.metrics import compare_runs
from kbv.report.text import WIDE_COLUMNS, print_report, print_table, record_rows, short_speedup_cell


def rec(problem: str, verdict: str, standard: str, speedup: tuple[float, float, float], *, sample: int = 0,
        candidate: str = "", flags: list[str] | None = None, failed: list[str] | None = None,
        mem: tuple[int, int] | None = None) -> dict:
    entry = {"value": speedup[0], "ci_low": speedup[1], "ci_high": speedup[2]}
    dists = {d: {"status": "failed", "reason": "output 0: 23906 of 65536 elements outside tolerance (max |err| "
                                               "0.163, atol_eff 1e-06, rtol_eff 1e-05)"} for d in failed or []}
    return {"schema": "kbv.result/1", "problem": problem, "level": int(problem[5]), "problem_id": 1,
            "problem_sha256": "0" * 64, "candidate": candidate or f"/x/{problem.split('/')[1]}_{sample}.py",
            "candidate_sha256": problem + str(sample), "sample": sample, "verdict": verdict,
            "standard_verdict": standard, "flags": flags or [], "error": None,
            "speedup": {"verified": entry, "standard": entry}, "timing_ms": {}, "env": {"device_kind": "cpu"},
            "correctness": {"distributions": dists, "failed_distributions": failed or []},
            "memory_bytes": {"candidate_peak": mem[0], "reference_peak": mem[1]} if mem else {}}


RECORDS = [
    rec("level2/3_Matmul_Scale_Residual", "correct", "correct", (1.17, 1.11, 1.22),
        candidate="/x/level_2_problem_3_sample_0_kernel.py", flags=["fallback"], mem=(32 * 1024, 96 * 1024)),
    rec("level1/16_Sigmoid", "incorrect", "correct", (0.47, 0.44, 0.51), sample=1,
        candidate="/x/level_1_problem_16_sample_1_kernel.py", flags=["timed_output_mismatch"],
        failed=["D2", "D3", "D4", "D5", "D6"], mem=(276 * 1024, 228 * 1024)),
]


def render(width: int, records: list[dict] = RECORDS) -> str:
    console = Console(file=io.StringIO(), width=width, record=True, highlight=False)
    print_report(compare_runs({"r": records}), console, per_candidate=True)
    return console.export_text()


def candidate_section(text: str) -> str:
    return text.split("Correctness and speed")[0]


def table_rows(text: str) -> list[list[str]]:
    """Each body row of each table, as its cells' text (a cell's lines joined by spaces)."""
    rows: list[list[list[str]]] = []
    for line in text.splitlines():
        if line.startswith("┏"):
            rows.append([])  # a new table: no row continues across it
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if cells[0] or not rows or not rows[-1]:
            rows.append([[c] for c in cells])
        else:
            for parts, c in zip(rows[-1], cells):
                parts.append(c)
    return [[" ".join(p for p in parts if p) for parts in row] for row in rows if row]


@pytest.mark.parametrize("width", [80, 100])
def test_per_candidate_table_at_80_columns_keeps_each_row_whole(width):
    text = render(width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width, "\n".join(line for line in lines if len(line) > width)
    section = candidate_section(text)
    assert "(continued)" not in section  # one table of verdicts and speedups, not columns split across tables
    rows = table_rows(section)
    for problem, verdict, standard, speedup in (("level2/3_Matmul_Scale_Residual", "correct", "correct", "1.17x"),
                                                ("level1/16_Sigmoid", "incorrect", "correct", "0.47x")):
        row = next(r for r in rows if r[0].startswith(problem) and len(r) == 3)
        verified_cell, standard_cell = row[1].split(), row[2].split()
        assert verified_cell[0] == verdict and speedup in verified_cell, row
        assert standard_cell[0] == standard and speedup in standard_cell, row
    sigmoid = next(r for r in rows if r[0].startswith("level1/16_Sigmoid") and len(r) == 3)
    assert "[0.44, 0.51]" in sigmoid[1] and "not counted" in sigmoid[1] and "not counted" not in sigmoid[2]
    # the details: nothing of the wide table's columns is lost
    details = " ".join(" ".join(r) for r in rows)
    for value in ("level_2_problem_3_sample_0_kernel.py", "level_1_problem_16_sample_1_kernel.py", "fallback",
                  "timed_output_mismatch", "fails D2, D3, D4, D5, D6", "32.0 KiB", "96.0 KiB", "276.0 KiB"):
        assert value in details, value
    assert "not counted: the kernel is not correct" in " ".join(section.split())


@pytest.mark.parametrize("width", [WIDE_COLUMNS, 200])
def test_per_candidate_table_at_120_columns_and_more_has_every_column(width):
    """From WIDE_COLUMNS up the table is the one every column of ``record_rows`` makes, as before narrow tables."""
    section = candidate_section(render(width))
    wide = Console(file=io.StringIO(), width=width, record=True, highlight=False)
    print_table(wide, "Results per candidate: r", *record_rows(RECORDS), style="verdict", keep=1)
    assert section.rstrip() == wide.export_text().rstrip()
    assert "(details)" not in section and "candidate" in section and "note" in section


def test_short_speedup_cell_keeps_the_figures_and_marks():
    noisy = rec("level1/5_ReLU", "incorrect", "correct", (1.02, 0.98, 1.05))
    assert short_speedup_cell(noisy, "verified") == "1.02x [0.98, 1.05] ~1\nnot counted"
    assert short_speedup_cell(noisy, "standard") == "1.02x [0.98, 1.05] ~1"
    assert short_speedup_cell({**noisy, "speedup": {}}, "verified") == "-"


def test_a_speedup_far_below_one_keeps_two_significant_digits() -> None:
    """A kernel timed under the Triton interpreter runs at thousandths of the reference's speed: its figure reads
    0.0012x, not 0.00x (which reads as no figure)."""
    from kbv.report.text import speedup_text

    assert speedup_text(0.00123, (0.00101, 0.0015)) == "0.0012x [0.001, 0.0015]"
    assert speedup_text(1.024, (0.971, 1.07)) == "1.02x [0.97, 1.07]"
    assert speedup_text(0.11, None) == "0.11x"
