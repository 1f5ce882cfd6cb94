"""The generation run: every (problem, sample) of a suite sent to an endpoint with bounded concurrency, the code
extracted into KernelBench's candidate layout, one ``kbv.generation/1`` record appended per sample as it arrives.

A run folder holds ``generations.jsonl`` and ``kernels/level_<L>_problem_<P>_sample_<S>_kernel.py``. A candidate
file's bytes are exactly what the record's ``code_sha256`` hashes (the evaluation record's ``candidate_sha256``).
Resume is keyed on (problem, sample): samples with a record other than a request error are kept, so a killed run
loses nothing already received. The API key is never recorded: the endpoint is recorded without it.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kbv.files import write_atomic
from kbv.problems import Problem
from kbv.records import RecordWriter
from kbv.study.client import Completion, Endpoint, complete, public_url
from kbv.study.extract import extract
from kbv.study.prompts import make_renderer, problem_source, prompt_sha256

GENERATION_SCHEMA = "kbv.generation/1"
GENERATIONS_FILE = "generations.jsonl"
KERNELS_DIR = "kernels"
STATUSES = ("ok", "no_code", "truncated", "error")
#: Settings that must match for --resume to add to a run (a mixed run would not be one study).
RESUME_KEYS = ("model", "endpoint_url", "api", "sampling", "backend", "precision", "template", "extract")


def candidate_name(problem: Problem, sample: int) -> str:
    return f"level_{problem.level or 0}_problem_{problem.problem_id}_sample_{sample}_kernel.py"


@dataclass
class GenerationRecord:
    problem: str
    level: int | None
    problem_id: int
    problem_sha256: str
    sample: int
    model: str
    endpoint: dict[str, Any]
    sampling: dict[str, Any]
    backend: str
    precision: str
    template: str
    prompt_sha256: str
    extract: str
    status: str                    # ok | no_code | truncated | error
    candidate: str | None          # the kernel file's name (status ok)
    code_sha256: str | None        # sha256 of the kernel file's bytes (status ok)
    language: str | None           # the code fence's info string
    response: str                  # the raw response text
    reasoning: str | None          # a separate reasoning field, where the server sent one
    finish_reason: str | None
    usage: dict[str, Any]          # as reported: prompt/completion/reasoning/cached tokens, shared_by
    latency_s: float
    retries: int
    error: str | None
    created: str = ""
    schema: str = GENERATION_SCHEMA

    def to_json(self) -> str:
        data = {"schema": self.schema, **{k: v for k, v in self.__dict__.items() if k != "schema"}}
        return json.dumps(data)


def read_generations(path: str | Path) -> Iterator[dict[str, Any]]:
    """Every complete ``kbv.generation/1`` record in a file (a truncated last line is skipped)."""
    path = Path(path)
    if not path.is_file():
        return
    with path.open(encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict) and str(data.get("schema", "")).startswith("kbv.generation/"):
                yield data


def latest_generations(records: Iterable[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """The last record per (problem, sample): a resumed run's retry supersedes the error it retried."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for r in records:
        out[(r["problem"], int(r["sample"]))] = r
    return out


@dataclass
class GenerateConfig:
    endpoint: Endpoint
    out: Path
    samples: int = 1
    temperature: float = 0.0
    max_tokens: int | None = None
    backend: str = "cuda"
    precision: str = "fp32"
    concurrency: int = 32
    n_per_request: int = 1
    template: Path | None = None
    prompt_option: str = "one_shot"
    kernelbench: Path | None = None
    extract: str = "first"
    resume: bool = False


class GenerateError(ValueError):
    """A run that cannot start (an existing run without --resume, mismatched settings, a bad template)."""


@dataclass
class Summary:
    requested: int = 0                       # samples asked for in this invocation
    skipped: int = 0                         # samples already recorded (--resume)
    statuses: dict[str, int] = field(default_factory=dict)


def _settings(cfg: GenerateConfig, template_name: str) -> dict[str, Any]:
    return {"model": cfg.endpoint.model, "endpoint_url": public_url(cfg.endpoint.base_url), "api": cfg.endpoint.api,
            "sampling": {"temperature": cfg.temperature, "max_tokens": cfg.max_tokens, "n": cfg.n_per_request},
            "backend": cfg.backend, "precision": cfg.precision, "template": template_name, "extract": cfg.extract}


def _record_settings(r: dict[str, Any]) -> dict[str, Any]:
    return {"model": r.get("model"), "endpoint_url": (r.get("endpoint") or {}).get("base_url"),
            "api": (r.get("endpoint") or {}).get("api"), "sampling": r.get("sampling"), "backend": r.get("backend"),
            "precision": r.get("precision"), "template": r.get("template"), "extract": r.get("extract")}


def _write_atomic(path: Path, data: bytes) -> None:
    write_atomic(path, data)


def plan(problems: list[Problem], cfg: GenerateConfig) -> tuple[str, Callable[[str, str], str], list[tuple[Problem, list[int]]], int]:
    """Validate the run and list the work: (template name, renderer, [(problem, samples to generate)], skipped)."""
    if cfg.samples < 1:
        raise GenerateError("--samples must be at least 1")
    if cfg.n_per_request < 1:
        raise GenerateError("--n-per-request must be at least 1")
    if cfg.concurrency < 1:
        raise GenerateError("--concurrency must be at least 1")
    template_name, render = make_renderer(cfg.template, cfg.backend, cfg.precision, option=cfg.prompt_option,
                                          kernelbench=cfg.kernelbench)
    gen_path = cfg.out / GENERATIONS_FILE
    existing = list(read_generations(gen_path))
    if existing and not cfg.resume:
        raise GenerateError(f"{gen_path} already holds {len(existing)} generations: give --resume to add to it, "
                            "or another --out")
    settings = _settings(cfg, template_name)
    for r in existing:
        theirs = _record_settings(r)
        if theirs != settings:
            diff = ", ".join(f"{k}: {theirs[k]!r} recorded, {settings[k]!r} now" for k in settings
                             if theirs[k] != settings[k])
            raise GenerateError(f"--resume with other settings than {gen_path} was made with ({diff})")
    latest = latest_generations(existing)
    current = {p.key: p.source_sha256 for p in problems}
    changed = sorted({k for (k, _), r in latest.items() if k in current and r.get("problem_sha256") != current[k]})
    if changed:
        raise GenerateError(f"--resume: the problem file changed since it was generated for: {', '.join(changed)}")
    done = {key for key, r in latest.items() if r.get("status") != "error"}
    work: list[tuple[Problem, list[int]]] = []
    skipped = 0
    for p in problems:
        todo = [s for s in range(cfg.samples) if (p.key, s) not in done]
        skipped += cfg.samples - len(todo)
        if todo:
            work.append((p, todo))
    return template_name, render, work, skipped


async def run_generation(problems: list[Problem], cfg: GenerateConfig,
                         on_record: Callable[[GenerationRecord], None] | None = None) -> Summary:
    """Generate every missing (problem, sample), appending one record per sample as its response arrives."""
    template_name, render, work, skipped = plan(problems, cfg)
    kernels = cfg.out / KERNELS_DIR
    kernels.mkdir(parents=True, exist_ok=True)
    writer = RecordWriter(cfg.out / GENERATIONS_FILE)
    summary = Summary(requested=sum(len(s) for _, s in work), skipped=skipped)
    endpoint_info = cfg.endpoint.describe()
    sampling = {"temperature": cfg.temperature, "max_tokens": cfg.max_tokens, "n": cfg.n_per_request}
    semaphore = asyncio.Semaphore(cfg.concurrency)

    def record(problem: Problem, sample: int, prompt_hash: str, c: Completion) -> GenerationRecord:
        path = kernels / candidate_name(problem, sample)
        status, code_hash, candidate, language = "error", None, None, None
        if c.error is None:
            ex = extract(c.text, c.finish_reason, cfg.extract)
            status, language = ex.status, ex.language
            if ex.status == "ok" and ex.code is not None:
                data = ex.code.encode("utf-8")
                _write_atomic(path, data)
                code_hash, candidate = hashlib.sha256(data).hexdigest(), path.name
        if candidate is None:
            path.unlink(missing_ok=True)  # a file left by a killed attempt must not be evaluated as this sample
        return GenerationRecord(
            problem=problem.key, level=problem.level, problem_id=problem.problem_id,
            problem_sha256=problem.source_sha256, sample=sample, model=cfg.endpoint.model, endpoint=endpoint_info,
            sampling=sampling, backend=cfg.backend, precision=cfg.precision, template=template_name,
            prompt_sha256=prompt_hash, extract=cfg.extract, status=status, candidate=candidate,
            code_sha256=code_hash, language=language, response=c.text, reasoning=c.reasoning,
            finish_reason=c.finish_reason, usage=c.usage, latency_s=round(c.latency_s, 4),
            retries=c.retries_taken, error=c.error, created=datetime.now(timezone.utc).isoformat(timespec="seconds"))

    async def one_request(problem: Problem, prompt: str, samples: list[int]) -> None:
        async with semaphore:
            completions = await complete(cfg.endpoint, prompt, n=len(samples), temperature=cfg.temperature,
                                         max_tokens=cfg.max_tokens)
        prompt_hash = prompt_sha256(prompt)
        for sample, c in zip(samples, completions):
            rec = record(problem, sample, prompt_hash, c)
            writer.append(rec)
            summary.statuses[rec.status] = summary.statuses.get(rec.status, 0) + 1
            if on_record is not None:
                on_record(rec)

    tasks = []
    for problem, samples in work:
        prompt = render(problem_source(problem.path), problem.key)
        for i in range(0, len(samples), cfg.n_per_request):
            tasks.append(one_request(problem, prompt, samples[i:i + cfg.n_per_request]))
    await asyncio.gather(*tasks)
    return summary


def generate(problems: list[Problem], cfg: GenerateConfig,
             on_record: Callable[[GenerationRecord], None] | None = None) -> Summary:
    """`run_generation` for callers without an event loop."""
    summary = asyncio.run(run_generation(problems, cfg, on_record))
    summary.statuses = dict(sorted(summary.statuses.items()))
    return summary
