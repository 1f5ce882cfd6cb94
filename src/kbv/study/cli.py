"""``kbv generate``: candidates for a suite from any OpenAI-compatible endpoint (flags -> `kbv.study.generate`)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from kbv.study.extract import EXTRACT_MODES
from kbv.study.prompts import BACKENDS, PRECISIONS, TemplateError


class CliError(click.ClickException):
    """A one-line ``Error: ...`` with exit status 2 (bad input)."""
    exit_code = 2


def _select(problems: list, levels: str | None, only: str | None) -> list:
    if levels:
        try:
            wanted = {int(x) for x in levels.split(",") if x.strip()}
        except ValueError:
            raise CliError(f"--levels takes comma-separated numbers, got {levels!r}") from None
        problems = [p for p in problems if (p.level or 0) in wanted]
    if only:
        # as kbv agent run --only: a key (level1/5_ReLU), a file stem (5_ReLU) or a problem's name (ReLU)
        keys = [k.strip() for k in only.split(",") if k.strip()]

        def names(p) -> set[str]:
            return {p.key, p.path.stem, p.name}

        unknown = [k for k in keys if not any(k in names(p) for p in problems)]
        if unknown:
            raise CliError(f"--only: no problem {', '.join(unknown)} in the selection "
                           "(give keys like level1/5_ReLU, file stems like 5_ReLU, or names)")
        problems = [p for p in problems if names(p) & set(keys)]
    return problems


def _check_key_variable(name: str) -> None:
    """The key's variable must be one kbv eval's workers never inherit (kbv.sandbox.plan.worker_environment keeps
    an allow-list of variables, less any named like a credential): a key in, say, ``NVIDIA_X`` or ``PATH`` would
    reach candidate code run in the same shell."""
    from kbv.sandbox.plan import allowed_variable

    if allowed_variable(name):
        raise CliError(f"--api-key-env: {name} is a variable kbv eval's workers inherit; keep the key in one named "
                       "like a credential (e.g. MY_ENDPOINT_API_KEY), which workers never see")
    if not os.environ.get(name):
        raise CliError(f"--api-key-env: the environment variable {name} is not set")


@click.command("generate")
@click.option("--base-url", required=True, help="The endpoint's base URL, e.g. http://127.0.0.1:8000/v1.")
@click.option("--model", required=True, help="The model name the endpoint serves.")
@click.option("--problems", "problems_", default="builtin", show_default=True,
              help="A suite name or a suite folder (level*/ subfolders).")
@click.option("--levels", default=None, help="Only these levels, e.g. 1,2.")
@click.option("--only", default=None,
              help="Only these problems, comma-separated: keys (level1/5_ReLU), file stems (5_ReLU) or names.")
@click.option("--samples", type=int, default=1, show_default=True, help="Samples per problem.")
@click.option("--temperature", type=float, default=0.0, show_default=True, help="Sampling temperature.")
@click.option("--max-tokens", type=int, default=None, help="Token limit per response (default: the server's).")
@click.option("--api", type=click.Choice(["chat", "completions"]), default="chat", show_default=True,
              help="The endpoint's API: chat completions or plain completions.")
@click.option("--backend", type=click.Choice(list(BACKENDS)), default="cuda", show_default=True,
              help="What the prompt asks for: CUDA load_inline, Triton, or C++ for the CPU.")
@click.option("--precision", type=click.Choice(list(PRECISIONS)), default="fp32", show_default=True,
              help="The precision inputs and weights are cast to (sets the tolerances).")
@click.option("--concurrency", type=int, default=32, show_default=True, help="Requests in flight at most.")
@click.option("--n-per-request", type=int, default=1, show_default=True,
              help="Samples per request (the API's n). Per-sample token figures need 1.")
@click.option("--prompt-template", type=click.Path(path_type=Path), default=None,
              help="A text template ({ref_arch_src}, {backend}, {precision}, ...) or KernelBench's prompts.toml.")
@click.option("--prompt-option", default="one_shot", show_default=True,
              help="KernelBench prompts.toml only: zero_shot, one_shot or few_shot.")
@click.option("--kernelbench", type=click.Path(path_type=Path), default=None,
              help="A KernelBench checkout whose prompt_constructor_toml renders a prompts.toml "
                   "(default: the one the toml sits in).")
@click.option("--extract", "extract_", type=click.Choice(list(EXTRACT_MODES)), default="first", show_default=True,
              help="Which fenced code block is the candidate.")
@click.option("--api-key-env", default=None,
              help="The environment variable holding the API key (read at request time; never written). "
                   "Not one kbv eval's workers inherit (PATH, NVIDIA_*, ...): a name like ..._API_KEY.")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds per request attempt.")
@click.option("--max-retries", type=int, default=2, show_default=True,
              help="Retries of a failed request (429, 5xx, timeouts), by the openai client.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="The run folder: generations.jsonl and kernels/.")
@click.option("--resume", is_flag=True, help="Add to an existing run: skip (problem, sample) pairs already received.")
def generate(base_url, model, problems_, levels, only, samples, temperature, max_tokens, api, backend, precision,
             concurrency, n_per_request, prompt_template, prompt_option, kernelbench, extract_, api_key_env, timeout,
             max_retries, out, resume) -> None:
    """Generate candidates for a suite from an OpenAI-compatible endpoint (one-shot, single turn)."""
    try:
        import openai  # noqa: F401
    except ImportError:
        raise CliError("kbv generate needs the openai package: pip install 'kbv[gen]'") from None
    from kbv.problems import discover, resolve_suite
    from kbv.study.client import Endpoint
    from kbv.study.generate import GenerateConfig, GenerateError
    from kbv.study.generate import generate as run

    if api_key_env:
        _check_key_variable(api_key_env)
    try:
        problems = discover(resolve_suite(problems_))
    except (FileNotFoundError, ValueError) as exc:
        raise CliError(f"--problems: {exc}") from None
    problems = _select(problems, levels, only)
    if not problems:
        raise CliError("no problems selected")
    cfg = GenerateConfig(
        endpoint=Endpoint(base_url=base_url, model=model, api=api, api_key_env=api_key_env, timeout=timeout,
                          max_retries=max_retries),
        out=out, samples=samples, temperature=temperature, max_tokens=max_tokens, backend=backend,
        precision=precision, concurrency=concurrency, n_per_request=n_per_request, template=prompt_template,
        prompt_option=prompt_option, kernelbench=kernelbench, extract=extract_, resume=resume)
    verbose = sys.stdout.isatty()

    def on_record(rec) -> None:
        if verbose:
            click.echo(f"{rec.problem} #{rec.sample}: {rec.status}"
                       + (f" ({rec.error})" if rec.error else ""))

    try:
        summary = run(problems, cfg, on_record)
    except (GenerateError, TemplateError, ValueError) as exc:
        raise CliError(str(exc)) from None
    counts = ", ".join(f"{k} {v}" for k, v in summary.statuses.items()) or "nothing new"
    click.echo(f"{summary.requested} samples requested ({counts}), {summary.skipped} already recorded -> {out}")
