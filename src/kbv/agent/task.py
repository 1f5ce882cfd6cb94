"""A harness for external coding agents: self-contained task folders, a public ``check``, and the final score.

``export_task`` writes a folder holding only public data: the problem file (byte for byte: its own shapes, no
held-out ones), ``INSTRUCTIONS.md``, a ``candidate.py`` stub (the reference, as a starting point), ``task.json``
(the problem's key and hash; no path to the suite) and an executable ``check`` that runs ``kbv task check`` on
the folder, which evaluates the candidate on the folder's problem file alone and prints the public feedback
(``kbv.agent.feedback``). Nothing of the suite's evaluator side (held-out shapes, weights, provenance, seeds,
roofline counts and ceilings) is written or referenced. ``score_tasks`` evaluates each folder's final
``candidate.py`` against the suite's copy of the problem with its held-out shapes and the full protocol, and gives
the suite score (S_agg) where the suite has weights.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from kbv.protocol import DISTRIBUTIONS

TASK_SCHEMA = "kbv.task/1"
CANDIDATE = "candidate.py"

_CHECK = """#!/bin/sh
# Evaluates candidate.py (or the file given) on this folder's problem with kbv and prints the public feedback.
cd "$(dirname "$0")" || exit 2
if command -v kbv >/dev/null 2>&1; then exec kbv task check . "$@"; fi
exec python3 -m kbv task check . "$@"
"""

_BACKEND = {"cuda": "CUDA C++ (torch.utils.cpp_extension.load_inline with cuda_sources)",
            "triton": "Triton (@triton.jit kernels launched from forward)",
            "cpp": "C++ for the CPU (torch.utils.cpp_extension.load_inline with cpp_sources)"}


def _transform(d: Any) -> str:
    """``x``, ``3x``, ``2x - 1``, ...: a distribution as the map kbv applies to the problem's inputs."""
    scale = "" if d.scale == 1 else "-" if d.scale == -1 else f"{d.scale:g}"
    shift = "" if not d.shift else f" {'-' if d.shift < 0 else '+'} {abs(d.shift):g}"
    return f"{d.name} = {scale}x{shift}"


def _instructions(problem: Any, backend: str, require_custom: bool) -> str:
    name = problem.path.name
    rules = [
        f"Write `{CANDIDATE}`: a Python file defining `class ModelNew(nn.Module)` with the same constructor "
        f"arguments and `forward` signature as `Model` in `{name}`, returning the same outputs (shapes, dtypes).",
        f"Write the kernels in {_BACKEND[backend]}.",
        f"Correctness is checked on {len(DISTRIBUTIONS)} input distributions, each from the problem's own "
        f"`get_inputs()` x (floating inputs only): {', '.join(_transform(d) for d in DISTRIBUTIONS)}, with fresh "
        "random seeds; the final score also uses shapes that are not in this folder: write a kernel for any size, "
        "never for the sizes shown.",
        "Speed is measured against PyTorch with TF32 allowed (kbv's verified baseline); a kernel that is wrong, "
        "mutates its inputs, caches results or tampers with the harness scores nothing.",
    ]
    if require_custom:
        rules.append("Library code does not count: a forward whose work runs in PyTorch ops, cuBLAS or cuDNN is "
                     "scored as rejected.")
    body = "\n".join(f"- {r}" for r in rules)
    return (f"# Task: {problem.key}\n\nThe problem is `{name}` (KernelBench format: `Model`, `get_inputs()`, "
            f"`get_init_inputs()`).\n\n{body}\n\n## Checking your kernel\n\n```\n./check            # evaluates "
            f"{CANDIDATE}\n./check other.py   # or another file\n./check --json     # the public feedback as JSON\n"
            "```\n\n`check` runs kbv on this folder only and prints the public part of the verdict: errors and log "
            "tails, which input distributions failed and how, flags, speedups with their intervals, roofline "
            "attainment and bound, and the library kernels the forward still uses. The final score is computed "
            f"by the task's owner from `{CANDIDATE}` as it is when you finish.\n")


def export_task(problem: Any, out: str | Path, *, backend: str = "triton", require_custom: bool = False) -> Path:
    """Write the task folder for ``problem`` (a ``kbv.problems.Problem``) at ``out`` (new or empty)."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty")
    if backend not in _BACKEND:
        raise ValueError(f"backend must be one of {', '.join(_BACKEND)}")
    out.mkdir(parents=True, exist_ok=True)
    source = problem.path.read_bytes()
    (out / problem.path.name).write_bytes(source)
    stub = (f'"""Candidate for {problem.key}. Starting point: the reference itself (library code): replace it with '
            f'your own kernels."""\n' + source.decode("utf-8") + "\n\nclass ModelNew(Model):\n    pass\n")
    (out / CANDIDATE).write_text(stub, encoding="utf-8")
    (out / "INSTRUCTIONS.md").write_text(_instructions(problem, backend, require_custom), encoding="utf-8")
    task = {"schema": TASK_SCHEMA, "problem": problem.key, "problem_file": problem.path.name,
            "problem_sha256": problem.source_sha256, "backend": backend, "require_custom_kernels": require_custom,
            "candidate": CANDIDATE}
    (out / "task.json").write_text(json.dumps(task, indent=1) + "\n")
    check = out / "check"
    check.write_text(_CHECK)
    check.chmod(check.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return out


class TaskError(ValueError):
    """A task folder that cannot be checked or scored."""


def read_task(folder: str | Path) -> dict[str, Any]:
    folder = Path(folder)
    try:
        task = json.loads((folder / "task.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TaskError(f"{folder}: not a task folder ({exc})") from None
    if not isinstance(task, dict) or task.get("schema") != TASK_SCHEMA:
        raise TaskError(f"{folder}/task.json: schema is not {TASK_SCHEMA}")
    name = str(task.get("problem_file", ""))
    if not name or os.sep in name or name.startswith("."):
        raise TaskError(f"{folder}/task.json: bad problem_file")
    return task


def task_problem(folder: str | Path) -> Any:
    """The folder's own problem file (public shapes only: no suite, so no held-out shapes)."""
    from kbv.problems import load_problem

    task = read_task(folder)
    return load_problem(Path(folder) / task["problem_file"])


def check_task(folder: str | Path, candidate: str | Path | None, options: Any) -> dict[str, Any]:
    """Evaluate a candidate on the folder's problem; returns the record (the caller prints the public part)."""
    from kbv.agent.loop import KbvEvaluator

    folder = Path(folder)
    problem = task_problem(folder)
    path = Path(candidate) if candidate else folder / CANDIDATE
    if not path.is_file():
        raise TaskError(f"no candidate file {path}")
    return KbvEvaluator(options)(problem, path)


def score_tasks(folders: list[str | Path], suite: str | Path, options: Any, out: str | Path | None = None,
                evaluate: Any = None) -> dict[str, Any]:
    """Evaluate each folder's final candidate against the suite's problem (held-out shapes included, full
    protocol); the records, and S_agg where the suite has ``evaluator/weights.json``. ``evaluate(problem,
    path, options) -> record dict`` defaults to kbv's pipeline."""
    from kbv.agent.loop import KbvEvaluator, write_record
    from kbv.problems import discover, resolve_suite

    root = resolve_suite(suite)
    problems = {p.key: p for p in discover(root)}
    evaluate = evaluate or (lambda problem, path, opts: KbvEvaluator(opts)(problem, path))
    records = []
    for folder in folders:
        folder = Path(folder)
        task = read_task(folder)
        problem = problems.get(task["problem"])
        if problem is None:
            raise TaskError(f"{folder}: problem {task['problem']} is not in suite {suite}")
        if problem.source_sha256 != task.get("problem_sha256"):
            raise TaskError(f"{folder}: problem {task['problem']} differs from the suite's copy")
        candidate = folder / CANDIDATE
        if not candidate.is_file():
            raise TaskError(f"{folder}: no {CANDIDATE}")
        opts = options
        if task.get("require_custom_kernels") and not getattr(options, "require_custom_kernels", False):
            from dataclasses import replace

            opts = replace(options, require_custom_kernels=True)
        record = evaluate(problem, candidate, opts)
        record["task"] = str(folder)
        records.append(record)
        if out is not None:
            write_record(Path(out), record)
    result: dict[str, Any] = {"records": records, "s_agg": None}
    if (root / "evaluator" / "weights.json").is_file():
        from kbv.tracesuite.weights import aggregate, load_weights

        result["s_agg"] = aggregate(records, load_weights(root))
    return result
