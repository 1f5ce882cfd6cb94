"""``kbv report`` on agent run folders beside results files: a hand-written run folder (audit.jsonl, final.jsonl)
with hand-computed figures. No worker processes, no network."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from conftest import problem_path
from kbv.agent.audit import AGENT_SCHEMA, add_usage, summarize
from kbv.agent.kb import KnowledgeBase
from kbv.agent.loop import Agent, AgentConfig
from kbv.cli import main
from kbv.problems import load_problem
from kbv.report.agent import improvement_per_iteration, tokens_per_accepted, tokens_vs_attainment

A, B, C = "level1/5_ReLU", "level1/7_Softmax", "level1/1_Square_Matmul"
AGENT_PLOTS = ("agent_tokens_vs_attainment", "agent_best_speedup_per_iteration")


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read whole table rows: a wide terminal (kbv's commands follow COLUMNS, else 80)."""
    monkeypatch.setenv("COLUMNS", "400")


def record(problem: str, verdict: str, speedup: float | None = None, attainment: float | None = None,
           flags: list[str] | None = None) -> dict[str, Any]:
    """A minimal kbv.result/1 record (as tests/test_report.py makes them; unsigned, as imported ones are)."""
    return {"schema": "kbv.result/1", "problem": problem, "level": 1, "sample": 0, "candidate": f"{problem}.py",
            "candidate_sha256": f"sha-{problem}-{speedup}", "verdict": verdict, "standard_verdict": verdict,
            "flags": flags or [], "correctness": {"distributions": {}, "failed_distributions": []},
            "speedup": {"verified": {"value": speedup} if speedup else None,
                        "standard": {"value": speedup} if speedup else None},
            "roofline": {"attainment": {"candidate": attainment}} if attainment is not None else {}}


def iteration(problem: str, i: int, status: str, rec: dict[str, Any] | None, tokens: int,
              best: dict[str, Any] | None, dropout: bool = False) -> dict[str, Any]:
    """An ``iteration`` line as kbv.agent.loop writes it (the fields the summaries read)."""
    sp = ((rec or {}).get("speedup") or {}).get("verified") or {}
    att = ((rec or {}).get("roofline") or {}).get("attainment") or {}
    evaluation = None if rec is None else {
        "verdict": rec["verdict"], "flags": rec["flags"], "speedup": sp.get("value"), "ci_low": sp.get("value"),
        "ci_high": sp.get("value"), "attainment": att.get("candidate"), "regime": None,
        "fallback": "fallback" in rec["flags"], "library_kernels": []}
    return {"schema": AGENT_SCHEMA, "kind": "iteration", "problem": problem, "iteration": i,
            "usage": {"prompt_tokens": tokens, "completion_tokens": 0}, "kernel_file": f"kernels/iter_{i:03d}.py",
            "evaluation": evaluation, "record": rec, "feedback": "", "decision": {"status": status, "reason": "test"},
            "dropout": {"mode": "keep-best"} if dropout else None, "best": best,
            "tokens": add_usage({}, {"prompt_tokens": tokens - tokens // 4, "completion_tokens": tokens // 4})}


def best_of(i: int, speedup: float, attainment: float) -> dict[str, Any]:
    return {"iteration": i, "kernel_file": f"kernels/iter_{i:03d}.py", "speedup": speedup, "ci_low": speedup,
            "ci_high": speedup, "attainment": attainment, "regime": None, "fallback": False}


def make_agent_run(folder: Path) -> Path:
    """Problem A: accepted 1.0 at iteration 1, rejected at 2 and 3 (a dropout after 3), accepted 2.25 at 4, 3000
    tokens in all, scored finally; problem B: one model error and still running (no summary, no final kernel)."""
    folder.mkdir()
    b1, b4 = best_of(1, 1.0, 0.2), best_of(4, 2.25, 0.5)
    a = [{"schema": AGENT_SCHEMA, "kind": "start", "problem": A, "config": {}},
         iteration(A, 1, "accepted", record(A, "correct", 1.0, 0.2), 500, b1),
         iteration(A, 2, "rejected", record(A, "incorrect"), 1200, b1),
         iteration(A, 3, "rejected", record(A, "correct", 0.9, 0.1, ["fallback"]), 2000, b1, dropout=True),
         iteration(A, 4, "accepted", record(A, "correct", 2.25, 0.5), 3000, b4)]
    final = {**record(A, "correct", 2.1, 0.48), "agent": {"iterations": 4, "best_iteration": 4, "stop": "max_iters"}}
    a.append({"schema": AGENT_SCHEMA, "kind": "final", "problem": A, "iteration": 4, "record": final})
    a.append({"schema": AGENT_SCHEMA, "kind": "summary", "problem": A, "stop": "max_iters",
              "summary": summarize(a, stop="max_iters")})
    b = [{"schema": AGENT_SCHEMA, "kind": "start", "problem": B, "config": {}},
         iteration(B, 1, "model_error", None, 100, None)]
    (folder / "audit.jsonl").write_text("".join(json.dumps(e) + "\n" for e in a + b))
    (folder / "final.jsonl").write_text(json.dumps(final) + "\n")
    return folder


@pytest.fixture
def paths(tmp_path: Path) -> tuple[Path, Path]:
    results = tmp_path / "single.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in (record(A, "correct", 1.2), record(C, "incorrect"))))
    return make_agent_run(tmp_path / "agentrun"), results


def test_the_figures_by_hand(paths) -> None:
    from kbv.agent.audit import run_summaries

    a, b = run_summaries(paths[0])
    assert tokens_per_accepted(a) == pytest.approx(1500)  # 3000 tokens, iterations 1 and 4 accepted
    assert improvement_per_iteration(a) == pytest.approx(2.25 ** (1 / 3))  # 1.0 at iteration 1, 2.25 at 4
    assert tokens_vs_attainment(a) == [(500, 0.2), (1200, 0.2), (2000, 0.2), (3000, 0.5)]
    assert tokens_per_accepted(b) is None and improvement_per_iteration(b) is None and tokens_vs_attainment(b) == []
    one = {**a, "series": a["series"][:1]}  # a single best: no span to grow over
    assert improvement_per_iteration(one) is None


def test_json_has_the_summaries_and_the_final_kernels_as_a_run(paths) -> None:
    result = CliRunner().invoke(main, ["report", str(paths[0]), str(paths[1]), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["runs"] == ["agentrun", "single"]
    assert data["universe"] == sorted([A, B, C])  # B: attempted by the agent, no final kernel: failed, not absent
    assert [s["problem"] for s in data["agent"]["agentrun"]] == [A, B]
    assert data["agent"]["agentrun"][0]["accepted_iterations"] == [1, 4]
    assert data["agent"]["agentrun"][0]["tokens"]["total_tokens"] == 3000
    finals = [c for c in data["candidates"] if c["run"] == "agentrun"]
    assert [(c["problem"], c["verdict"], c["speedup_verified"]) for c in finals] == [(A, "correct", 2.1)]
    overall = data["levels"]["agentrun"][-1]
    assert overall["n"] == 3 and overall["correct_verified"] == pytest.approx(1 / 3)
    figures = data["agent_figures"]["agentrun"][0]
    assert figures["tokens_per_accepted"] == pytest.approx(1500)
    assert figures["improvement_per_iteration"] == pytest.approx(2.25 ** (1 / 3))
    single = json.loads(CliRunner().invoke(main, ["report", str(paths[1]), "--format", "json"]).stdout)
    assert single["agent"] == {} and "agent_figures" not in single


def test_table_and_markdown_show_the_agent_runs_section(paths) -> None:
    result = CliRunner().invoke(main, ["report", str(paths[0]), str(paths[1])])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Agent runs" in out
    row_a = next(line for line in out.splitlines() if "agentrun" in line and A in line and "1,4" in line)
    cells = [c.strip() for c in row_a.split("│")]
    assert "1500" in cells and "1.31x" in cells and "2.25x" in cells  # tokens / accepted, per iteration, best
    assert "1.00 > 1.00 > 1.00 > 2.25" in cells and "3000" in cells and "67%" in cells  # 2 of 3 correct: no fallback
    row_b = next(line for line in out.splitlines() if "agentrun" in line and B in line and "running" in line)
    assert [c.strip() for c in row_b.split("│")].count("-") >= 6
    assert "Agent runs" not in CliRunner().invoke(main, ["report", str(paths[1])]).stdout  # no agent run, no section
    md = CliRunner().invoke(main, ["report", str(paths[0]), "--format", "markdown"]).stdout
    assert "## Agent runs" in md and f"| agentrun | {A} | 4 | 3000 | 1,4 | 3 | 2.25x | 0.50 | correct | max_iters | 67% | " \
        "1500 | 1.31x | 1.00 > 1.00 > 1.00 > 2.25 |" in md


def test_csv_and_html_carry_the_agent_rows(paths, tmp_path) -> None:
    out = CliRunner().invoke(main, ["report", str(paths[0]), "--format", "csv", "--html", str(tmp_path / "r.html")])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    agent = [r for r in rows if r["kind"] == "agent"]
    assert [(r["agent_problem"], r["agent_tokens_per_accepted"]) for r in agent] == [(A, "1500.0"), (B, "")]
    assert math.isclose(float(agent[0]["agent_improvement_per_iteration"]), 2.25 ** (1 / 3))
    page = (tmp_path / "r.html").read_text()
    assert '<h2 id="agent">Agent runs</h2>' in page and "1.00 &gt; 1.00 &gt; 1.00 &gt; 2.25" in page


def test_a_folder_without_audit_is_a_one_line_error(tmp_path, paths) -> None:
    (tmp_path / "notarun").mkdir()
    result = CliRunner().invoke(main, ["report", str(tmp_path / "notarun"), str(paths[1])])
    assert result.exit_code == 2
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "audit.jsonl" in lines[0]
    assert "Traceback" not in result.output


def test_an_agent_run_without_final_kernels_is_kept(tmp_path) -> None:
    run = make_agent_run(tmp_path / "early")
    (run / "final.jsonl").unlink()
    result = CliRunner().invoke(main, ["report", str(run), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["runs"] == ["early"] and data["levels"]["early"][-1]["correct_verified"] == 0
    assert "no final kernels" in result.stderr


def test_plots_include_the_agent_figures(paths, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    result = CliRunner().invoke(main, ["report", str(paths[0]), str(paths[1]), "--plots", str(tmp_path / "plots")])
    assert result.exit_code == 0, result.output
    for name in AGENT_PLOTS:
        assert (tmp_path / "plots" / f"{name}.png").stat().st_size > 0
        assert (tmp_path / "plots" / f"{name}.svg").is_file()
    alone = CliRunner().invoke(main, ["report", str(paths[1]), "--plots", str(tmp_path / "single")])
    assert alone.exit_code == 0 and not any((tmp_path / "single" / f"{n}.png").exists() for n in AGENT_PLOTS)


def test_a_run_written_by_the_agent_loop(tmp_path) -> None:
    """The loop's own folder (scripted model and evaluator, no worker): the report shows what the audit says and
    counts the signed final kernel."""
    @dataclass
    class Reply:
        text: str
        usage: dict = field(default_factory=lambda: {"prompt_tokens": 700, "completion_tokens": 300})
        finish_reason: str | None = "stop"
        latency_s: float = 0.0
        retries_taken: int = 0
        error: str | None = None

    speedups = {"# one\n": 1.5, "# two\n": 1.4, "# three\n": 3.0}  # 1.5 accepted, 1.4 not faster, 3.0 accepted
    replies = iter(f"```python\n{k}```" for k in speedups)

    def evaluate(problem, kernel: Path) -> dict:
        s = speedups[kernel.read_text()]
        rec = record(problem.key, "correct", s, s / 10)
        rec["speedup"]["verified"].update(ci_low=s * 0.95, ci_high=s * 1.05)
        return rec

    out = tmp_path / "looprun"
    Agent(lambda messages: Reply(next(replies)), evaluate, evaluate, KnowledgeBase([]),
          AgentConfig(max_iters=3, patience=5), out).run([load_problem(problem_path(A))])
    result = CliRunner().invoke(main, ["report", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    (summary,) = data["agent"]["looprun"]
    assert summary["accepted_iterations"] == [1, 3] and summary["tokens"]["total_tokens"] == 3000
    figures = data["agent_figures"]["looprun"][0]
    assert figures["tokens_per_accepted"] == pytest.approx(1500)
    assert figures["improvement_per_iteration"] == pytest.approx(2 ** (1 / 2))  # 1.5 at 1, 3.0 at 3
    assert [(c["problem"], c["speedup_verified"]) for c in data["candidates"]] == [(A, 3.0)]
    assert "Warning" not in result.stderr  # the signed final.jsonl verifies
