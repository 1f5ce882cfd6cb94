"""Generation figures per model, for reports: pass@k over every generated sample, tokens per problem and per
correct kernel, no-code / truncation / error rates, and the rank correlation between output tokens and speedup or
attainment.

Generations link to evaluation records by (problem, sample, code sha256 = ``candidate_sha256``). Every generated
sample counts: one without code, cut off, failed to arrive or never evaluated is a failed sample. Token figures use
usage as the server reported it; per-sample figures (mean per sample, the correlations) use only samples whose
request returned one sample (``usage.shared_by == 1``), because usage is reported per request.
"""
from __future__ import annotations

import html
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kbv.report.metrics import attainment_of, is_correct, pass_at_k, speedup_of
from kbv.study.generate import GENERATIONS_FILE, latest_generations, read_generations

PROTOCOL_NAMES = ("verified", "standard")
MAX_ALL_K = 10  # pass@k for every k up to this many samples; beyond it 1, 5, 10, ... and the sample count


def generations_beside(results: str | Path) -> Path | None:
    """The ``generations.jsonl`` in the results file's folder, if any."""
    path = Path(results).parent / GENERATIONS_FILE
    return path if path.is_file() else None


def match_generations(results: dict[str, list[dict[str, Any]]],
                      generation_files: Iterable[str | Path]) -> dict[str, list[dict[str, Any]]]:
    """Assign extra generation files (``--generations``) to runs: each goes to the run sharing most code hashes.
    A file that shares none with any run is a ValueError."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in generation_files:
        gens = list(read_generations(path))
        hashes = {g.get("code_sha256") for g in gens if g.get("code_sha256")}
        best = max(results, key=lambda run: sum(r.get("candidate_sha256") in hashes for r in results[run]),
                   default=None)
        if best is None or not hashes & {r.get("candidate_sha256") for r in results[best]}:
            raise ValueError(f"{path}: no generation in it has the code of any evaluated candidate "
                             "(its code_sha256 matches no record's candidate_sha256)")
        out.setdefault(best, []).extend(gens)
    return out


def model_label(generations: list[dict[str, Any]]) -> str | None:
    models = sorted({str(g.get("model")) for g in generations if g.get("model")})
    return " + ".join(models) if models else None


def attach_generations(labelled: dict[str, Path], runs: dict[str, list[dict[str, Any]]],
                       generation_files: Iterable[str | Path] = ()
                       ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """The runs relabelled by model where generation records are found (beside the results file, or given and
    matched by code hash), and each such run's generation records, under the same labels."""
    found: dict[str, list[dict[str, Any]]] = {}
    for label, path in labelled.items():
        beside = generations_beside(path)
        if beside is not None:
            found[label] = list(read_generations(beside))
    for label, gens in match_generations(runs, generation_files).items():
        found.setdefault(label, []).extend(gens)
    new_runs: dict[str, list[dict[str, Any]]] = {}
    generation: dict[str, list[dict[str, Any]]] = {}
    for label, records in runs.items():
        name = (model_label(found[label]) if found.get(label) else None) or label
        while name in new_runs:
            name = f"{name}'"
        new_runs[name] = records
        if found.get(label):
            generation[name] = found[label]
    return new_runs, generation


def study_universe(runs: dict[str, list[dict[str, Any]]],
                   generation: dict[str, list[dict[str, Any]]]) -> list[str] | None:
    """Every problem evaluated or generated (a problem whose samples produced no code is failed, not absent);
    None without generation records (the report's own default)."""
    if not generation:
        return None
    return sorted({str(r["problem"]) for records in runs.values() for r in records}
                  | {str(g["problem"]) for gens in generation.values() for g in gens})


def study_figures(runs: dict[str, list[dict[str, Any]]],
                  generation: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    return {label: generation_figures(gens, runs.get(label, [])) for label, gens in generation.items()}


def sample_outcomes(generations: list[dict[str, Any]], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per generated sample: its evaluation record where there is one, else a stand-in whose verdicts
    are the generation's status (``no_code``, ``truncated``, ``error``, or ``unevaluated``): never correct."""
    by_key = {(r.get("problem"), int(r.get("sample", 0)), r.get("candidate_sha256")): r for r in results}
    out = []
    for g in sorted(latest_generations(generations).values(), key=lambda g: (str(g["problem"]), int(g["sample"]))):
        e = by_key.get((g["problem"], int(g["sample"]), g.get("code_sha256"))) if g.get("code_sha256") else None
        if e is None:
            status = g.get("status") if g.get("status") != "ok" else "unevaluated"
            e = {"problem": g["problem"], "sample": int(g["sample"]), "verdict": status, "standard_verdict": status}
        out.append(e)
    return out


def apply_to_comparison(comparison: Any, runs: dict[str, list[dict[str, Any]]],
                        generation: dict[str, list[dict[str, Any]]]) -> None:
    """Put the generation figures into a RunComparison, and make its per-group pass@k count every generated sample
    (an evaluation-only pass@k would leave out the samples that produced no code)."""
    from kbv.report.metrics import family_of, level_of_key, pass_at_k_figures, roofline_of

    comparison.generation = study_figures(runs, generation)
    for run, gens in generation.items():
        if run not in comparison.levels:
            continue  # a run the comparison split into parts: its evaluation-only figures stay
        outcomes = sample_outcomes(gens, comparison.records.get(run, []))
        regime = {r["problem"]: roofline_of(r).get("regime") for r in comparison.records.get(run, [])}
        member = {
            "levels": lambda g, k: g.name == "overall" or g.name == f"level {level_of_key(k)}",
            "families": lambda g, k: family_of(k) == g.name,
            "regimes": lambda g, k: regime.get(k) == g.name,
        }
        for attr, belongs in member.items():
            for group in getattr(comparison, attr).get(run, []):
                keys = [k for k in (comparison.universe if attr != "regimes" else sorted(regime))
                        if belongs(group, k)]
                group.pass_at_k = pass_at_k_figures([o for o in outcomes if o["problem"] in keys], keys)


def _ks(smallest: int) -> list[int]:
    if smallest <= MAX_ALL_K:
        return list(range(1, smallest + 1))
    return sorted({k for k in (1, 5, 10, 20, 50, 100) if k <= smallest} | {smallest})


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for t in range(i, j + 1):
            ranks[order[t]] = (i + j) / 2 + 1  # ties share their average rank
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation (Pearson's on average ranks); None with fewer than 3 pairs or a constant side."""
    if len(xs) != len(ys) or len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def _tokens(g: dict[str, Any], name: str) -> float | None:
    usage = g.get("usage") or {}
    value = usage.get(name)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    return value / max(int(usage.get("shared_by") or 1), 1)


def _per_sample(g: dict[str, Any], name: str) -> float | None:
    return _tokens(g, name) if int((g.get("usage") or {}).get("shared_by") or 1) == 1 else None


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def generation_figures(generations: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
    """Every generation figure of one run (one model): see the module's docstring for the definitions."""
    latest = latest_generations(generations)
    by_key = {(r.get("problem"), int(r.get("sample", 0)), r.get("candidate_sha256")): r for r in results}
    by_hash = {(r.get("problem"), r.get("candidate_sha256")): r for r in results}

    def evaluation(g: dict[str, Any]) -> dict[str, Any] | None:
        if g.get("status") != "ok" or not g.get("code_sha256"):
            return None
        return (by_key.get((g["problem"], int(g["sample"]), g["code_sha256"]))
                or by_hash.get((g["problem"], g["code_sha256"])))

    gens = sorted(latest.values(), key=lambda g: (str(g["problem"]), int(g["sample"])))
    evals = [evaluation(g) for g in gens]
    problems = sorted({str(g["problem"]) for g in gens})
    n = len(gens)
    statuses: dict[str, int] = {}
    for g in gens:
        statuses[str(g.get("status"))] = statuses.get(str(g.get("status")), 0) + 1

    per_problem: dict[str, list[tuple[dict[str, Any], dict[str, Any] | None]]] = {p: [] for p in problems}
    for g, e in zip(gens, evals):
        per_problem[str(g["problem"])].append((g, e))
    smallest = min((len(v) for v in per_problem.values()), default=0)
    pass_k: dict[str, dict[int, float]] = {proto: {} for proto in PROTOCOL_NAMES}
    for proto in PROTOCOL_NAMES if problems else ():
        pass_k[proto] = {k: sum(pass_at_k(len(v), sum(is_correct(e, proto) for _, e in v), k)
                                for v in per_problem.values()) / len(problems) for k in _ks(smallest)}

    output = [t for g in gens if (t := _tokens(g, "completion_tokens")) is not None]
    prompt = [t for g in gens if (t := _tokens(g, "prompt_tokens")) is not None]
    reasoning = [t for g in gens if (t := _tokens(g, "reasoning_tokens")) is not None]
    sample_output = [t for g in gens if (t := _per_sample(g, "completion_tokens")) is not None]
    total_output = sum(output) if output else None
    correct = {proto: sum(is_correct(e, proto) for e in evals) for proto in PROTOCOL_NAMES}

    def per_correct(proto: str) -> float | None:
        return total_output / correct[proto] if total_output is not None and correct[proto] else None

    points = [{"problem": g["problem"], "sample": int(g["sample"]), "output_tokens": t,
               "speedup": speedup_of(e, "verified"), "attainment": attainment_of(e)}
              for g, e in zip(gens, evals)
              if is_correct(e, "verified") and (t := _per_sample(g, "completion_tokens")) is not None]
    correlations: dict[str, dict[str, Any]] = {}
    for what in ("speedup", "attainment"):
        pairs = [(p["output_tokens"], p[what]) for p in points if p[what] is not None]
        correlations[what] = {"rho": spearman([p[0] for p in pairs], [p[1] for p in pairs]), "n": len(pairs)}

    models = sorted({str(g.get("model")) for g in gens if g.get("model")})
    return {
        "model": " + ".join(models) or None,
        "problems": len(problems),
        "samples": n,
        "samples_per_problem": smallest,
        "status": dict(sorted(statuses.items())),
        "no_code_rate": statuses.get("no_code", 0) / n if n else None,
        "truncated_rate": statuses.get("truncated", 0) / n if n else None,
        "error_rate": statuses.get("error", 0) / n if n else None,
        "evaluated": sum(e is not None for e in evals),
        "unevaluated": sum(1 for g, e in zip(gens, evals) if g.get("status") == "ok" and e is None),
        "correct": correct,
        "pass_at_k": pass_k,
        "tokens": {
            "output_total": total_output,
            "output_per_problem": total_output / len(problems) if total_output is not None and problems else None,
            "output_per_sample": _mean(sample_output),
            "output_per_correct_kernel": {proto: per_correct(proto) for proto in PROTOCOL_NAMES},
            "prompt_per_problem": sum(prompt) / len(problems) if prompt and problems else None,
            "reasoning_total": sum(reasoning) if reasoning else None,
            "samples_with_usage": len(output),
            "samples_with_own_usage": len(sample_output),
        },
        "rank_correlation": correlations,
        "correct_points": points,  # verified-correct samples with their own usage: tokens, speedup, attainment
    }


# ---------------------------------------------------------------------------------------------------------------
# Rendering (the report modules call these when generation figures are present)


def _num(x: Any, digits: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _rho(c: dict[str, Any]) -> str:
    return "-" if c.get("rho") is None else f"{c['rho']:+.2f} (n={c['n']})"


def generation_rows(figures: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """One row per run: the table the text, Markdown and HTML reports show."""
    ks = sorted({k for f in figures.values() for k in f["pass_at_k"]["verified"]})
    header = ["run", "samples", *[f"pass@{k} ver|std" for k in ks], "no code", "truncated", "errors",
              "tokens/problem", "tokens/correct ver|std", "tokens/sample", "rho tokens~speedup",
              "rho tokens~attainment"]
    rows = []
    for run, f in figures.items():
        pk = f["pass_at_k"]
        per_correct = f["tokens"]["output_per_correct_kernel"]
        rows.append([
            run, f"{f['samples']} ({f['samples_per_problem']}/problem)",
            *[f"{_pct(pk['verified'].get(k))} | {_pct(pk['standard'].get(k))}" for k in ks],
            _pct(f["no_code_rate"]), _pct(f["truncated_rate"]), _pct(f["error_rate"]),
            _num(f["tokens"]["output_per_problem"]),
            f"{_num(per_correct['verified'])} | {_num(per_correct['standard'])}",
            _num(f["tokens"]["output_per_sample"]),
            _rho(f["rank_correlation"]["speedup"]), _rho(f["rank_correlation"]["attainment"]),
        ])
    return header, rows


GENERATION_NOTE = (
    "Generation figures count every generated sample: no code, cut off by the token limit, failed requests and "
    "samples never evaluated count as failed. pass@k is the unbiased estimator over the samples of each problem, "
    "averaged over the problems generated. Tokens are output (completion) tokens as the server reported them; "
    "per-sample figures and the rank correlations (Spearman, over verified-correct samples: rho and the number of "
    "samples) use requests of one sample only."
)


def generation_html(figures: dict[str, dict[str, Any]]) -> str:
    header, rows = generation_rows(figures)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    num = ' class="num"'
    body = "".join("<tr>" + "".join(f"<td{'' if i == 0 else num}>{html.escape(c)}</td>" for i, c in enumerate(row))
                   + "</tr>" for row in rows)
    return (f'<h2 id="generation">Generation</h2><p class="note">{html.escape(GENERATION_NOTE)}</p>'
            f'<table class="groups generation"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')
