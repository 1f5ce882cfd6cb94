"""The agent's audit trail (``audit.jsonl``, schema ``kbv.agent/1``) and its per-problem summary.

One JSON line per event, appended with one ``write`` and an ``fsync``, so a killed run keeps every line already
written and ``--resume`` rebuilds the loop's state from them (a truncated last line is skipped). Line kinds:
``start`` (a problem's loop began: configuration, endpoint), ``iteration`` (one per iteration: prompt hash, retrieved
ids, usage, latency, kernel hash, the evaluation record, the public feedback, the decision, a dropout if one fired
after it, the running best and token totals), ``final`` (the best kernel scored with the full protocol) and
``summary`` (the problem is done). docs/formats.md describes every field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

AGENT_SCHEMA = "kbv.agent/1"
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_tokens")


class AuditLog:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, entry: dict[str, Any]) -> None:
        line = (json.dumps({"schema": AGENT_SCHEMA, **entry}, default=str) + "\n").encode()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # a killed writer left a partial line
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def entries(self, problem: str | None = None) -> Iterator[dict[str, Any]]:
        """Every complete ``kbv.agent/1`` line (of one problem, or all)."""
        yield from read_audit(self.path, problem)


def read_audit(path: str | Path, problem: str | None = None) -> Iterator[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return
    with path.open() as f:
        for line in f:
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict) and data.get("schema") == AGENT_SCHEMA and (
                    problem is None or data.get("problem") == problem):
                yield data


def add_usage(total: dict[str, int], usage: dict[str, Any] | None) -> dict[str, int]:
    """The token ledger: sums of the usage the endpoint reported (missing figures count 0); ``total`` is prompt +
    completion tokens (reasoning tokens are part of completion tokens and cached ones of prompt tokens, as the
    OpenAI API reports them)."""
    out = {k: int(total.get(k, 0)) for k in USAGE_KEYS}
    for k in USAGE_KEYS:
        v = (usage or {}).get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] += int(v)
    out["total_tokens"] = out["prompt_tokens"] + out["completion_tokens"]
    return out


def summarize(entries: list[dict[str, Any]], stop: str | None = None) -> dict[str, Any]:
    """A problem's summary from its audit lines: iterations, tokens, decisions, dropouts, best speedup and
    attainment, DSL adoption (the share of correct kernels with no library fallback), per-iteration series."""
    its = [e for e in entries if e.get("kind") == "iteration"]
    final = next((e for e in reversed(entries) if e.get("kind") == "final"), None)
    evaluated = [e for e in its if isinstance(e.get("record"), dict)]
    correct = [e for e in evaluated if e["record"].get("verdict") == "correct"]
    custom = [e for e in correct if not set(e["record"].get("flags") or []) & {"fallback", "partial_fallback"}]
    last = its[-1] if its else {}
    best = last.get("best")
    statuses: dict[str, int] = {}
    for e in its:
        status = (e.get("decision") or {}).get("status", "?")
        statuses[status] = statuses.get(status, 0) + 1
    final_record = (final or {}).get("record") or {}
    return {
        "problem": (entries[0] if entries else {}).get("problem"),
        "iterations": len([e for e in its if e.get("iteration", 0) > 0]),
        "evaluated": len(evaluated),
        "decisions": statuses,
        "accepted_iterations": [e["iteration"] for e in its if (e.get("decision") or {}).get("status") == "accepted"],
        "dropouts": [e["iteration"] for e in its if e.get("dropout")],
        "tokens": last.get("tokens") or add_usage({}, None),
        "best": best,
        "dsl_adoption": len(custom) / len(correct) if correct else None,
        "final": None if final is None else {
            "kernel_sha256": final.get("kernel_sha256"), "verdict": final_record.get("verdict"),
            "flags": final_record.get("flags"),
            "speedup_verified": ((final_record.get("speedup") or {}).get("verified") or {}).get("value"),
            "attainment": (((final_record.get("roofline") or {}).get("attainment")) or {}).get("candidate")
            if isinstance((final_record.get("roofline") or {}).get("attainment"), dict) else None,
            "fallback": bool(set(final_record.get("flags") or []) & {"fallback", "partial_fallback"})},
        "series": [{"iteration": e.get("iteration"), "status": (e.get("decision") or {}).get("status"),
                    "speedup": ((e.get("evaluation") or {}).get("speedup")),
                    "attainment": (e.get("evaluation") or {}).get("attainment"),
                    "fallback": (e.get("evaluation") or {}).get("fallback"),
                    "tokens": (e.get("tokens") or {}).get("total_tokens"),
                    "best_speedup": (e.get("best") or {}).get("speedup")} for e in its],
        "stop": stop,
    }


def run_summaries(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every problem's summary in an agent run folder, from its audit lines (an unfinished problem's summary is
    computed from the lines so far, with ``stop`` null)."""
    by_problem: dict[str, list[dict[str, Any]]] = {}
    for e in read_audit(Path(run_dir) / "audit.jsonl"):
        by_problem.setdefault(str(e.get("problem")), []).append(e)
    out = []
    for entries in by_problem.values():
        done = next((e for e in reversed(entries) if e.get("kind") == "summary"), None)
        out.append(done["summary"] if done else summarize(entries))
    return out
