"""The optimisation agent's loop (kbv.agent.loop) against a scripted model on loopback HTTP and a scripted evaluator,
the knowledge base (kbv.agent.kb) and the task harness (kbv.agent.task). No worker process is started here; the
real evaluator runs in tests/test_agent_e2e.py."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_openai import CHAT, FakeOpenAI, chat_reply, usage

from kbv.agent import feedback as fb
from kbv.agent.audit import AGENT_SCHEMA, read_audit
from kbv.agent.kb import KnowledgeBase, notes_dir, query_expression
from kbv.agent.loop import Agent, AgentConfig, decide, endpoint_complete, extract_code
from kbv.agent.task import TaskError, export_task, read_task, score_tasks
from kbv.cli import main
from kbv.problems import builtin_suite_dir, discover, load_problem
from kbv.study.client import Endpoint


@pytest.fixture(autouse=True)
def _wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read whole table rows: a wide terminal (kbv's commands follow COLUMNS, else 80)."""
    monkeypatch.setenv("COLUMNS", "200")

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = ROOT / "tests" / "candidates"
EXAMPLES = ROOT / "src" / "kbv" / "examples"

# the scripted model's kernels: the project's own fixtures and examples
COMPILE_ERROR = (CANDIDATES / "syntax_error.py").read_text()
WRONG = (EXAMPLES / "common" / "level_1_problem_5_sample_1_kernel.py").read_text()  # identity "ReLU": fails D4
SLOW = (CANDIDATES / "correct_torch.py").read_text()
FAST = (CANDIDATES / "strided_output.py").read_text()
FALLBACK = (CANDIDATES / "fallback_torch_relu.py").read_text()
OWN = (CANDIDATES / "fallback_triton_decoy.py").read_text().replace(
    "if x.dtype == torch.float64:", "if True:")  # the decoy's Triton kernel, launched

CANARIES = ("7919", "104729", "CANARY_WEIGHT_5a1f", "CANARY_PROVENANCE_9d3e", "CANARY_EVALUATOR_NOTE_77c2")


def record(verdict="correct", speedup=None, ci=None, flags=(), failed=(), attainment=None, ops=None, error=None):
    """A scripted kbv.result/1 record (with a seed and roofline counts that must never reach feedback)."""
    rec = {"schema": "kbv.result/1", "problem": "level1/5_ReLU", "sample": 0, "verdict": verdict, "standard_verdict": verdict,
           "flags": list(flags), "error": error, "seeds": {"init": 987654321},
           "correctness": {"failed_distributions": list(failed),
                           "distributions": {d: {"status": "failed", "reason": "mismatch at D4",
                                                 "max_abs_error": 0.5, "max_rel_error": 1.0} for d in failed}},
           "speedup": {}, "roofline": None, "fallback": None}
    if speedup is not None:
        lo, hi = ci or (speedup * 0.9, speedup * 1.1)
        rec["speedup"] = {"verified": {"value": speedup, "ci_low": lo, "ci_high": hi}}
        rec["roofline"] = {"flops": {"fp32": 123456789}, "bytes": 55555555, "regime": "memory",
                           "attainment": {"candidate": attainment, "reference_verified": 0.05}}
    if ops is not None:
        rec["fallback"] = {"library_share": 1.0 if ops else 0.0, "compute_ops": {o: 1 for o in ops},
                           "library_symbols": [], "seed": 1122334455}
    return rec


def fenced(source: str, think: bool = False) -> str:
    return ("<think>try ```python\nprint('not this')\n``` first</think>\n" if think else "") + \
        f"Here is the kernel.\n```python\n{source}```\n"


class ScriptedEvaluator:
    """Maps a kernel's source to a scripted record; records every call (problem, source)."""

    def __init__(self, table: dict[str, dict], kill_at: int | None = None):
        self.table = {hashlib.sha256(k.encode()).hexdigest(): v for k, v in table.items()}
        self.calls: list[tuple[object, str]] = []
        self.kill_at = kill_at

    def __call__(self, problem, kernel: Path) -> dict:
        source = kernel.read_text()
        self.calls.append((problem, source))
        if self.kill_at is not None and len(self.calls) == self.kill_at:
            raise KeyboardInterrupt  # the run is killed mid-evaluation
        return dict(self.table[hashlib.sha256(source.encode()).hexdigest()])


@pytest.fixture()
def suite(tmp_path):
    """A one-problem suite whose evaluator side holds canary values (held-out shape, weights, provenance)."""
    root = tmp_path / "suite"
    (root / "level1").mkdir(parents=True)
    shutil.copyfile(builtin_suite_dir() / "level1" / "5_ReLU.py", root / "level1" / "5_ReLU.py")
    ev = root / "evaluator"
    ev.mkdir()
    (ev / "heldout.json").write_text(json.dumps({"schema": "kbv.heldout/1", "problems": {
        "level1/5_ReLU": [{"batch_size": 7919, "dim": 104729}]}}))
    from kbv.tracesuite.weights import PROVENANCE_SCHEMA, WEIGHTS_SCHEMA

    (ev / "weights.json").write_text(json.dumps({"schema": WEIGHTS_SCHEMA, "source": "CANARY_WEIGHT_5a1f",
                                                 "phases": {"forward": {"level1/5_ReLU": {"weight": 1.0}}}}))
    (ev / "provenance.json").write_text(json.dumps({"schema": PROVENANCE_SCHEMA, "model": "CANARY_PROVENANCE_9d3e"}))
    (ev / "notes.md").write_text("relu triton kernel CANARY_EVALUATOR_NOTE_77c2 held-out shape 7919\n")
    return root


@pytest.fixture()
def server():
    with FakeOpenAI() as s:
        yield s


def _problem(suite_root):
    (problem,) = discover(suite_root)
    assert problem.held_out_shapes  # the suite's copy carries the canary held-out shape
    return problem


def _agent(server, evaluate, out, score=None, kb=None, **config):
    complete = endpoint_complete(Endpoint(base_url=server.url, model="fake", max_retries=0, timeout=30))
    return Agent(complete, evaluate, score, kb or KnowledgeBase.default(), AgentConfig(**config), out)


def _script(server, sources, usages=None):
    for i, s in enumerate(sources):
        u = usages[i] if usages else usage(100 + i, 50 + i, reasoning=10 + i, cached=5)
        server.script(CHAT, chat_reply(fenced(s, think=(i == 0)), usage_=u))


def _iterations(out):
    return [e for e in read_audit(out / "audit.jsonl") if e["kind"] == "iteration"]


# --- the loop ---------------------------------------------------------------------------------------------------

def test_decisions_dropout_keep_best_and_token_ledger(server, suite, tmp_path):
    problem = _problem(suite)
    table = {COMPILE_ERROR: record("compile_error", error={"stage": "compile", "kind": "syntax",
                                                           "message": "SyntaxError: expected ':'",
                                                           "log_tail": "line 7\nSyntaxError: expected ':'"}),
             WRONG: record("incorrect", failed=["D4"]),
             SLOW: record(speedup=0.30, ci=(0.27, 0.33), flags=["fallback"], ops=["aten.clamp_min"]),
             FAST: record(speedup=3.0, ci=(2.7, 3.3), flags=["fallback"], ops=["aten.relu"]),
             FALLBACK: record(speedup=3.1, ci=(2.8, 3.4), flags=["fallback"], ops=["aten.relu"]),
             OWN: record(speedup=4.0, ci=(3.6, 4.4), ops=[], attainment=0.4)}
    sequence = [COMPILE_ERROR, WRONG, SLOW, FAST, FALLBACK, SLOW, OWN]
    _script(server, sequence)
    evaluate, score = ScriptedEvaluator(table), ScriptedEvaluator(table)
    out = tmp_path / "run"
    (summary,) = _agent(server, evaluate, out, score, max_iters=7, patience=2).run([problem])

    its = _iterations(out)
    assert [e["decision"]["status"] for e in its] == ["rejected", "rejected", "accepted", "accepted", "rejected",
                                                      "rejected", "accepted"]
    assert "compile_error" in its[0]["decision"]["reason"] and "D4" in its[1]["decision"]["reason"]
    assert its[2]["decision"]["reason"] == "the first correct kernel"
    assert "CI low 2.7 > best 0.3" in its[3]["decision"]["reason"]
    assert "not faster: verified speedup CI low 2.8 <= best 3" in its[4]["decision"]["reason"]
    # dropout fires after `patience` iterations without an accepted kernel, and the best kernel survives it
    assert [e["iteration"] for e in its if e["dropout"]] == [2, 6]
    assert its[5]["dropout"]["kept"]["best_iteration"] == 4 and its[5]["best"]["iteration"] == 4
    assert summary["dropouts"] == [2, 6] and summary["accepted_iterations"] == [3, 4, 7]
    prompts = [r.prompt_text for r in server.requests_to(CHAT)]
    assert len(prompts) == 7
    assert "SyntaxError" in prompts[1] and "SyntaxError" not in prompts[2]  # iteration 1-2 history dropped
    assert "iterations were dropped" in prompts[2] and "Best kernel so far" not in prompts[2]
    assert "Best kernel so far (iteration 4)" in prompts[6] and FAST.strip() in prompts[6]
    assert "Iteration 5" not in prompts[6] and "6 earlier iterations were dropped" in prompts[6]
    assert "2 earlier iterations were dropped" in prompts[2]
    # the audit trail keeps everything, records included
    assert [e["iteration"] for e in its] == list(range(1, 8))
    assert all(e["schema"] == AGENT_SCHEMA and e["record"]["verdict"] for e in its)
    assert all(len(e["prompt_sha256"]) == 64 and e["kernel_sha256"] for e in its)
    assert summary["best"]["iteration"] == 7
    best_file = out / "kernels" / "level1__5_ReLU" / "best.py"
    assert best_file.read_text() == OWN
    # the token ledger sums the usage the endpoint reported
    n = len(sequence)
    assert summary["tokens"] == {"prompt_tokens": sum(100 + i for i in range(n)),
                                 "completion_tokens": sum(50 + i for i in range(n)),
                                 "reasoning_tokens": sum(10 + i for i in range(n)), "cached_tokens": 5 * n,
                                 "total_tokens": sum(150 + 2 * i for i in range(n))}
    assert its[2]["usage"] == {"prompt_tokens": 102, "completion_tokens": 52, "reasoning_tokens": 12,
                               "cached_tokens": 5}
    # the loop evaluated public shapes only; the final score had the held-out shape
    assert all(p.held_out_shapes == () for p, _ in evaluate.calls)
    assert len(score.calls) == 1 and score.calls[0][1] == OWN and score.calls[0][0].held_out_shapes
    final = [e for e in read_audit(out / "audit.jsonl") if e["kind"] == "final"]
    assert final[0]["held_out_shapes"] == 1 and summary["final"]["verdict"] == "correct"
    assert summary["dsl_adoption"] == pytest.approx(1 / 5)
    assert summary["stop"] == "max_iters"
    assert json.loads((out / "summary.json").read_text())["problems"][0]["best"]["iteration"] == 7
    (tagged,) = [json.loads(line) for line in (out / "final.jsonl").read_text().splitlines()]
    assert tagged["agent"]["tokens"] == summary["tokens"] and tagged["agent"]["best_iteration"] == 7
    from kbv import attest

    check = attest.verify_file(out / "final.jsonl")  # written through kbv's signing writer
    assert check.verified == 1 and not check.findings
    # retrieval ids are recorded per iteration, from every layer
    assert all(any(i.startswith("notes:") for i in e["retrieved"]) for e in its)


def test_reset_dropout_restarts_from_the_reference_and_keeps_the_bar(server, suite, tmp_path):
    table = {FAST: record(speedup=3.0, ci=(2.7, 3.3)), SLOW: record(speedup=0.3, ci=(0.27, 0.33)),
             OWN: record(speedup=2.0, ci=(1.8, 2.2))}
    _script(server, [FAST, SLOW, OWN])
    out = tmp_path / "run"
    (summary,) = _agent(server, ScriptedEvaluator(table), out, max_iters=3, patience=1,
                        dropout="reset").run([_problem(suite)])
    its = _iterations(out)
    assert [e["decision"]["status"] for e in its] == ["accepted", "rejected", "rejected"]
    assert its[1]["dropout"]["mode"] == "reset"
    prompts = [r.prompt_text for r in server.requests_to(CHAT)]
    assert "Best kernel so far (iteration 1)" in prompts[1]
    assert "Best kernel so far" not in prompts[2] and "restarted from the reference" in prompts[2]
    assert "The reference `Model` above" in prompts[2]
    # the best kernel stays on record and is still the bar: 2.0x is not accepted after a 3.0x kernel
    assert "best 3" in its[2]["decision"]["reason"] and summary["best"]["iteration"] == 1
    assert (out / "kernels" / "level1__5_ReLU" / "best.py").read_text() == FAST


def test_require_custom_kernels_rejects_fallbacks_and_names_the_library_kernels(server, suite, tmp_path):
    start = tmp_path / "start.py"
    start.write_text(FALLBACK)
    table = {FALLBACK: record(speedup=3.0, flags=["fallback"], ops=["aten.relu"]),
             FAST: record(speedup=5.0, flags=["partial_fallback"], ops=["aten.clamp_min"]),
             OWN: record(speedup=0.5, ci=(0.45, 0.55), ops=[])}
    _script(server, [FAST, OWN])
    evaluate = ScriptedEvaluator(table)
    out = tmp_path / "run"
    (summary,) = _agent(server, evaluate, out, max_iters=2, patience=5,
                        require_custom_kernels=True).run([_problem(suite)], start=start)
    its = _iterations(out)
    assert [e["iteration"] for e in its] == [0, 1, 2]
    assert its[0]["usage"]["prompt_tokens"] is None  # the start kernel costs no model call
    assert [e["decision"]["status"] for e in its] == ["rejected", "rejected", "accepted"]
    assert "aten.relu" in its[0]["decision"]["reason"] and "aten.clamp_min" in its[1]["decision"]["reason"]
    prompts = [r.prompt_text for r in server.requests_to(CHAT)]
    assert "Starting kernel (iteration 0)" in prompts[0] and "library kernels still used: aten.relu" in prompts[0]
    assert "Library code does not count" in prompts[0]
    assert summary["best"]["iteration"] == 2 and summary["best"]["fallback"] is False
    assert summary["dsl_adoption"] == pytest.approx(1 / 3)


def test_token_budget_stops_the_run(server, suite, tmp_path):
    table = {SLOW: record(speedup=0.3)}
    _script(server, [SLOW] * 5, usages=[usage(100, 50)] * 5)
    out = tmp_path / "run"
    (summary,) = _agent(server, ScriptedEvaluator(table), out, max_iters=10, token_budget=250).run([_problem(suite)])
    assert len(server.requests_to(CHAT)) == 2 and summary["iterations"] == 2
    assert summary["stop"] == "token_budget" and summary["tokens"]["total_tokens"] == 300


def test_target_attainment_stops_the_run(server, suite, tmp_path):
    table = {FAST: record(speedup=3.0, attainment=0.85)}
    _script(server, [FAST] * 3)
    (summary,) = _agent(server, ScriptedEvaluator(table), tmp_path / "run", max_iters=3,
                        target_attainment=0.8).run([_problem(suite)])
    assert summary["stop"] == "target_attainment" and summary["iterations"] == 1


def test_model_errors_and_replies_without_code_are_recorded_not_fatal(server, suite, tmp_path):
    server.script(CHAT, chat_reply("I cannot write that."))
    from fake_openai import error_reply

    server.script(CHAT, error_reply(400, "bad request"))
    server.script(CHAT, chat_reply(fenced(OWN), finish_reason="length"))
    out = tmp_path / "run"
    (summary,) = _agent(server, ScriptedEvaluator({}), out, max_iters=3).run([_problem(suite)])
    assert summary["decisions"] == {"no_kernel": 2, "model_error": 1} and summary["evaluated"] == 0
    its = _iterations(out)
    assert its[0]["kernel_sha256"] is None and "http_400" in its[1]["decision"]["reason"]
    assert "cut off" in its[2]["decision"]["reason"] and its[2]["usage"]["prompt_tokens"] == 10


def test_resume_continues_a_killed_run(server, suite, tmp_path):
    table = {COMPILE_ERROR: record("compile_error"), FAST: record(speedup=3.0), SLOW: record(speedup=0.3),
             OWN: record(speedup=4.0, ci=(3.6, 4.4))}
    _script(server, [COMPILE_ERROR, FAST, SLOW])
    out = tmp_path / "run"
    problem = _problem(suite)
    with pytest.raises(KeyboardInterrupt):  # killed while evaluating iteration 3
        _agent(server, ScriptedEvaluator(table, kill_at=3), out, max_iters=4, patience=2).run([problem])
    assert [e["iteration"] for e in _iterations(out)] == [1, 2]
    with pytest.raises(FileExistsError):  # without --resume an existing run is not overwritten
        _agent(server, ScriptedEvaluator(table), out, max_iters=4).run([problem])
    _script(server, [SLOW, OWN])
    before = len(server.requests_to(CHAT))
    (summary,) = _agent(server, ScriptedEvaluator(table), out, max_iters=4, patience=2).run([problem], resume=True)
    assert len(server.requests_to(CHAT)) - before == 2  # iterations 3 and 4 only
    its = _iterations(out)
    assert [e["iteration"] for e in its] == [1, 2, 3, 4]
    assert [e["decision"]["status"] for e in its] == ["rejected", "accepted", "rejected", "accepted"]
    assert its[2]["best"]["iteration"] == 2  # the state rebuilt from the audit had the best kernel
    prompt3 = server.requests_to(CHAT)[before].prompt_text
    assert "Best kernel so far (iteration 2)" in prompt3 and "Iteration 1: rejected" in prompt3
    assert summary["tokens"]["prompt_tokens"] == 100 + 101 + 100 + 101  # the killed call's tokens were lost
    # a finished run resumes to its summary without any call
    again = len(server.requests_to(CHAT))
    (summary2,) = _agent(server, ScriptedEvaluator(table), out, max_iters=6, patience=2).run([problem], resume=True)
    assert len(server.requests_to(CHAT)) == again and summary2["best"] == summary["best"]
    with pytest.raises(FileExistsError, match="other settings .*dropout"):  # a run resumes with its own settings
        _agent(server, ScriptedEvaluator(table), out, max_iters=4, patience=2, dropout="reset").run(
            [problem], resume=True)


def test_no_hidden_data_reaches_any_prompt(server, suite, tmp_path):
    """Canary values in the suite's evaluator files (held-out shape, weights, provenance, a note) must not appear in
    any request to the model, any stored prompt, or feedback; even with --kb pointed at the suite itself."""
    problem = _problem(suite)
    table = {WRONG: record("incorrect", failed=["D4"]), FAST: record(speedup=3.0, ops=["aten.relu"],
                                                                     flags=["fallback"])}
    _script(server, [WRONG, FAST, WRONG])
    out = tmp_path / "run"
    kb = KnowledgeBase.default([("reference", suite), ("docs", suite)])
    assert not any("CANARY" in t for t in kb.texts.values())
    _agent(server, ScriptedEvaluator(table), out, ScriptedEvaluator(table), kb=kb, max_iters=3).run([problem])
    texts = [json.dumps(r.body) for r in server.requests_to(CHAT)]
    texts += [p.read_text() for p in (out / "prompts").rglob("*")  if p.is_file()]
    assert len(texts) == 6
    for canary in CANARIES + ("987654321", "1122334455", "123456789", "55555555"):  # + seeds, roofline counts
        assert not any(canary in t for t in texts), canary
    assert "level1/5_ReLU" in texts[0]  # the prompts do carry the public problem


def test_public_feedback_hides_seeds_and_roofline_counts():
    rec = record(speedup=2.0, attainment=0.3, ops=["aten.relu"], flags=["fallback"])
    text = fb.public_feedback(rec)
    assert "987654321" not in text and "1122334455" not in text and "123456789" not in text
    assert "speedup" in text and "0.3" in text and "memory" in text and "aten.relu" in text


def test_acceptance_rule():
    assert decide(record(speedup=1.2, ci=(1.05, 1.3)), 1.0, False)["status"] == "accepted"
    assert decide(record(speedup=1.2, ci=(0.95, 1.3)), 1.0, False)["status"] == "rejected"  # CI low decides
    assert decide(record(speedup=9.0, flags=["speedup_above_bound"]), 1.0, False)["status"] == "rejected"
    assert decide(record(speedup=9.0, flags=["fallback"]), 1.0, True)["status"] == "rejected"
    assert decide(record(speedup=9.0, flags=["fallback"]), 1.0, False)["status"] == "accepted"
    assert decide(record(speedup=0.1), None, True)["status"] == "accepted"
    assert decide(record("rejected", speedup=5.0), None, False)["status"] == "rejected"
    assert decide(record(speedup=0.01, ci=(0.01, 0.01)), None, False)["status"] == "accepted"  # the first correct
    truncated = record(speedup=0.02, ci=(None, None), flags=["timing_truncated"])  # an upper bound, no interval
    assert decide(truncated, None, False)["status"] == "accepted"
    assert "timing truncated" in decide(truncated, 0.01, False)["reason"]
    assert decide(record("correct"), None, False)["status"] == "rejected"  # no speedup measured


def test_extract_code_takes_the_first_block_after_think():
    assert extract_code(fenced("x = 1\n", think=True)) == ("x = 1\n", "ok")
    assert extract_code("no code here") == (None, "no_code")
    assert extract_code(fenced("x = 1\n"), "length") == (None, "truncated")


# --- the knowledge base -----------------------------------------------------------------------------------------

def test_retrieval_is_deterministic_and_ties_break_by_path(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("b.md", "a.md", "c.md"):
        (docs / name).write_text("warp shuffle reduction\n")  # identical: equal scores
    kb1 = KnowledgeBase.default([("docs", docs)])
    kb2 = KnowledgeBase.default([("docs", docs)])
    query = "softmax row reduction triton warp shuffle"
    assert [(h.id, h.score) for h in kb1.retrieve(query)] == [(h.id, h.score) for h in kb2.retrieve(query)]
    assert [h.id for h in kb1.search("warp shuffle", 3, "docs")] == ["docs:a.md", "docs:b.md", "docs:c.md"]
    hits = kb1.retrieve("numerically stable softmax max subtraction welford")
    assert [h.layer for h in hits] == sorted((h.layer for h in hits), key=["reference", "notes", "docs"].index)
    assert any(h.id == "notes:numerics.md" for h in hits)


@pytest.mark.parametrize("query", ['"a" OR NEAR(', 'body: x', "* ^ - +", "AND OR NOT", '"""', "NEAR(a b, 2)",
                                   "ünïcödé ∑", "", "docs MATCH 1; DROP TABLE docs"])
def test_fts5_syntax_hostile_queries_are_safe(query):
    kb = KnowledgeBase.default()
    kb.search(query, 5)  # never raises
    assert kb.search("relu", 1)  # the index is intact


def test_raw_text_would_break_fts5_without_quoting():
    """The defence is needed: the same text passed raw to MATCH is a syntax error."""
    kb = KnowledgeBase.default()
    with pytest.raises(sqlite3.OperationalError):
        kb.db.execute("SELECT id FROM docs WHERE docs MATCH ?", ['"a" OR NEAR(']).fetchall()
    assert query_expression('"a" OR NEAR(') == '"a" OR "or" OR "near"'


def test_evaluator_folders_are_never_indexed(suite):
    kb = KnowledgeBase([("reference", suite)])
    assert kb.texts and all("evaluator" not in i for i in kb.texts)
    assert not kb.search("CANARY_EVALUATOR_NOTE_77c2", 5)
    with pytest.raises(ValueError, match="evaluator folder"):
        KnowledgeBase([("docs", suite / "evaluator")])
    r = CliRunner().invoke(main, ["agent", "run", "--problem", str(suite / "level1" / "5_ReLU.py"), "--kb",
                                  f"docs={suite / 'evaluator'}", "--base-url", "x", "--model", "m", "--out", "o"])
    assert r.exit_code == 2 and "Error:" in r.output and "evaluator folder" in r.output


def test_notes_cover_the_topics():
    names = {p.stem for p in notes_dir().glob("*.md")}
    assert {"memory_vs_compute_bound", "fusion", "vectorised_loads", "tiling_tensor_cores", "triton_autotuning",
            "numerics"} <= names


# --- the task harness -------------------------------------------------------------------------------------------

def test_task_export_holds_public_data_only(suite, tmp_path):
    problem = load_problem(suite / "level1" / "5_ReLU.py")
    out = export_task(problem, tmp_path / "task", backend="triton")
    assert sorted(p.name for p in out.iterdir()) == ["5_ReLU.py", "INSTRUCTIONS.md", "candidate.py", "check",
                                                     "task.json"]
    assert (out / "5_ReLU.py").read_bytes() == problem.path.read_bytes()
    assert os.access(out / "check", os.X_OK)
    for path in out.iterdir():
        text = path.read_text()
        for canary in CANARIES:
            assert canary not in text, (path.name, canary)
        assert str(suite) not in text and "evaluator" not in text  # no way back to the suite
    task = read_task(out)
    assert task["problem"] == "level1/5_ReLU" and task["problem_sha256"] == problem.source_sha256
    with pytest.raises(FileExistsError):
        export_task(problem, out)


def test_task_score_uses_the_held_out_shapes_and_weights(suite, tmp_path):
    out = export_task(load_problem(suite / "level1" / "5_ReLU.py"), tmp_path / "task")
    seen = []

    def evaluate(problem, path, options):
        seen.append(problem)
        return {**record(speedup=2.0, attainment=0.5), "problem": problem.key}

    result = score_tasks([out], suite, options=object(), evaluate=evaluate)
    assert seen[0].held_out_shapes == ({"batch_size": 7919, "dim": 104729},)
    assert result["s_agg"]["overall"]["s_agg"] == pytest.approx(0.5)
    (out / "5_ReLU.py").write_text("# edited\n" + (out / "5_ReLU.py").read_text())
    task = json.loads((out / "task.json").read_text())
    task["problem_sha256"] = "0" * 64
    (out / "task.json").write_text(json.dumps(task))
    with pytest.raises(TaskError, match="differs"):
        score_tasks([out], suite, options=object(), evaluate=evaluate)


def test_cli_errors_are_one_line(tmp_path):
    runner = CliRunner()
    r = runner.invoke(main, ["agent", "run", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--out",
                             str(tmp_path / "o")])
    assert r.exit_code == 2 and "Error: give --problem or --problems" in r.output
    r = runner.invoke(main, ["agent", "run", "--problems", "builtin", "--only", "nope", "--base-url", "x",
                             "--model", "m", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "matched no problem" in r.output
    r = runner.invoke(main, ["agent", "run", "--problems", "builtin", "--start", str(CANDIDATES / "zeros.py"),
                             "--base-url", "x", "--model", "m", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "--start is one problem's kernel" in r.output
    r = runner.invoke(main, ["task", "export", "builtin:level1/5_ReLU", "--out", str(tmp_path / "t")])
    assert r.exit_code == 0 and (tmp_path / "t" / "task.json").is_file()
    r = runner.invoke(main, ["task", "export", "builtin:level1/5_ReLU", "--out", str(tmp_path / "t")])
    assert r.exit_code == 2 and r.output.startswith("Error:") and "Traceback" not in r.output
    r = runner.invoke(main, ["task", "check", str(tmp_path)])
    assert r.exit_code == 2 and "not a task folder" in r.output


def test_wrong_on_purpose_examples_are_not_reference_kernels():
    kb = KnowledgeBase.default()
    assert "reference:common/level_1_problem_6_sample_0_kernel.py" in kb.texts
    assert "reference:common/level_1_problem_5_sample_1_kernel.py" not in kb.texts  # the identity "ReLU"
    assert not any("WRONG on purpose" in t[:500] for t in kb.texts.values())


# --- Nsight Compute feedback ------------------------------------------------------------------------------------

NCU_OUTPUT = '''==PROF== Connected to process 1234
==PROF== Profiling "_relu_kernel" - 0: 0%....50%....100% - 9 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed"
"","","","","","","","%","nsecond","%"
"0","1234","python3","127.0.0.1","_relu_kernel","1","7","87.5","1,234","12.25"
'''


def test_ncu_output_is_parsed_and_skipped_without_a_gpu():
    from kbv.agent import ncu

    assert ncu.parse_csv(NCU_OUTPUT) == [{"name": "_relu_kernel", "memory_pct": 87.5, "compute_pct": 12.25,
                                          "duration_ns": 1234.0}]
    assert ncu.parse_csv("==PROF== error") == []
    assert "no GPU" in ncu.unavailable("cpu")


def test_profiler_output_is_feedback_for_correct_kernels_only(server, suite, tmp_path):
    from kbv.agent import ncu

    table = {WRONG: record("incorrect", failed=["D4"]), OWN: record(speedup=2.0, ops=[])}
    _script(server, [WRONG, OWN, OWN])
    calls = []

    def profiler(problem, kernel):
        calls.append(kernel.name)
        return {"status": "ok", "kernels": ncu.parse_csv(NCU_OUTPUT)}

    complete = endpoint_complete(Endpoint(base_url=server.url, model="fake", max_retries=0, timeout=30))
    out = tmp_path / "run"
    Agent(complete, ScriptedEvaluator(table), None, KnowledgeBase.default(), AgentConfig(max_iters=3), out,
          profiler=profiler).run([_problem(suite)])
    assert calls == ["iter_002.py", "iter_003.py"]
    its = _iterations(out)
    assert its[0]["ncu"] is None and its[1]["ncu"]["status"] == "ok"
    prompt3 = server.requests_to(CHAT)[2].prompt_text
    assert "Nsight Compute" in prompt3 and "_relu_kernel: 87.5% / 12.2%, 1.2" in prompt3
    # without a profiler the audit says why there are no metrics
    out2 = tmp_path / "run2"
    _script(server, [OWN])
    _agent(server, ScriptedEvaluator(table), out2, max_iters=1).run([_problem(suite)])
    assert _iterations(out2)[0]["ncu"] == {"status": "skipped", "reason": "not requested (--ncu)"}


# --- suites, reports, the score command -------------------------------------------------------------------------

def test_a_suite_run_keeps_problems_apart_and_reports_them(server, suite, tmp_path):
    shutil.copyfile(builtin_suite_dir() / "level1" / "16_Sigmoid.py", suite / "level1" / "16_Sigmoid.py")
    problems = discover(suite)
    assert [p.key for p in problems] == ["level1/5_ReLU", "level1/16_Sigmoid"]
    table = {FAST: record(speedup=3.0, attainment=0.3), SLOW: record(speedup=0.3)}
    _script(server, [FAST, SLOW, SLOW, FAST])
    out = tmp_path / "run"
    summaries = _agent(server, ScriptedEvaluator(table), out, max_iters=2).run(problems)
    assert [s["problem"] for s in summaries] == ["level1/5_ReLU", "level1/16_Sigmoid"]
    assert [s["accepted_iterations"] for s in summaries] == [[1], [1, 2]]
    assert "16_Sigmoid" in server.requests_to(CHAT)[2].prompt_text
    assert "16_Sigmoid" not in server.requests_to(CHAT)[1].prompt_text
    r = CliRunner().invoke(main, ["agent", "report", str(out), "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [(x["problem"], x["best"]["iteration"]) for x in rows] == [("level1/5_ReLU", 1), ("level1/16_Sigmoid", 2)]
    assert [p["best_speedup"] for p in rows[1]["series"]] == [0.3, 3.0]
    r = CliRunner().invoke(main, ["agent", "report", str(out)])
    assert r.exit_code == 0 and "level1/16_Sigmoid" in r.output and "max_iters" in r.output
    r = CliRunner().invoke(main, ["agent", "report", str(tmp_path)])
    assert r.exit_code == 2 and "Error: no agent run lines" in r.output


def test_task_score_command(suite, tmp_path, monkeypatch):
    from kbv.agent import loop

    seen = []

    def fake(self, problem, kernel):
        seen.append((problem.held_out_shapes, self.options.protocol))
        return {**record(speedup=2.0, attainment=0.25), "problem": problem.key}

    monkeypatch.setattr(loop.KbvEvaluator, "__call__", fake)
    runner = CliRunner()
    task_dir = tmp_path / "t"
    assert runner.invoke(main, ["task", "export", str(suite / "level1" / "5_ReLU.py"), "--out",
                                str(task_dir)]).exit_code == 0
    out = tmp_path / "scored.jsonl"
    r = runner.invoke(main, ["task", "score", str(task_dir), "--suite", str(suite), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert seen == [(({"batch_size": 7919, "dim": 104729},), "both")]
    assert "S_agg (overall): 0.25" in r.output and "CANARY" not in r.output
    assert json.loads(out.read_text())["problem"] == "level1/5_ReLU"
    from kbv import attest

    assert attest.verify_file(out).verified == 1
    r = runner.invoke(main, ["task", "score", str(task_dir)])  # the builtin suite's ReLU is the same file
    assert r.exit_code == 0 and "S_agg" not in r.output


def test_the_profiled_process_marks_the_range_ncu_filters_on():
    from kbv.agent import ncu
    from kbv.worker import ncu_target

    assert ncu_target.RANGE == ncu.RANGE
