"""kbv generate's prompts and extraction: the golden prompt, the release contract (canaries in a suite's evaluator
files reach no prompt), KernelBench's prompts.toml rendered by its own constructor, user templates, code extraction."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from kbv.problems import discover, load_problem
from kbv.study.extract import extract, strip_reasoning
from kbv.study.prompts import (
    EXAMPLE_MODEL,
    EXAMPLES,
    TemplateError,
    make_renderer,
    problem_source,
    render_kbv,
    render_text_template,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from fake_openai import CHAT, FakeOpenAI, chat_reply

GOLDEN = ROOT / "tests" / "fixtures" / "golden" / "prompt_level1_5_ReLU_cuda_fp32.txt"
CANARY_SUITE = ROOT / "tests" / "fixtures" / "canary_suite"
RELU = ROOT / "src" / "kbv" / "suites" / "builtin" / "level1" / "5_ReLU.py"
KERNELBENCH = Path(os.environ.get("KBV_KERNELBENCH", ROOT.parent / "shared" / "peers" / "kernelbench"))
KB_TOML = KERNELBENCH / "src" / "kernelbench" / "prompts" / "prompts.toml"


def test_golden_prompt_level1_relu_cuda_fp32():
    text = render_kbv(problem_source(RELU), "cuda", "fp32")
    if os.environ.get("KBV_UPDATE_GOLDEN"):
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8")
    # the structure KernelBench users know: task, one worked example, the problem's source, the instruction
    assert text.index("writing custom CUDA kernels") < text.index("class Model(nn.Module):")
    assert text.index(EXAMPLES["cuda"]) < text.index(problem_source(RELU)) < text.index("Rewrite Model with")
    assert "call the new class ModelNew" in text and "Reply with one ```python code block" in text


@pytest.mark.skipif(not KB_TOML.is_file(), reason="no KernelBench checkout")
@pytest.mark.parametrize("backend", ["cuda", "triton", "cpp"])
def test_kbvs_prompt_is_written_for_kbv_not_copied_from_kernelbench(backend):
    """The structure KernelBench users know, in kbv's own words: no run of 7 words of any text in KernelBench's
    prompts.toml (its task statement, instruction, ...) is in kbv's prompt, the code examples aside."""
    import re

    from kbv.study.prompts import _tomllib

    def texts(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for v in node.values():
                yield from texts(v)
        elif isinstance(node, list):
            for v in node:
                yield from texts(v)

    def runs(text, n=7):
        words = re.findall(r"[a-z0-9_{}]+", text.lower())
        return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}

    theirs = runs(" ".join(texts(_tomllib().loads(KB_TOML.read_text(encoding="utf-8")))))
    ours = render_kbv("", backend, "fp32")
    for code in (EXAMPLES[backend], EXAMPLE_MODEL):
        ours = ours.replace(code, "")
    assert len(theirs) > 200
    assert not runs(ours) & theirs, sorted(runs(ours) & theirs)[:5]


@pytest.mark.parametrize("backend,needle", [("cuda", "cuda_sources=cuda_source"), ("triton", "@triton.jit"),
                                            ("cpp", "cpp_sources=cpp_source")])
@pytest.mark.parametrize("precision,prec_needle", [("fp32", "FP32"), ("bf16", "BF16 (bfloat16)")])
def test_one_variant_per_backend_and_precision(backend, needle, precision, prec_needle):
    text = render_kbv(problem_source(RELU), backend, precision)
    assert needle in text and prec_needle in text
    others = [EXAMPLES[b] for b in EXAMPLES if b != backend]
    assert not any(o in text for o in others)


def test_prompt_renders_braces_in_source_literally():
    src = 'x = {"ref_arch_src": 1}\nclass Model: pass\n'
    assert src in render_kbv(src, "cuda", "fp32")


def test_unknown_backend_or_precision_is_refused():
    with pytest.raises(ValueError):
        render_kbv("", "rocm", "fp32")
    with pytest.raises(ValueError):
        render_kbv("", "cuda", "fp8")


# ---------------------------------------------------------------------------------------------------------------
# Release contract

CANARIES = ("918273645", "CANARY-HELDOUT-7c1e", "CANARY-WEIGHTS-41d9", "0.618033988", "0.31415926", "271828",
            "161803.4", "CANARY-TRACE-llama-b2f0", "CANARY-RECIPE-55aa", "CANARY-OP-e8d3", "123454321", "0.0271828",
            "CANARY-ROOFLINE-90bc")


def test_canaries_are_in_the_evaluator_files_and_within_reach():
    """The fixture is meaningful: every canary is in an evaluator file, and the loaded problem carries the
    held-out shapes (so a prompt built from the Problem object could leak them)."""
    evaluator = "".join(p.read_text() for p in sorted((CANARY_SUITE / "evaluator").iterdir()))
    assert all(c in evaluator for c in CANARIES)
    (problem,) = discover(CANARY_SUITE)
    assert {"size": 918273645} in problem.held_out_shapes


@pytest.mark.parametrize("template", [None, "text", "kernelbench"])
def test_no_evaluator_data_reaches_a_prompt(tmp_path, template):
    pytest.importorskip("openai")
    from kbv.study.client import Endpoint
    from kbv.study.generate import GenerateConfig, generate

    tpl = None
    if template == "text":
        tpl = tmp_path / "t.txt"
        tpl.write_text("Problem {problem} for {backend}:\n{ref_arch_src}\nWrite ModelNew.")
    elif template == "kernelbench":
        if not KB_TOML.is_file():
            pytest.skip("no KernelBench checkout")
        tpl = KB_TOML
    problems = discover(CANARY_SUITE)
    with FakeOpenAI() as server:
        server.respond(CHAT, lambda r: chat_reply("no code"))
        cfg = GenerateConfig(endpoint=Endpoint(server.url, "m", max_retries=0), out=tmp_path / "run", samples=2,
                             template=tpl, concurrency=2)
        generate(problems, cfg)
        bodies = [json.dumps(r.body) + r.prompt_text for r in server.requests]
    assert len(bodies) == 2
    source = problem_source(problems[0].path)
    for body in bodies:
        assert "return x * 2.0" in body  # the problem's source is there ...
        leaked = [c for c in CANARIES if c in body]
        assert not leaked, f"evaluator data in a prompt: {leaked}"  # ... and nothing from the evaluator side
    assert source in server.requests[0].prompt_text


# ---------------------------------------------------------------------------------------------------------------
# Templates


@pytest.mark.skipif(not KB_TOML.is_file(), reason="no KernelBench checkout")
def test_kernelbench_prompts_toml_rendered_by_its_own_constructor():
    name, render = make_renderer(KB_TOML, "cuda", "fp32")
    src = problem_source(RELU)
    text = render(src, "level1/5_ReLU")
    assert name.startswith("kernelbench:prompts.toml@") and name.endswith("/one_shot/cuda/fp32")
    # KernelBench's own wording and its one-shot example, from the checkout
    assert "You write custom CUDA operators to replace the pytorch operators" in text
    example = (KB_TOML.parent / "model_new_ex_add.py").read_text()
    assert example.strip()[:200] in text
    assert src.strip() in text
    assert "FP32 (32-bit floating point)" in text or "fp32" in text.lower()
    # the stand-ins were for the import only: nothing of KernelBench stays imported
    assert "tomli" not in sys.modules and "kernelbench.utils" not in sys.modules and "kernelbench" not in sys.modules
    triton_name, triton_render = make_renderer(KB_TOML, "triton", "bf16")
    assert "Triton kernels" in triton_render(src, "k") and triton_name.endswith("/triton/bf16")


@pytest.mark.skipif(not KB_TOML.is_file(), reason="no KernelBench checkout")
def test_kernelbench_constructor_is_imported_from_the_checkout_with_tomllib_for_tomli():
    from kbv.study.prompts import _tomllib, load_kernelbench_constructor

    constructor = KB_TOML.parents[1] / "prompt_constructor_toml.py"
    module = load_kernelbench_constructor(constructor)
    assert Path(module.__file__).resolve() == constructor.resolve()  # the checkout's file, at run time
    assert module.tomli is _tomllib()  # the standard library's tomllib stood in for tomli
    assert "tomli" not in sys.modules and "kernelbench" not in sys.modules


@pytest.mark.skipif(not KB_TOML.is_file(), reason="no KernelBench checkout")
def test_kernelbench_prompts_toml_without_the_backend_is_a_clear_error():
    with pytest.raises(TemplateError, match="no backend 'cpp'"):
        make_renderer(KB_TOML, "cpp", "fp32")


@pytest.mark.skipif(not KB_TOML.is_file(), reason="no KernelBench checkout")
def test_kernelbench_toml_that_its_constructor_cannot_render_is_a_clear_error(tmp_path):
    broken = tmp_path / "prompts.toml"
    broken.write_text(KB_TOML.read_text().replace("model_new_ex_add.py", "no_such_example.py"))
    with pytest.raises(TemplateError, match="cannot render"):
        make_renderer(broken, "cuda", "fp32", kernelbench=KERNELBENCH)


def test_kernelbench_is_never_vendored():
    """KernelBench's constructor and prompts are read from a checkout at run time, never copied into kbv."""
    package = ROOT / "src" / "kbv"
    files = [p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert not {"prompt_constructor_toml.py", "prompts.toml"} & {p.name for p in files}
    ours = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in files
                     if p.suffix in (".py", ".md", ".toml", ".txt", ".json"))
    assert "def render_prompt_by_option" not in ours and "class PromptConfig" not in ours
    if KB_TOML.is_file():  # no long line of KernelBench's constructor or prompts is in kbv's package
        theirs = [KB_TOML.parents[1] / "prompt_constructor_toml.py", KB_TOML]
        lines = {line.strip() for f in theirs for line in f.read_text(encoding="utf-8").splitlines()
                 if len(line.strip()) >= 50}
        assert len(lines) > 100
        copied = lines & {line.strip() for line in ours.splitlines()}
        assert not copied, sorted(copied)[:5]


def test_kernelbench_toml_without_a_checkout_is_a_clear_error(tmp_path):
    toml = tmp_path / "prompts.toml"
    toml.write_text('[backends.cuda]\nbackend_display = "CUDA"\n[options.one_shot]\ncomponents = []\n')
    with pytest.raises(TemplateError, match="prompt_constructor_toml"):
        make_renderer(toml, "cuda", "fp32")


def test_text_template(tmp_path):
    tpl = tmp_path / "t.md"
    tpl.write_text("[{backend}/{precision}] {problem}\n```python\n{ref_arch_src}```\nkeep {braces} and {x: 1}")
    name, render = make_renderer(tpl, "triton", "bf16")
    out = render("SRC\n", "level1/5_ReLU")
    assert out == "[triton/bf16] level1/5_ReLU\n```python\nSRC\n```\nkeep {braces} and {x: 1}"
    assert name.startswith("file:t.md@") and name.endswith("/triton/bf16")
    # the source is substituted last: braces in it are never read as fields
    assert render_text_template("{ref_arch_src}", "{backend}", "cuda", "fp32", "k") == "{backend}"
    bad = tmp_path / "bad.txt"
    bad.write_text("no source here")
    with pytest.raises(TemplateError, match="ref_arch_src"):
        make_renderer(bad, "cuda", "fp32")


# ---------------------------------------------------------------------------------------------------------------
# Extraction


def test_extract_first_block_by_default_and_last_on_request():
    text = "Plan:\n```python\nA = 1\n```\nthen\n```python\nB = 2\n```\n"
    assert extract(text, "stop").code == "A = 1\n"
    assert extract(text, "stop", "last").code == "B = 2\n"
    assert extract(text, "stop").blocks == 2


def test_extract_language_tags_tildes_and_longer_fences():
    assert extract("~~~py\nx = 1\n~~~", "stop").code == "x = 1\n"
    e = extract("````python\ns = '```'\n```\nstill code\n````", "stop")
    assert e.code == "s = '```'\n```\nstill code\n" and e.language == "python"
    assert extract("```\nplain\n```", "stop").language == ""
    assert extract("```python\r\nx = 1\r\n```\r\n", "stop").code == "x = 1\n"  # CRLF


def test_no_code_and_truncated_are_failures():
    assert extract("I cannot help with that.", "stop").status == "no_code"
    assert extract("```python\nunclosed = 1\n", "stop").status == "no_code"
    assert extract("```python\n\n```", "stop").status == "no_code"  # an empty block is no code
    cut = extract("```python\nx = 1\n```\nand more", "length")
    assert cut.status == "truncated" and cut.code is None


def test_reasoning_blocks_are_stripped():
    text = "<think>maybe\n```python\nWRONG = 1\n```\n</think>\nAnswer:\n```python\nRIGHT = 1\n```"
    assert extract(text, "stop").code == "RIGHT = 1\n"
    # a template that opened the block itself: only the closing tag is in the response
    assert extract("draft ```python\nWRONG\n```\n</think>```python\nRIGHT\n```", "stop").code == "RIGHT\n"
    # reasoning never closed: nothing after it is an answer
    assert extract("<think>```python\nWRONG\n```", "stop").status == "no_code"
    assert strip_reasoning("a<THINKING>b</THINKING>c") == "ac"


def test_load_problem_used_for_prompts_is_the_file_alone():
    p = load_problem(RELU)
    assert problem_source(p.path) == RELU.read_text()
