"""Agent runs in reports: the figures and rows ``kbv report`` shows for ``kbv agent run --out DIR`` folders.

The per-problem summaries come from ``kbv.agent.audit.run_summaries`` (read from the folder's ``audit.jsonl``);
this module only derives what a report shows from them:

- tokens per accepted improvement: the problem's total tokens (prompt + completion) / the number of accepted
  iterations (the first accepted kernel counts), None when none was accepted;
- improvement per iteration: the geometric-mean per-iteration gain of the running best verified speedup, from its
  first value to its last: (last / first) ** (1 / n), n the iterations between the two; None when there is no
  span (fewer than two iterations with a best) or a value is not positive;
- the running best's attainment: the attainment of the last accepted iteration's evaluation, per iteration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kbv.report.metrics import finite_number

AUDIT_FILE = "audit.jsonl"
FINAL_FILE = "final.jsonl"  # the final kernels' kbv.result/1 records: the run's results file
AGENT_HEADER = ["run", "problem", "iterations", "tokens", "accepted", "dropouts", "best verified speedup",
                "best attainment", "final", "stop", "DSL adoption", "tokens / accepted", "improvement / iteration",
                "best speedup series"]


def is_agent_run(path: str | Path) -> bool:
    """A folder written by ``kbv agent run --out``: it holds ``audit.jsonl``."""
    return Path(path).is_dir() and (Path(path) / AUDIT_FILE).is_file()


def load_agent_run(run_dir: str | Path) -> list[dict[str, Any]]:
    """The per-problem summaries of an agent run folder (``kbv.agent.audit.run_summaries``)."""
    from kbv.agent.audit import run_summaries

    return run_summaries(run_dir)


def agent_problems(agent: dict[str, list[dict[str, Any]]]) -> set[str]:
    """Every problem an agent run attempted."""
    return {str(s["problem"]) for summaries in agent.values() for s in summaries if s.get("problem") is not None}


def _series(summary: dict[str, Any]) -> list[dict[str, Any]]:
    series = summary.get("series")
    return [e for e in series if isinstance(e, dict)] if isinstance(series, list) else []


def best_speedups(summary: dict[str, Any]) -> list[tuple[int, float]]:
    """(iteration, running best verified speedup) for every iteration that has a best."""
    return [(int(e["iteration"]), s) for e in _series(summary)
            if isinstance(e.get("iteration"), int) and (s := finite_number(e.get("best_speedup"))) is not None]


def tokens_vs_attainment(summary: dict[str, Any]) -> list[tuple[int, float]]:
    """(cumulative total tokens, attainment of the running best) per iteration, where the best has an attainment
    and some tokens were spent."""
    points, attained = [], None
    for e in _series(summary):
        if e.get("status") == "accepted":
            attained = finite_number(e.get("attainment"))
        tokens = finite_number(e.get("tokens"))
        if attained is not None and tokens is not None and tokens > 0:
            points.append((int(tokens), attained))
    return points


def tokens_per_accepted(summary: dict[str, Any]) -> float | None:
    """Total tokens / accepted iterations; None when no iteration was accepted."""
    accepted = summary.get("accepted_iterations") or []
    total = finite_number((summary.get("tokens") or {}).get("total_tokens"))
    return total / len(accepted) if accepted and total is not None else None


def improvement_per_iteration(summary: dict[str, Any]) -> float | None:
    """(last best / first best) ** (1 / iterations between them); None where that is undefined."""
    bests = best_speedups(summary)
    if len(bests) < 2:
        return None
    (first_it, first), (last_it, last) = bests[0], bests[-1]
    n = last_it - first_it
    return (last / first) ** (1 / n) if n > 0 and first > 0 and last > 0 else None


def series_text(summary: dict[str, Any]) -> str:
    """The running best speedup per iteration, e.g. ``- > 1.00 > 1.42 > 2.10`` ('-': nothing accepted yet)."""
    cells = [f"{s:.2f}" if (s := finite_number(e.get("best_speedup"))) is not None else "-"
             for e in _series(summary)]
    return " > ".join(cells) or "-"


AGENT_FIELDS = ("problem", "iterations", "total_tokens", "accepted_iterations", "dropouts", "best_speedup",
                "best_attainment", "final_verdict", "final_fallback", "dsl_adoption", "tokens_per_accepted",
                "improvement_per_iteration", "best_speedup_series", "stop")


def agent_figures(summary: dict[str, Any]) -> dict[str, Any]:
    """What the "Agent runs" table shows for one problem's summary, as plain values (JSON and CSV), by
    ``AGENT_FIELDS``."""
    best = summary.get("best") if isinstance(summary.get("best"), dict) else {}
    final = summary.get("final") if isinstance(summary.get("final"), dict) else {}
    return {"problem": summary.get("problem"), "iterations": summary.get("iterations"),
            "total_tokens": (summary.get("tokens") or {}).get("total_tokens"),
            "accepted_iterations": list(summary.get("accepted_iterations") or []),
            "dropouts": list(summary.get("dropouts") or []), "best_speedup": finite_number(best.get("speedup")),
            "best_attainment": finite_number(best.get("attainment")), "final_verdict": final.get("verdict"),
            "final_fallback": final.get("fallback"), "dsl_adoption": finite_number(summary.get("dsl_adoption")),
            "tokens_per_accepted": tokens_per_accepted(summary),
            "improvement_per_iteration": improvement_per_iteration(summary),
            "best_speedup_series": [finite_number(e.get("best_speedup")) for e in _series(summary)],
            "stop": summary.get("stop")}


def _fmt(x: Any, spec: str, suffix: str = "") -> str:
    x = finite_number(x)
    return "-" if x is None else f"{x:{spec}}{suffix}"


def agent_rows(agent: dict[str, list[dict[str, Any]]]) -> tuple[list[str], list[list[str]]]:
    """The "Agent runs" table: one row per (run, problem), ``AGENT_HEADER``'s columns as text."""
    rows = []
    for run, summaries in agent.items():
        for s in summaries:
            f = agent_figures(s)
            final = "-" if s.get("final") is None else str(f["final_verdict"]) + (
                " (fallback)" if f["final_fallback"] else "")
            rows.append([
                run, str(f["problem"]), str(f["iterations"]), _fmt(f["total_tokens"], ".0f"),
                ",".join(map(str, f["accepted_iterations"])) or "-", ",".join(map(str, f["dropouts"])) or "-",
                _fmt(f["best_speedup"], ".2f", "x"), _fmt(f["best_attainment"], ".2f"), final,
                str(f["stop"] or "running"),
                _fmt(None if f["dsl_adoption"] is None else 100 * f["dsl_adoption"], ".0f", "%"),
                _fmt(f["tokens_per_accepted"], ".0f"), _fmt(f["improvement_per_iteration"], ".2f", "x"),
                series_text(s),
            ])
    return list(AGENT_HEADER), rows


AGENT_NOTE = ("Agent runs (kbv agent run): one row per problem. best speedup and attainment are the loop's best kernel "
              "on the public shapes; final is its full-protocol score (held-out shapes included), which the tables "
              "above count. tokens / accepted: total tokens over accepted iterations; improvement / iteration: "
              "(last best / first best) ^ (1 / iterations between them); the series is the running best verified "
              "speedup per iteration ('-': none accepted yet).")
