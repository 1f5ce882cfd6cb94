"""Reports built from result files of known contents: every figure checked against a hand-computed value."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kbv.cli import main
from kbv.report.metrics import compare_runs, decompose, family_of, pass_at_k, summarize_group

D_PASS = {d: {"status": "passed"} for d in ("D1", "D2", "D3", "D4")}


def rec(problem: str, verdict: str, standard: str, s_std: float | None = None, s_ver: float | None = None,
        sample: int = 0, dists: dict | None = None, flags: list[str] | None = None,
        mem: tuple[int, int] | None = None) -> dict[str, Any]:
    failed = [d for d, v in (dists or {}).items() if v["status"] == "failed"]
    return {
        "schema": "kbv.result/1", "problem": problem, "level": int(problem[5]), "sample": sample,
        "candidate": f"{problem}#{sample}", "candidate_sha256": f"{problem}{sample}", "verdict": verdict,
        "standard_verdict": standard, "flags": flags or [],
        "correctness": {"distributions": dists or {}, "failed_distributions": failed},
        "speedup": {"standard": {"value": s_std} if s_std else None, "verified": {"value": s_ver} if s_ver else None},
        "memory_bytes": {"candidate_peak": mem[0], "reference_peak": mem[1]} if mem else {},
    }


P1, P2, P3 = "level1/1_Square_Matmul", "level1/5_ReLU", "level1/7_Softmax"
P4, P5, P6 = "level2/1_Gemm_Bias_ReLU", "level2/2_Conv2d_BatchNorm_ReLU", "level2/3_Matmul_Scale_Residual"
RUN_M = [
    rec(P1, "correct", "correct", 4.0, 1.0, dists=D_PASS, mem=(100, 200)),  # TF32 makes the baseline 4x faster
    rec(P1, "incorrect", "incorrect", sample=1),  # a second sample: pass@k only
    rec(P2, "incorrect", "correct", 2.0, 2.0, dists=D_PASS | {"D4": {"status": "failed"}}),  # identity ReLU
    rec(P3, "rejected", "correct", 3.0, 3.0, dists=D_PASS, flags=["input_mutated"]),
    rec(P4, "correct", "correct", 1.5, 0.5, dists=D_PASS, mem=(400, 200), flags=["memory_above_reference"]),
    rec(P5, "compile_error", "compile_error"),
    # P6: no record at all
]
RUN_N = [rec(P1, "correct", "correct", 2.0, 2.0, dists=D_PASS), rec(P6, "correct", "incorrect", None, 1.2,
                                                                      dists=D_PASS)]
UNIVERSE = [P1, P2, P3, P4, P5, P6]


@pytest.fixture(scope="module")
def comparison():
    return compare_runs({"m": RUN_M, "n": RUN_N}, UNIVERSE)


def overall(comparison, run: str):
    return comparison.levels[run][-1]


def test_rates_and_fast_p_over_the_universe(comparison) -> None:
    g = overall(comparison, "m")
    assert g.n == 6
    assert g.compiled == pytest.approx(4 / 6)  # P5 failed, P6 missing
    assert g.correct_verified == pytest.approx(2 / 6) and g.correct_standard == pytest.approx(4 / 6)
    assert g.fast_p_verified[0.8] == pytest.approx(1 / 6)  # P1 (1.0)
    assert g.fast_p_verified[0.0] == pytest.approx(2 / 6)
    assert g.fast_p_standard[2.0] == pytest.approx(2 / 6)  # P1 4.0, P3 3.0; P2 = 2.0 is not > 2
    assert g.fast_p_standard[1.0] == pytest.approx(4 / 6)


def test_geomeans(comparison) -> None:
    g = overall(comparison, "m")
    assert g.geomean_verified == pytest.approx(math.sqrt(1.0 * 0.5))
    assert g.geomean_standard == pytest.approx((4 * 2 * 3 * 1.5) ** 0.25)
    assert g.geomean_all_verified == pytest.approx(0.5 ** (1 / 6))  # failures and P6 count as 1.0
    assert g.correct_but_slower == pytest.approx(1 / 2)  # P4


def test_memory_exploits_and_pass_at_k(comparison) -> None:
    g = overall(comparison, "m")
    assert g.memory_efficiency == pytest.approx(0.5)
    assert g.memory_leaderboard_ratio == pytest.approx(math.sqrt(2.0 * 0.5))
    assert g.memory_raised_share == pytest.approx(0.5)
    assert g.exploit_rate == pytest.approx(2 / 6)  # P2 passes D1 fails D4; P3 rejected
    # smallest sample count is 1, so only pass@1: P1 1/2, P4 1, everything else 0, over 6 problems
    assert g.pass_at_k == {1: pytest.approx(1.5 / 6)}
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 5) == 1.0
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - math.comb(7, 5) / math.comb(10, 5))


def test_decomposition_steps_add_up(comparison) -> None:
    d = comparison.decomposition["m"][-1]
    names = [s.name for s in d.steps]
    assert names == ["standard", "(a) TF32 baseline", "(b) hidden distributions", "(c) hack rejection", "verified"]
    g = [s.geomean for s in d.steps]
    assert g[0] == pytest.approx(36 ** 0.25)
    assert g[1] == pytest.approx((1.0 * 2.0 * 3.0 * 0.5) ** 0.25)
    assert g[2] == pytest.approx((1.0 * 3.0 * 0.5) ** (1 / 3))
    assert g[3] == pytest.approx(math.sqrt(0.5))
    assert g[4] == pytest.approx(math.sqrt(0.5))
    assert [s.fast_1 for s in d.steps] == pytest.approx([4 / 6, 2 / 6, 1 / 6, 0, 0])
    e = d.effects
    total = sum(e[k]["geomean"] for k in ("(a) TF32 baseline", "(b) hidden distributions", "(c) hack rejection",
                                          "residual"))
    assert total == pytest.approx(e["total"]["geomean"]) == pytest.approx(g[4] - g[0])
    assert e["residual"]["geomean"] == pytest.approx(0.0)
    assert [m["problem"] for m in d.steps[2].moved] == [P2]
    assert [m["problem"] for m in d.steps[3].moved] == [P3]
    assert d.steps[1].moved[0]["problem"] == P1  # 4.0 -> 1.0 moved most


def test_residual_holds_what_the_steps_do_not_explain() -> None:
    # a kernel the verified check accepts but KernelBench's does not (e.g. an output with a large magnitude)
    d = decompose(RUN_N, [P1, P6])
    assert d.steps[0].geomean == pytest.approx(2.0) and d.steps[-1].geomean == pytest.approx(math.sqrt(2.0 * 1.2))
    assert d.effects["residual"]["geomean"] == pytest.approx(math.sqrt(2.4) - 2.0)


def test_per_level_and_family(comparison) -> None:
    levels = {g.name: g for g in comparison.levels["m"]}
    assert levels["level 1"].n == 3 and levels["level 2"].n == 3
    assert levels["level 2"].correct_verified == pytest.approx(1 / 3)
    families = {g.name: g for g in comparison.families["m"]}
    assert families["matmul"].n == 3  # P1, P4, P6
    assert families["matmul"].correct_verified == pytest.approx(2 / 3)
    assert families["activation"].exploit_rate == 1.0
    assert family_of("level3/4_GRU") == "model" and family_of("level1/11_Conv2d") == "convolution"
    assert family_of("level2/9_BMM_Scale_Softmax") == "attention"


def test_runs_side_by_side_share_one_universe(comparison) -> None:
    g = overall(comparison, "n")
    assert g.n == 6 and g.correct_verified == pytest.approx(2 / 6) and g.correct_standard == pytest.approx(1 / 6)
    assert g.fast_p_verified[1.0] == pytest.approx(2 / 6)  # P1 2.0, P6 1.2


def test_roofline_and_regimes_only_where_records_carry_them() -> None:
    assert summarize_group("x", RUN_M, UNIVERSE).attainment_median is None
    roofed = [dict(r, roofline={"attainment": {"candidate": a}, "regime": reg, "weight": w})
              for r, a, reg, w in zip([RUN_M[0], RUN_M[4]], (0.5, 0.2), ("compute", "memory"), (0.75, 0.25))]
    g = summarize_group("x", roofed)
    assert g.s_agg == pytest.approx(0.75 * 0.5 + 0.25 * 0.2)
    regimes = {x.name: x.n for x in compare_runs({"r": roofed}).regimes["r"]}
    assert regimes == {"compute": 1, "memory": 1}


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_cli_formats(tmp_path) -> None:
    m, n = _write(tmp_path / "m.jsonl", RUN_M), _write(tmp_path / "n.jsonl", RUN_N)
    runner = CliRunner()
    data = json.loads(runner.invoke(main, ["report", str(m), str(n), "--format", "json"]).output)
    assert data["runs"] == ["m", "n"] and len(data["universe"]) == 6
    steps = data["decomposition"]["m"][-1]["steps"]
    assert steps[0]["geomean"] == pytest.approx(36 ** 0.25)
    md = runner.invoke(main, ["report", str(m), str(n), "--format", "markdown"]).output
    assert "## From the standard to the verified figure" in md and "| overall | m |" in md
    assert f"{P2}" in md  # the problem step (b) removed is listed
    csv_out = runner.invoke(main, ["report", str(m), "--format", "csv"]).output.splitlines()
    assert csv_out[0].startswith("kind,run,name,n,")
    assert any(line.startswith("level,m,overall,5,") for line in csv_out)  # alone, m defines the universe
    table = runner.invoke(main, ["report", str(m), str(n)])
    assert table.exit_code == 0 and "hidden distributions" in table.output


def test_where_the_time_went_per_run(tmp_path) -> None:
    """Issue 13: ``kbv report`` shows where the time went, per run: each stage, then its parts by total, with the
    median per pair and the share of the evaluation time (correctness plus performance); compile has no share."""
    from kbv.report.metrics import time_breakdown

    walls = [{"compile": 9.0, "correctness": 2.0, "correctness/judging": 1.5, "correctness/setup": 0.5,
              "performance": 2.0, "performance/timing": 2.0, "total": 13.0},
             {"compile": 0.1, "correctness": 4.0, "correctness/judging": 1.0, "correctness/setup": 3.0,
              "performance": 2.0, "performance/timing": 2.0, "total": 6.1, "correctness/odd": "x"}]
    records = [rec(P1, "correct", "correct", 1.0, 1.0, dists=D_PASS) | {"wall_seconds": w} for w in walls]
    spent = time_breakdown(records)
    assert list(spent) == ["compile", "correctness", "correctness/setup", "correctness/judging", "performance",
                           "performance/timing"]  # total and values that are not numbers left out
    assert spent["correctness/setup"] == {"pairs": 2, "median_s": 1.75, "total_s": 3.5, "share": 0.35}
    assert spent["compile"]["share"] is None and spent["performance"]["share"] == pytest.approx(0.4)
    path = _write(tmp_path / "t.jsonl", records)
    runner = CliRunner()
    md = runner.invoke(main, ["report", str(path), "--format", "markdown"]).output
    assert "## Where the time went" in md and "| t |   setup | 2 | 1.75 | 3.5 | 35% |" in md
    data = json.loads(runner.invoke(main, ["report", str(path), "--format", "json"]).output)
    assert data["time_spent"]["t"]["performance/timing"]["total_s"] == 4.0
    assert "Where the time went" in runner.invoke(main, ["report", str(path)]).output
    html = tmp_path / "r.html"
    assert runner.invoke(main, ["report", str(path), "--html", str(html)]).exit_code == 0
    assert '<h2 id="time">Where the time went</h2>' in html.read_text()
    # a pair stopped at correctness still paid for its timing workers (started ahead) to exit: that part sits under a
    # performance stage of its own, and the shares add up to the whole
    stopped = rec(P1, "incorrect", "incorrect", None, None, dists=D_PASS) | {"wall_seconds": {
        "correctness": 0.21, "correctness/trials": 0.2, "performance/process_exit": 0.015, "total": 0.23}}
    spent = time_breakdown([stopped])
    assert list(spent) == ["correctness", "correctness/trials", "performance", "performance/process_exit"]
    assert spent["performance"]["total_s"] == 0.015
    assert sum(v["share"] for k, v in spent.items() if "/" not in k) == pytest.approx(1.0)


def test_the_shared_gpu_section_splits_a_run_by_what_held_the_gpu(tmp_path) -> None:
    """Under ``--gpu-share`` each record's ``env.timeline`` says when its pair asked for and held the shared GPU;
    ``kbv report`` shows, per run, the seconds a timing held it alone, correctness stages ran (and how many at once),
    only a timing's set-up ran, and nothing ran. A run without timelines (one pair at a time) has no such section."""
    from kbv.report.metrics import gpu_use

    lines = [{"correctness_asked": 0.0, "correctness_in": 1.0, "correctness_out": 5.0,
              "place_in": 5.0, "alone_in": 6.0, "alone_out": 8.0, "place_out": 9.0},
             {"correctness_asked": 0.5, "correctness_in": 3.0, "correctness_out": 6.0,
              "place_in": 9.0, "alone_in": 10.0, "alone_out": 11.0, "place_out": 12.0}]
    records = [rec(P1, "correct", "correct", 1.0, 1.0, dists=D_PASS) | {"env": {"timeline": t}} for t in lines]
    records.append(rec(P2, "correct", "correct", 1.0, 1.0, dists=D_PASS) | {"env": {}})
    use = gpu_use(records)
    # 0-1 nothing; 1-3 one correctness stage, 3-5 two, 5-6 one (beside a place); 6-8 alone; 8-10 set-up only;
    # 10-11 alone; 11-12 wind-down only
    assert use == {"span_s": 12.0, "alone_s": 3.0, "correctness_s": 5.0, "place_only_s": 3.0, "idle_s": 1.0,
                   "correctness_mean_inside": 1.4}
    assert gpu_use([records[2]]) is None
    path = _write(tmp_path / "g.jsonl", records)
    runner = CliRunner()
    md = runner.invoke(main, ["report", str(path), "--format", "markdown"]).output
    assert "## The shared GPU" in md and "| g | 12.0 | 3.0 | 5.0 | 1.40 | 3.0 | 1.0 |" in md
    assert json.loads(runner.invoke(main, ["report", str(path), "--format", "json"]).output)["gpu_use"]["g"] == use
    assert "The shared GPU" in runner.invoke(main, ["report", str(path)]).output
    html = tmp_path / "g.html"
    assert runner.invoke(main, ["report", str(path), "--html", str(html)]).exit_code == 0
    assert '<h2 id="gpu">The shared GPU</h2>' in html.read_text()
    plain = _write(tmp_path / "p.jsonl", [records[2]])
    assert "The shared GPU" not in runner.invoke(main, ["report", str(plain), "--format", "markdown"]).output


def test_a_long_note_is_shortened_visibly() -> None:
    """The per-candidate table's note keeps at most NOTE_CHARS characters and says so with "…" (a cut reason read as
    whole would mislead); a short one is left as it is."""
    from kbv.report.text import NOTE_CHARS, failure_note

    long_reason = "max |err| 1, atol_eff 1e-05 at index 4095 of output 0; " * 4
    record = {"correctness": {"failed_distributions": ["D1"], "distributions": {"D1": {"reason": long_reason}}}}
    note = failure_note(record)
    assert len(note) == NOTE_CHARS and note.endswith("…") and note.startswith("fails D1: max |err| 1")
    record["correctness"]["distributions"]["D1"]["reason"] = "shape"
    assert failure_note(record) == "fails D1: shape"
