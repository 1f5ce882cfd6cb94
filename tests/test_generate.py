"""kbv generate against a fake OpenAI-compatible server on 127.0.0.1: the client (chat, completions, retries,
timeouts, errors), the run loop (records, candidate files, resume, settings checks, n per request), the API key's
handling, and the generation figures."""
from __future__ import annotations

import hashlib
import json
import re
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("openai")

from kbv.problems import discover, resolve_suite
from kbv.study.client import Endpoint, complete_sync
from kbv.study.figures import generation_figures, spearman
from kbv.study.generate import (
    GENERATIONS_FILE,
    GenerateConfig,
    GenerateError,
    generate,
    public_url,
    read_generations,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_openai import (
    CHAT,
    COMPLETIONS,
    FakeOpenAI,
    Reply,
    chat_reply,
    completion_reply,
    error_reply,
    usage,
)

ROOT = Path(__file__).resolve().parents[1]
FAST_RETRY = {"retry-after-ms": "5"}  # the openai client honours it: retries in milliseconds, not seconds


@pytest.fixture
def server():
    with FakeOpenAI() as s:
        yield s


@pytest.fixture(scope="module")
def relu():
    return [p for p in discover(resolve_suite("builtin")) if p.key == "level1/5_ReLU"]


def fence(code: str, lang: str = "python") -> str:
    return f"```{lang}\n{code}\n```"


# ---------------------------------------------------------------------------------------------------------------
# The client


def test_client_chat_usage_and_request(server):
    server.script(CHAT, chat_reply("hello", usage_=usage(11, 22, reasoning=5, cached=3)))
    (c,) = complete_sync(Endpoint(server.url, "m"), "prompt", temperature=0.7, max_tokens=99)
    assert (c.text, c.finish_reason, c.error, c.retries_taken) == ("hello", "stop", None, 0)
    assert c.usage == {"prompt_tokens": 11, "completion_tokens": 22, "reasoning_tokens": 5, "cached_tokens": 3,
                       "shared_by": 1}
    body = server.requests[0].body
    assert body["messages"] == [{"role": "user", "content": "prompt"}]
    assert (body["model"], body["temperature"], body["max_tokens"], body["n"]) == ("m", 0.7, 99, 1)


def test_client_plain_completions(server):
    server.script(COMPLETIONS, completion_reply("a", "b", finish_reason="length", usage_=usage(3, 8)))
    out = complete_sync(Endpoint(server.url, "m", api="completions"), [{"role": "user", "content": "p"}], n=2)
    assert [c.text for c in out] == ["a", "b"] and {c.finish_reason for c in out} == {"length"}
    assert out[0].usage["shared_by"] == 2 and out[0].usage["completion_tokens"] == 8
    assert server.requests[0].path == COMPLETIONS and server.requests[0].body["prompt"] == "p"


def test_client_429_then_success_counts_the_retry(server):
    server.script(CHAT, error_reply(429, "slow down", headers=FAST_RETRY), chat_reply("ok"))
    (c,) = complete_sync(Endpoint(server.url, "m", max_retries=2), "p")
    assert (c.text, c.error, c.retries_taken) == ("ok", None, 1)
    assert len(server.requests) == 2  # one retry layer: the openai client's


def test_client_500_after_retries_is_an_error_not_an_exception(server):
    server.script(CHAT, *[error_reply(500, "boom", headers=FAST_RETRY)] * 3)
    out = complete_sync(Endpoint(server.url, "m", max_retries=2), "p", n=2)
    assert len(out) == 2 and all(c.error.startswith("http_500") and c.retries_taken == 2 for c in out)
    assert len(server.requests) == 3
    assert out[0].usage["completion_tokens"] is None


def test_client_resends_once_under_max_completion_tokens_when_the_server_asks(server):
    """OpenAI's reasoning models refuse max_tokens (400) and name max_completion_tokens: hosted APIs work too."""
    refused = ("Unsupported parameter: 'max_tokens' is not supported with this model. "
               "Use 'max_completion_tokens' instead.")

    def responder(request):
        if "max_tokens" in request.body:
            return Reply(status=400, body={"error": {"message": refused, "type": "invalid_request_error",
                                                     "param": "max_tokens", "code": "unsupported_parameter"}})
        return chat_reply("ok", usage_=usage(5, 7))

    server.respond(CHAT, responder)
    (c,) = complete_sync(Endpoint(server.url, "o-model"), "p", max_tokens=77)
    assert (c.text, c.error, c.retries_taken, c.usage["completion_tokens"]) == ("ok", None, 1, 7)
    assert [(r.body.get("max_tokens"), r.body.get("max_completion_tokens")) for r in server.requests] == [
        (77, None), (None, 77)]
    # any other 400 is recorded as sent, once; plain completions have no max_completion_tokens: never resent
    server.requests.clear()
    server.respond(CHAT, lambda r: error_reply(400, "temperature must be 1"))
    (c,) = complete_sync(Endpoint(server.url, "o-model"), "p", max_tokens=77)
    assert c.error.startswith("http_400") and c.retries_taken == 0 and len(server.requests) == 1
    server.requests.clear()
    server.respond(COMPLETIONS, lambda r: error_reply(400, refused))
    (c,) = complete_sync(Endpoint(server.url, "o-model", api="completions"), "p", max_tokens=77)
    assert c.error.startswith("http_400") and len(server.requests) == 1


def test_client_timeout(server):
    server.script(CHAT, chat_reply("late", delay=5.0))
    t0 = time.monotonic()
    (c,) = complete_sync(Endpoint(server.url, "m", timeout=0.3, max_retries=0), "p")
    assert c.error.startswith("timeout") and c.text == "" and time.monotonic() - t0 < 3.0


def test_client_malformed_answers_are_errors_not_exceptions(server):
    server.script(CHAT, Reply(body="<html>not json</html>"), Reply(body={"choices": [{"index": 0}]}),
                  Reply(body={"id": "x", "choices": []}))
    ep = Endpoint(server.url, "m", max_retries=0)
    first = complete_sync(ep, "p")[0]
    assert first.error is not None and first.text == ""
    second = complete_sync(ep, "p")[0]
    assert second.text == "" and (second.error is not None or second.finish_reason is None)
    assert [c.error for c in complete_sync(ep, "p", n=2)] == ["missing: the server returned 0 of 2 samples"] * 2


def test_client_reads_the_key_from_the_named_variable_at_call_time(server, monkeypatch):
    ep = Endpoint(server.url, "m", api_key_env="KBV_TEST_KEY")
    monkeypatch.delenv("KBV_TEST_KEY", raising=False)
    (c,) = complete_sync(ep, "p")
    assert c.error.startswith("config:") and not server.requests  # nothing sent without the key
    monkeypatch.setenv("KBV_TEST_KEY", "sk-later")
    server.script(CHAT, chat_reply("x"))
    complete_sync(ep, "p")
    assert server.requests[0].headers["authorization"] == "Bearer sk-later"
    assert "sk-later" not in repr(ep)


def test_a_server_echoing_the_key_never_gets_it_recorded(server, monkeypatch):
    secret = "sk-ECHOED-3b8e5a"
    monkeypatch.setenv("KBV_TEST_KEY", secret)
    server.respond(CHAT, lambda r: error_reply(401, f"bad credentials: {r.headers['authorization']}"))
    (c,) = complete_sync(Endpoint(server.url, "m", api_key_env="KBV_TEST_KEY", max_retries=0), "p")
    assert c.error.startswith("http_401") and "bad credentials: Bearer [redacted]" in c.error
    server.respond(CHAT, lambda r: chat_reply(f"your key is {r.headers['authorization']}"))
    (c,) = complete_sync(Endpoint(server.url, "m", api_key_env="KBV_TEST_KEY"), "p")
    assert c.text == "your key is Bearer [redacted]"


def test_public_url_drops_credentials_and_query():
    assert public_url("https://user:pw@api.example.com:8443/v1?key=abc#x") == "https://api.example.com:8443/v1"
    assert public_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert public_url("http://[::1]:8000/v1?token=x") == "http://[::1]:8000/v1"
    assert Endpoint("https://u:p@h/v1?k=1", "m").describe()["base_url"] == "https://h/v1"


# ---------------------------------------------------------------------------------------------------------------
# The run loop: one problem, samples in order (concurrency 1), one scripted response each

CODE = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.clamp_min(0)"


def test_scripted_responses_become_records_and_files(server, relu, tmp_path):
    slow = chat_reply(fence(CODE), delay=5.0)
    server.script(
        CHAT,
        chat_reply("Here:\n" + fence(CODE) + "\nDone.", usage_=usage(100, 40)),          # 0 code in a fence
        chat_reply(fence("FIRST = 1") + "\n" + fence("SECOND = 2"), usage_=usage(100, 30)),  # 1 two fences
        chat_reply("I would rather not.", usage_=usage(100, 5)),                         # 2 no code
        chat_reply("```python\nx = (1 +", finish_reason="length", usage_=usage(100, 64)),  # 3 truncated
        chat_reply("<think>\n" + fence("DRAFT = 1") + "\n</think>\n" + fence(CODE),     # 4 reasoning block
                   usage_=usage(100, 90, reasoning=50)),
        error_reply(429, headers=FAST_RETRY), chat_reply(fence(CODE), usage_=usage(100, 41)),  # 5 429 then ok
        slow, slow,                                                                      # 6 past the timeout
        error_reply(500, headers=FAST_RETRY), error_reply(500, headers=FAST_RETRY),      # 7 500
    )
    out = tmp_path / "run"
    cfg = GenerateConfig(endpoint=Endpoint(server.url, "fake-m", timeout=0.4, max_retries=1), out=out, samples=8,
                         concurrency=1, temperature=0.5, max_tokens=64)
    summary = generate(relu, cfg)
    assert summary.statuses == {"error": 2, "no_code": 1, "ok": 4, "truncated": 1}
    recs = {r["sample"]: r for r in read_generations(out / GENERATIONS_FILE)}
    assert sorted(recs) == list(range(8))
    status = {s: r["status"] for s, r in recs.items()}
    assert status == {0: "ok", 1: "ok", 2: "no_code", 3: "truncated", 4: "ok", 5: "ok", 6: "error", 7: "error"}
    files = sorted(p.name for p in (out / "kernels").iterdir())
    assert files == [f"level_1_problem_5_sample_{s}_kernel.py" for s in (0, 1, 4, 5)]
    for s in (0, 1, 4, 5):
        data = (out / "kernels" / recs[s]["candidate"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == recs[s]["code_sha256"]  # what kbv eval records as candidate_sha256
    assert (out / "kernels" / recs[0]["candidate"]).read_text() == CODE + "\n"
    assert (out / "kernels" / recs[1]["candidate"]).read_text() == "FIRST = 1\n"
    assert "DRAFT" not in (out / "kernels" / recs[4]["candidate"]).read_text()
    assert recs[4]["usage"]["reasoning_tokens"] == 50 and "<think>" in recs[4]["response"]  # raw response kept
    assert recs[5]["retries"] == 1 and recs[5]["error"] is None
    assert recs[6]["error"].startswith("timeout") and recs[6]["retries"] == 1
    assert recs[7]["error"].startswith("http_500") and recs[7]["retries"] == 1
    assert recs[3]["finish_reason"] == "length" and recs[3]["code_sha256"] is None
    r0 = recs[0]
    assert r0["schema"] == "kbv.generation/1" and r0["model"] == "fake-m" and r0["problem"] == "level1/5_ReLU"
    assert r0["sampling"] == {"temperature": 0.5, "max_tokens": 64, "n": 1}
    assert r0["template"] == "kbv-one-shot/2/cuda/fp32" and r0["backend"] == "cuda" and r0["extract"] == "first"
    assert r0["usage"]["completion_tokens"] == 40 and r0["latency_s"] >= 0
    assert r0["prompt_sha256"] == hashlib.sha256(server.requests[0].prompt_text.encode()).hexdigest()
    assert r0["endpoint"]["base_url"] == server.url and "api_key" not in json.dumps(r0["endpoint"]).replace(
        "api_key_env", "")

    # --resume retries only the request errors, and a retry's record supersedes the error
    server.script(CHAT, chat_reply(fence("SIX = 6")), chat_reply(fence("SEVEN = 7")))
    before = len(server.requests)
    summary = generate(relu, GenerateConfig(**{**cfg.__dict__, "resume": True}))
    assert (summary.requested, summary.skipped, summary.statuses) == (2, 6, {"ok": 2})
    assert len(server.requests) == before + 2
    from kbv.study.generate import latest_generations
    latest = latest_generations(read_generations(out / GENERATIONS_FILE))
    assert all(r["status"] != "error" for r in latest.values()) and len(latest) == 8


def test_a_separate_reasoning_field_is_recorded_and_never_extracted(server, relu, tmp_path):
    """vLLM's and SGLang's reasoning parsers (and DeepSeek's API) send the reasoning beside the answer."""
    server.script(CHAT, chat_reply(fence("ANSWER = 1"), reasoning_content="draft:\n" + fence("DRAFT = 1")),
                  Reply(body={**chat_reply("x").body, "choices": [{"index": 0, "finish_reason": "stop", "message": {
                      "role": "assistant", "content": fence("ANSWER = 2"), "reasoning": "newer vLLM's name"}}]}))
    generate(relu, GenerateConfig(endpoint=Endpoint(server.url, "m"), out=tmp_path / "r", samples=2, concurrency=1))
    recs = {r["sample"]: r for r in read_generations(tmp_path / "r" / GENERATIONS_FILE)}
    assert recs[0]["reasoning"] == "draft:\n" + fence("DRAFT = 1") and recs[0]["response"] == fence("ANSWER = 1")
    assert recs[1]["reasoning"] == "newer vLLM's name"
    kernels = tmp_path / "r" / "kernels"
    assert [(kernels / recs[s]["candidate"]).read_text() for s in (0, 1)] == ["ANSWER = 1\n", "ANSWER = 2\n"]


def test_extract_last_option(server, relu, tmp_path):
    server.script(CHAT, chat_reply(fence("FIRST = 1") + "\n" + fence("SECOND = 2")))
    cfg = GenerateConfig(endpoint=Endpoint(server.url, "m"), out=tmp_path / "r", extract="last")
    generate(relu, cfg)
    assert (tmp_path / "r" / "kernels" / "level_1_problem_5_sample_0_kernel.py").read_text() == "SECOND = 2\n"


def test_concurrency_is_bounded_and_completions_api_works(server, relu, tmp_path):
    server.respond(COMPLETIONS, lambda r: completion_reply(fence(CODE), delay=0.3))
    cfg = GenerateConfig(endpoint=Endpoint(server.url, "m", api="completions"), out=tmp_path / "r", samples=6,
                         concurrency=2)
    t0 = time.monotonic()
    summary = generate(relu, cfg)
    assert summary.statuses == {"ok": 6} and len(server.requests) == 6
    assert server.max_in_flight == 2  # never more than --concurrency, and it did run two at once
    assert time.monotonic() - t0 >= 0.9  # 6 requests of 0.3 s, two at a time
    assert all("writing custom CUDA kernels" in r.body["prompt"] for r in server.requests)


def test_existing_run_needs_resume_and_the_same_settings(server, relu, tmp_path):
    server.respond(CHAT, lambda r: chat_reply("no code"))
    cfg = GenerateConfig(endpoint=Endpoint(server.url, "m"), out=tmp_path / "r", samples=1)
    generate(relu, cfg)
    with pytest.raises(GenerateError, match="--resume"):
        generate(relu, cfg)
    with pytest.raises(GenerateError, match="temperature"):
        generate(relu, GenerateConfig(**{**cfg.__dict__, "resume": True, "temperature": 1.0}))
    with pytest.raises(GenerateError, match="model"):
        generate(relu, GenerateConfig(**{**cfg.__dict__, "resume": True,
                                         "endpoint": Endpoint(server.url, "other")}))
    from dataclasses import replace
    with pytest.raises(GenerateError, match="problem file changed"):
        generate([replace(relu[0], source_sha256="0" * 64)], GenerateConfig(**{**cfg.__dict__, "resume": True}))
    # more samples on resume: only the new ones are asked for
    n = len(server.requests)
    summary = generate(relu, GenerateConfig(**{**cfg.__dict__, "resume": True, "samples": 3}))
    assert (summary.requested, summary.skipped, len(server.requests) - n) == (2, 1, 2)


def test_n_per_request_and_a_server_that_ignores_n(server, relu, tmp_path):
    server.script(CHAT, chat_reply(fence("A = 0"), fence("A = 1"), usage_=usage(50, 30)),
                  chat_reply(fence("A = 2"), usage_=usage(50, 12)))  # asked for 2, answered 1
    cfg = GenerateConfig(endpoint=Endpoint(server.url, "m"), out=tmp_path / "r", samples=4, n_per_request=2,
                         concurrency=1)
    generate(relu, cfg)
    assert [r.body["n"] for r in server.requests] == [2, 2]
    recs = {r["sample"]: r for r in read_generations(tmp_path / "r" / GENERATIONS_FILE)}
    assert [recs[s]["status"] for s in range(4)] == ["ok", "ok", "ok", "error"]
    assert recs[0]["usage"]["shared_by"] == 2 and recs[3]["error"].startswith("missing")
    figs = generation_figures(list(recs.values()), [])
    assert figs["tokens"]["output_total"] == 42  # 30 + 12: per-request usage counted once per request
    assert figs["tokens"]["samples_with_own_usage"] == 1  # only the n=1 answer has per-sample figures


def test_api_key_is_used_but_never_written(server, relu, tmp_path, monkeypatch):
    secret = "sk-CANARY-7f9d2b1e-never-written"
    monkeypatch.setenv("KBV_TEST_API_KEY", secret)
    server.respond(CHAT, lambda r: chat_reply(f"The key? {fence(CODE)}"))
    cfg = GenerateConfig(endpoint=Endpoint(server.url, "m", api_key_env="KBV_TEST_API_KEY"), out=tmp_path / "r",
                         samples=2)
    generate(relu, cfg)
    assert {r.headers["authorization"] for r in server.requests} == {f"Bearer {secret}"}
    written = b"".join(p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file())
    assert b"KBV_TEST_API_KEY" in written  # the variable's name is recorded ...
    assert secret.encode() not in written  # ... its value never


# ---------------------------------------------------------------------------------------------------------------
# Figures


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(0.9486833)  # ties take average ranks (as scipy)
    assert spearman([1, 2], [2, 1]) is None and spearman([1, 1, 1], [1, 2, 3]) is None


def _gen(problem, sample, status, tokens, sha=None, shared_by=1):
    return {"schema": "kbv.generation/1", "problem": problem, "sample": sample, "status": status, "model": "m",
            "code_sha256": sha, "usage": {"completion_tokens": tokens, "prompt_tokens": 10, "shared_by": shared_by}}


def _res(problem, sample, sha, verdict, std, speedup, attainment=None):
    return {"problem": problem, "sample": sample, "candidate_sha256": sha, "verdict": verdict,
            "standard_verdict": std, "speedup": {"verified": {"value": speedup}},
            "roofline": {"attainment": {"candidate": attainment}} if attainment is not None else None}


def test_generation_figures_exactly():
    gens = [_gen("a", 0, "ok", 100, "h0"), _gen("a", 1, "ok", 300, "h1"), _gen("a", 2, "no_code", 50),
            _gen("b", 0, "ok", 200, "h2"), _gen("b", 1, "truncated", 400), _gen("b", 2, "ok", 600, "h3"),
            _gen("b", 2, "ok", 600, "h3")]  # a duplicate line (a re-run) counts once
    res = [_res("a", 0, "h0", "correct", "correct", 1.5, 0.1), _res("a", 1, "h1", "incorrect", "correct", 2.0),
           _res("b", 0, "h2", "correct", "correct", 0.5, 0.2), _res("b", 2, "h3", "correct", "correct", 3.0, 0.9)]
    f = generation_figures(gens, res)
    assert (f["problems"], f["samples"], f["samples_per_problem"]) == (2, 6, 3)
    assert f["status"] == {"no_code": 1, "ok": 4, "truncated": 1}
    assert f["no_code_rate"] == pytest.approx(1 / 6) and f["truncated_rate"] == pytest.approx(1 / 6)
    # a: n=3 c=1 ; b: n=3 c=2 (verified) / a: c=2, b: c=2 (standard)
    assert f["pass_at_k"]["verified"] == pytest.approx({1: (1 / 3 + 2 / 3) / 2, 2: (2 / 3 + 1) / 2, 3: 1.0})
    assert f["pass_at_k"]["standard"] == pytest.approx({1: 2 / 3, 2: 1.0, 3: 1.0})
    assert f["tokens"]["output_total"] == 1650 and f["tokens"]["output_per_problem"] == 825
    assert f["tokens"]["output_per_correct_kernel"] == {"verified": 550, "standard": 412.5}
    assert f["tokens"]["output_per_sample"] == 275
    # correct kernels: tokens 100, 200, 600 against speedups 1.5, 0.5, 3.0 and attainment 0.1, 0.2, 0.9
    assert f["rank_correlation"]["speedup"] == {"rho": pytest.approx(0.5), "n": 3}
    assert f["rank_correlation"]["attainment"] == {"rho": pytest.approx(1.0), "n": 3}
    assert f["unevaluated"] == 0 and f["evaluated"] == 4

    # the report's per-group pass@k counts every generated sample, not only the evaluated ones
    from kbv.report.metrics import compare_runs
    from kbv.study.figures import apply_to_comparison
    comparison = compare_runs({"m": res}, ["a", "b"])
    assert comparison.levels["m"][-1].pass_at_k == {1: pytest.approx((1 / 2 + 1) / 2)}  # a: 1 of 2, b: 2 of 2
    apply_to_comparison(comparison, {"m": res}, {"m": gens})
    assert comparison.levels["m"][-1].pass_at_k == {1: pytest.approx((1 / 3 + 2 / 3) / 2)}  # of 3 each
    assert [g.pass_at_k for g in comparison.families["m"]] == [{1: pytest.approx(0.5)}]
    assert comparison.generation["m"]["samples"] == 6


def test_report_attaches_generations_by_folder_or_by_code_hash(tmp_path):
    from kbv.study.figures import (
        attach_generations,
        generation_rows,
        study_figures,
        study_universe,
    )

    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for d in (a, b, c):
        d.mkdir()
    gen_a = [dict(_gen("p1", 0, "ok", 10, "ha"), model="model-x"), dict(_gen("p2", 0, "no_code", 5), model="model-x")]
    gen_b = [dict(_gen("p1", 0, "ok", 20, "hb"), model="model-y")]
    (a / GENERATIONS_FILE).write_text("".join(json.dumps(g) + "\n" for g in gen_a))
    (c / "elsewhere.jsonl").write_text("".join(json.dumps(g) + "\n" for g in gen_b))
    runs = {"results": [_res("p1", 0, "ha", "correct", "correct", 1.2)],
            "results'": [_res("p1", 0, "hb", "incorrect", "incorrect", None)],
            "plain": [_res("p1", 0, "hz", "correct", "correct", 1.0)]}
    labelled = {"results": a / "results.jsonl", "results'": b / "results.jsonl", "plain": c / "plain.jsonl"}
    new_runs, generation = attach_generations(labelled, runs, [c / "elsewhere.jsonl"])
    assert list(new_runs) == ["model-x", "model-y", "plain"]  # by model where generations exist
    assert [g["model"] for g in generation["model-y"]] == ["model-y"]  # matched to its run by code hash
    assert study_universe(new_runs, generation) == ["p1", "p2"] and study_universe(new_runs, {}) is None
    (c / "stray.jsonl").write_text(json.dumps(_gen("p1", 0, "ok", 1, "h-nowhere")) + "\n")
    with pytest.raises(ValueError, match="matches no record"):
        attach_generations(labelled, runs, [c / "stray.jsonl"])
    figs = study_figures(new_runs, generation)
    assert figs["model-x"]["pass_at_k"]["verified"] == {1: 0.5} and figs["model-y"]["pass_at_k"]["verified"] == {1: 0}
    from types import SimpleNamespace

    from kbv.report.plots import pass_at_k_plot, tokens_vs_speedup_plot
    plain = SimpleNamespace(runs=["plain"], generation={})
    assert pass_at_k_plot(plain) is None and tokens_vs_speedup_plot(plain) is None  # nothing drawn without records
    header, rows = generation_rows(figs)
    assert header[2] == "pass@1 ver|std" and rows[0][:3] == ["model-x", "2 (1/problem)", "50% | 50%"]


def test_cli_bad_input_is_one_line_error_exit_2(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from kbv.cli import main

    runner = CliRunner()
    base = ["generate", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--out", str(tmp_path / "r")]
    monkeypatch.delenv("KBV_NO_SUCH_KEY", raising=False)
    for extra, message in ((["--only", "level1/999_Nope"], "--only: no problem level1/999_Nope"),
                           (["--levels", "one"], "--levels takes comma-separated numbers"),
                           (["--api-key-env", "KBV_NO_SUCH_KEY"], "KBV_NO_SUCH_KEY is not set"),
                           (["--problems", str(tmp_path / "missing")], "--problems:"),
                           (["--samples", "0"], "--samples must be at least 1"),
                           (["--prompt-template", str(tmp_path / "none.txt")], "no such template file")):
        result = runner.invoke(main, base + extra)
        assert result.exit_code == 2, (extra, result.output)
        assert result.output.startswith("Error: ") and message in result.output, result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "r").exists()  # nothing was started


def test_only_takes_keys_file_stems_and_names():
    from kbv.study.cli import CliError, _select

    problems = discover(resolve_suite("builtin"))
    picked = _select(problems, "1", "5_ReLU,Sigmoid,level1/6_GELU")  # as kbv agent run --only
    assert sorted(p.key for p in picked) == ["level1/16_Sigmoid", "level1/5_ReLU", "level1/6_GELU"]
    with pytest.raises(CliError, match="no problem 5_ReLU"):
        _select(problems, "2", "5_ReLU")  # --levels first: a level-1 problem is not in a level-2 selection


def test_the_key_variable_is_one_that_evaluation_workers_never_inherit(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from kbv.cli import main
    from kbv.sandbox.plan import worker_environment
    from kbv.study.cli import _check_key_variable

    monkeypatch.delenv("KBV_SANDBOX_DISABLE", raising=False)
    for name in ("NVIDIA_ENDPOINT", "PYTHONPATH", "TRITON_CACHE"):  # inherited by kbv eval's workers: refused
        monkeypatch.setenv(name, "sk-would-reach-candidates")
        result = CliRunner().invoke(main, ["generate", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                                           "--api-key-env", name, "--out", str(tmp_path / "r")])
        assert result.exit_code == 2 and "workers inherit" in result.output, result.output
    assert not (tmp_path / "r").exists()
    for name in ("KBV_TEST_API_KEY", "OPENAI_API_KEY", "HF_TOKEN", "MY_ENDPOINT"):  # accepted ...
        monkeypatch.setenv(name, "sk-secret")
        _check_key_variable(name)
        assert name not in worker_environment()  # ... and never in a worker's environment


def test_openai_is_an_optional_extra_pinned_to_3_that_dev_includes():
    from importlib.metadata import version

    from kbv.study.prompts import _tomllib

    project = _tomllib().loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert not any(d.replace(" ", "").startswith("openai") for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert extras["gen"] == ["openai>=3,<4"] and "openai>=3,<4" in extras["dev"]
    assert version("openai").split(".")[0] == "3"  # what these tests ran against


def test_generation_records_hold_the_issue_fields_as_docs_formats_describes(server, relu, tmp_path):
    server.script(CHAT, chat_reply(fence(CODE), usage_=usage(12, 34, reasoning=5, cached=6)))
    generate(relu, GenerateConfig(endpoint=Endpoint(server.url, "m"), out=tmp_path / "r", max_tokens=50))
    (rec,) = read_generations(tmp_path / "r" / GENERATIONS_FILE)
    # the issue's list: problem, sample, model, endpoint (no secret), sampling, prompt hash and template name, raw
    # response, extracted code hash, finish reason, usage as reported, latency, retries, error
    for field in ("problem", "sample", "model", "endpoint", "sampling", "prompt_sha256", "template", "response",
                  "code_sha256", "finish_reason", "usage", "latency_s", "retries", "error"):
        assert field in rec, field
    assert rec["schema"] == "kbv.generation/1"
    assert rec["usage"] == {"prompt_tokens": 12, "completion_tokens": 34, "reasoning_tokens": 5,
                            "cached_tokens": 6, "shared_by": 1}
    doc = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8")
    block = doc.split("## Generations (`kbv.generation/1`)", 1)[1].split("```", 2)[1]
    documented = set(re.findall(r'"(\w+)":', block))
    written = set(rec) - {"auth"} | set(rec["endpoint"]) | set(rec["sampling"]) | set(rec["usage"])
    assert written == documented  # every field written is documented, and every documented one is written


def test_readme_running_a_study_has_the_issues_command_chain():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Running a study\n", 1)[1].split("\n## ", 1)[0]
    chain = (
        "kbv generate --base-url http://127.0.0.1:8000/v1 --model M --problems SUITE|DIR [--levels 1,2] "
        "[--only ...] \\\n"
        "             --samples N --temperature T --max-tokens K [--api chat|completions] "
        "[--backend cuda|triton|cpp] \\\n"
        "             [--concurrency 32] [--prompt-template FILE] --out runs/M [--resume]\n"
        "kbv eval --problems SUITE|DIR --candidates runs/M/kernels --out runs/M/results.jsonl\n"
        "kbv report runs/*/results.jsonl --html study.html")
    assert chain in section  # tests/test_generate_e2e.py::test_study_chain runs these three as written
    from kbv.study.cli import generate as command

    options = {o for p in command.params for o in p.opts}
    for flag in ("--base-url", "--model", "--problems", "--levels", "--only", "--samples", "--temperature",
                 "--max-tokens", "--api", "--backend", "--concurrency", "--prompt-template", "--out", "--resume"):
        assert flag in options, flag
