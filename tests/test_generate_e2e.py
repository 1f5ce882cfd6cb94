"""The study's command chain end to end on the CPU, against a fake OpenAI-compatible server on 127.0.0.1:
``kbv generate`` -> ``kbv eval`` -> ``kbv report`` with exact pass@k, fast_0 and token figures; and ``kbv generate``
killed with SIGKILL midway, then resumed without losing or repeating a sample."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from fake_openai import CHAT, FakeOpenAI, Reply, chat_reply, error_reply, usage

CORRECT = (ROOT / "tests" / "candidates" / "correct_torch.py").read_text()               # relu as clamp_min(0)
IDENTITY = (ROOT / "src" / "kbv" / "examples" / "common" / "level_1_problem_5_sample_1_kernel.py").read_text()


def kbv(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "KBV_TEST_API_KEY"}
    return subprocess.run([sys.executable, "-m", "kbv", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT)


def shell(line: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
          ) -> subprocess.CompletedProcess:
    """A command line as a user types it (the shell expands its globs), with ``kbv`` the installed console script
    (a wrapper running this interpreter's ``-m kbv`` where there is none)."""
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "kbv").is_file():
        bin_dir = cwd / ".bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "kbv").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kbv "$@"\n')
        (bin_dir / "kbv").chmod(0o755)
    full = {**os.environ, **(env or {}), "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=timeout, env=full, cwd=cwd)


def kbv_here(*args: str, columns: int = 80):
    """The same command in this process (for the checks around the chain: faster than a new interpreter)."""
    from click.testing import CliRunner

    from kbv.cli import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False, env={"COLUMNS": str(columns)})


def reply(text: str, tokens: int, finish: str = "stop") -> Reply:
    return chat_reply(text, finish_reason=finish, usage_=usage(1000, tokens))


SECRET = "sk-STUDY-CANARY-5e2d9c"  # model A's API key: sent to the endpoint, never written or printed
OVERLOADED = error_reply(500, "overloaded", headers={"retry-after-ms": "5"})  # the client's retries, in ms


@pytest.mark.filterwarnings("ignore:kbv. candidate isolation reduced")
def test_study_chain(tmp_path):
    """The issue's three commands as a user types them (model A), then a second model beside it."""
    runs = tmp_path / "runs"
    key_env = {"KBV_STUDY_API_KEY": SECRET}
    with FakeOpenAI() as server:
        # model A: 3 samples of ReLU and Sigmoid, in request order (concurrency 1)
        server.script(CHAT,
                      reply("```python\n" + CORRECT + "```", 120),           # ReLU 0: correct
                      reply("Try:\n```python\n" + IDENTITY + "```", 80),      # ReLU 1: wrong (identity, fails D4-D6)
                      reply("I need more context.", 40),                     # ReLU 2: no code
                      reply("```python\nimport torch\nclass ModelNew(", 64, "length"),  # Sigmoid 0: truncated
                      reply("Sigmoid is already optimal.", 30),              # Sigmoid 1: no code
                      OVERLOADED, OVERLOADED, OVERLOADED)                     # Sigmoid 2: failed after 2 retries
        gen = gen_a = shell(f"kbv generate --base-url {server.url} --model fake-model-a --problems builtin "
                            "--levels 1 --only 5_ReLU,16_Sigmoid --samples 3 --temperature 0.8 --max-tokens 64 "
                            "--api chat --backend cpp --concurrency 1 --api-key-env KBV_STUDY_API_KEY "
                            "--out runs/A", tmp_path, key_env)
        assert gen.returncode == 0, gen.stderr
        assert "6 samples requested (error 1, no_code 2, ok 2, truncated 1)" in gen.stdout
        assert {r.headers["authorization"] for r in server.requests} == {f"Bearer {SECRET}"}
        # model B: one sample each, the same correct ReLU kernel (byte for byte), no code for Sigmoid
        server.script(CHAT, reply("```python\n" + CORRECT + "```", 200), reply("No.", 10))
        gen = kbv_here("generate", "--base-url", server.url, "--model", "fake-model-b", "--only",
                       "level1/5_ReLU,level1/16_Sigmoid", "--concurrency", "1", "--backend", "cpp", "--out",
                       str(runs / "B"))
        assert gen.exit_code == 0, gen.output
    assert sorted(p.name for p in (runs / "A" / "kernels").iterdir()) == [
        "level_1_problem_5_sample_0_kernel.py", "level_1_problem_5_sample_1_kernel.py"]

    # the key is still in the shell's environment: kbv eval's workers never inherit it
    ev = ev_a = shell("kbv eval --problems builtin --candidates runs/A/kernels --out runs/A/results.jsonl",
                      tmp_path, key_env)
    assert ev.returncode == 0, ev.stderr
    results = [json.loads(line) for line in (runs / "A" / "results.jsonl").read_text().splitlines()]
    gens = [json.loads(line) for line in (runs / "A" / "generations.jsonl").read_text().splitlines()]
    by_sample = {r["sample"]: r for r in results}
    assert (by_sample[0]["verdict"], by_sample[1]["verdict"], by_sample[1]["standard_verdict"]) == (
        "correct", "incorrect", "correct")
    # every evaluation record links back to its generation by the code's sha256
    code = {(g["problem"], g["sample"]): g["code_sha256"] for g in gens if g["code_sha256"]}
    assert {(r["problem"], r["sample"]): r["candidate_sha256"] for r in results} == code
    # model B's kernel is model A's sample 0 byte for byte: its evaluation is A's (kbv eval --resume skips it)
    (runs / "B" / "results.jsonl").write_text(json.dumps(by_sample[0]) + "\n")
    ev = kbv_here("eval", "--problems", "builtin", "--candidates", str(runs / "B" / "kernels"), "--out",
                  str(runs / "B" / "results.jsonl"), "--resume")
    assert ev.exit_code == 0 and "0 evaluated, 1 already recorded" in ev.output, ev.output

    rep = shell("kbv report runs/*/results.jsonl --html study.html", tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert "fake-model-a" in rep.stdout and "fake-model-b" in rep.stdout and "Generation" in rep.stdout
    rep = kbv("report", str(runs / "A" / "results.jsonl"), str(runs / "B" / "results.jsonl"), "--format", "json")
    assert rep.returncode == 0, rep.stderr
    data = json.loads(rep.stdout)
    assert data["runs"] == ["fake-model-a", "fake-model-b"]  # labelled by model
    assert data["universe"] == ["level1/16_Sigmoid", "level1/5_ReLU"]  # generated problems count, code or not
    overall = {run: data["levels"][run][-1] for run in data["runs"]}
    assert overall["fake-model-a"]["fast_p_verified"]["0.0"] == 0.5  # ReLU sample 0 correct, Sigmoid failed
    assert overall["fake-model-b"]["fast_p_verified"]["0.0"] == 0.5
    assert overall["fake-model-a"]["pass_at_k"] == {"1": pytest.approx(1 / 6)}  # every generated sample counts
    # the standard -> verified decomposition and the memory figures as for any run, models side by side
    assert list(data["decomposition"]) == ["fake-model-a", "fake-model-b"]
    steps = {run: [s["name"] for s in data["decomposition"][run][-1]["steps"]] for run in data["decomposition"]}
    assert steps["fake-model-a"] == steps["fake-model-b"] and steps["fake-model-a"][0] == "standard"
    assert all(overall[run]["memory_efficiency"] is not None for run in data["runs"])
    a, b = data["generation"]["fake-model-a"], data["generation"]["fake-model-b"]
    # ReLU: n=3, c=1 verified (c=2 standard: the identity passes D1); Sigmoid: n=3, c=0
    assert a["pass_at_k"]["verified"] == pytest.approx({"1": 1 / 6, "2": 1 / 3, "3": 0.5})
    assert a["pass_at_k"]["standard"] == pytest.approx({"1": 1 / 3, "2": 0.5, "3": 0.5})
    assert b["pass_at_k"]["verified"] == {"1": 0.5}
    assert a["status"] == {"error": 1, "no_code": 2, "ok": 2, "truncated": 1}
    assert [g["retries"] for g in gens if g["status"] == "error"] == [2]  # the openai client's retries, recorded
    assert (a["no_code_rate"], a["truncated_rate"], a["error_rate"]) == pytest.approx((1 / 3, 1 / 6, 1 / 6))
    tokens = a["tokens"]
    assert tokens["output_total"] == 120 + 80 + 40 + 64 + 30  # the failed request reported nothing
    assert tokens["output_per_problem"] == 167
    assert tokens["output_per_correct_kernel"] == {"verified": 334, "standard": 167}
    assert tokens["prompt_per_problem"] == 2500 and tokens["output_per_sample"] == pytest.approx(334 / 5)
    assert b["tokens"]["output_per_correct_kernel"]["verified"] == 210
    assert a["rank_correlation"]["speedup"] == {"rho": None, "n": 1}  # one correct kernel: no correlation
    page = (tmp_path / "study.html").read_text()
    assert 'id="generation"' in page and "fake-model-a" in page and "fake-model-b" in page
    assert 'id="plot-pass_at_k"' in page and 'id="plot-tokens_vs_speedup"' in page  # the generation figures

    text = kbv_here("report", str(runs / "A" / "results.jsonl"), str(runs / "B" / "results.jsonl"), columns=200)
    assert text.exit_code == 0 and "Generation" in text.output and "17% | 33%" in text.output, text.output
    narrow = kbv_here("report", str(runs / "A" / "results.jsonl"), str(runs / "B" / "results.jsonl"), columns=80)
    assert "Generation (every generated sample) (continued)" in narrow.output  # split to fit, never cut
    assert all(len(line) <= 80 for line in narrow.output.splitlines())

    # KernelBench's export keeps working on a generated run
    exp = kbv_here("export-kernelbench", str(runs / "A" / "results.jsonl"), "--level", "1", "--out",
                   str(tmp_path / "eval_results.json"))
    assert exp.exit_code == 0, exp.output
    exported = json.loads((tmp_path / "eval_results.json").read_text())
    assert sorted(s["sample_id"] for s in exported["5"]) == [0, 1]

    # the API key: in no file the chain wrote and in nothing it printed (the variable's name is recorded)
    written = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert b"KBV_STUDY_API_KEY" in written and SECRET.encode() not in written
    assert all(SECRET not in out for out in (gen_a.stdout, gen_a.stderr, ev_a.stdout, ev_a.stderr))


def test_generate_killed_midway_then_resumed(tmp_path):
    out = tmp_path / "run"
    gen_file = out / "generations.jsonl"
    code = "```python\n" + CORRECT + "```"
    served = []

    def responder(request):
        served.append(request)
        # the first run: two answers, then a request that never returns (the run is killed while it waits)
        return reply(code, 10) if len(served) <= 2 else Reply(block=True, body={})

    args = ["generate", "--base-url", None, "--model", "m", "--only", "level1/5_ReLU", "--samples", "5",
            "--concurrency", "1", "--out", str(out)]
    with FakeOpenAI() as server:
        server.respond(CHAT, responder)
        args[2] = server.url
        proc = subprocess.Popen([sys.executable, "-m", "kbv", *args], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while len(served) < 3 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            assert len(served) == 3, proc.stderr.read().decode() if proc.poll() is not None else "no third request"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
        first = [json.loads(line) for line in gen_file.read_text().splitlines()]
        assert sorted(r["sample"] for r in first) == [0, 1]  # what was received is on disk

        served.clear()
        server.respond(CHAT, lambda request: (served.append(request), reply(code, 10))[1])
        again = kbv(*args[:-2], "--out", str(out))
        assert again.returncode == 2 and again.stderr.strip().startswith("Error:") and "--resume" in again.stderr
        resumed = kbv(*args, "--resume")
        assert resumed.returncode == 0, resumed.stderr
        assert "3 samples requested (ok 3), 2 already recorded" in resumed.stdout
        assert len(served) == 3  # only the missing samples were asked for
    records = [json.loads(line) for line in gen_file.read_text().splitlines()]
    assert sorted(r["sample"] for r in records) == [0, 1, 2, 3, 4]  # none lost, none twice
    assert len(list((out / "kernels").iterdir())) == 5
