"""KernelBench-compatible export and import of results.

KernelBench (``scripts/eval_from_generations.py``) keeps one ``runs/<run>/eval_results.json`` per run and level::

    {"<problem_id>": [{"sample_id": int, "compiled": bool, "correctness": bool, "metadata": {...},
                       "runtime": float (ms, -1 if not timed), "runtime_stats": {"mean", "std", "min", "max",
                       "num_trials", "hardware", "device"}, "ref_runtime": float, "ref_runtime_stats": {...}}]}

and, with several samples per problem, ``pass_at_k_results.json``::

    {"averages": {"avg_pass@k": ...}, "metadata": {...},
     "problems": {"<problem_id>": {"total_samples", "correct_samples", "pass@k"}}}

Export (kbv records -> KernelBench):

- ``compiled`` is ``verdict != "compile_error"`` (kbv.report.metrics' definition); ``correctness`` is the verdict of the
  chosen protocol: ``verdict == "correct"`` for ``verified``, ``standard_verdict == "correct"`` for ``standard``.
- ``runtime`` is the candidate's **median** under that protocol's baseline (``timing_ms.candidate_<protocol>``;
  KernelBench reports the mean, which ``runtime_stats`` also carries), ``ref_runtime`` the reference's; -1 and
  ``{}`` where not timed. ``runtime_stats["statistic"]`` names the statistic ``runtime`` is.
- ``metadata`` carries the failure under KernelBench's key names (``compilation_error``, ``runtime_error``,
  ``correctness_issue`` with ``max_difference``, ``error_during_performance``), ``hardware`` and ``device``, and
  kbv's own judgement under ``kbv_*`` keys (verdicts, flags, problem key, the protocol's speedup with its interval).

Import (KernelBench -> kbv records, schema ``kbv.result/1``): KernelBench's check is the standard protocol (D1 inputs,
``torch.allclose``), so ``verdict`` and ``standard_verdict`` are the same; speedups are ``ref_runtime / runtime``
under the standard baseline with no interval, nothing under the verified one; records carry the flag
``imported_kernelbench``.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Iterable

from kbv.files import write_atomic
from kbv.problems import Problem
from kbv.records import Record

PROTOCOLS = ("verified", "standard")
VERDICT_KEY = {"verified": "verdict", "standard": "standard_verdict"}
PASS_AT_K = (1, 5, 10)
IMPORTED_FLAG = "imported_kernelbench"


# ---------------------------------------------------------------------------------------------------------------
# pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), for n samples of which c pass."""
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0  # every draw of k samples contains a passing one
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_k_results(eval_results: dict[str, Any], ks: Iterable[int] = PASS_AT_K) -> dict[str, Any]:
    """KernelBench's ``pass_at_k_results.json`` from an eval_results object (a sample passes when compiled and
    correct, as KernelBench counts). pass@k is given for a problem only where k <= its number of samples; each
    average is over the problems that have it (``metadata["pass@k_count"]`` says how many)."""
    ks = tuple(ks)
    problems: dict[str, dict[str, Any]] = {}
    for pid, entries in _entries_by_problem(eval_results):
        n = len(entries)
        c = sum(1 for e in entries if e.get("compiled") and e.get("correctness"))
        problems[pid] = {"total_samples": n, "correct_samples": c,
                         **{f"pass@{k}": pass_at_k(n, c, k) for k in ks if k <= n}}
    averages = {}
    metadata: dict[str, Any] = {
        "total_problems": len(problems),
        "problems_with_samples": sum(1 for p in problems.values() if p["total_samples"] > 0),
        "total_evaluated_samples": sum(p["total_samples"] for p in problems.values()),
        "total_correct_samples": sum(p["correct_samples"] for p in problems.values()),
    }
    for k in ks:
        values = [p[f"pass@{k}"] for p in problems.values() if f"pass@{k}" in p]
        if values:
            averages[f"avg_pass@{k}"] = sum(values) / len(values)
        metadata[f"pass@{k}_count"] = len(values)
    return {"averages": averages, "metadata": metadata, "problems": problems}


def export_pass_at_k(records: list[dict[str, Any]], level: int, protocol: str = "verified",
                     ks: Iterable[int] = PASS_AT_K) -> dict[str, Any]:
    """KernelBench's pass_at_k layout for one level of kbv records, correct under ``protocol``'s verdict."""
    result = pass_at_k_results(export_eval_results(records, level, protocol), ks)
    result["metadata"].update({"level": level, "protocol": protocol, "source": "kbv",
                               "estimator": "1 - C(n-c, k) / C(n, k)"})
    return result


# ---------------------------------------------------------------------------------------------------------------
# Export


def export_eval_results(records: list[dict[str, Any]], level: int, protocol: str = "verified",
                        on_duplicate: str = "error") -> dict[str, list[dict[str, Any]]]:
    """KernelBench's eval_results layout for the records of one level: ``{str(problem_id): [entry, ...]}``, ids in
    numeric order, entries by sample. KernelBench holds one entry per (problem id, sample); records that repeat one
    raise ``ValueError`` (``on_duplicate="error"``) or the later one wins (``"last"``)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if on_duplicate not in ("error", "last"):
        raise ValueError(f"on_duplicate must be 'error' or 'last', got {on_duplicate!r}")
    chosen: dict[tuple[int, int], dict[str, Any]] = {}
    for r in records:
        if r.get("level") != level:
            continue
        key = (int(r["problem_id"]), int(r["sample"]))
        if key in chosen and on_duplicate == "error":
            raise ValueError(f"level {level}: problem {key[0]} sample {key[1]} appears more than once "
                             f"({chosen[key].get('problem')} {chosen[key].get('candidate')} and "
                             f"{r.get('problem')} {r.get('candidate')}); KernelBench's layout holds one entry each")
        chosen[key] = r
    out: dict[str, list[dict[str, Any]]] = {}
    for (pid, _sample), r in sorted(chosen.items()):
        out.setdefault(str(pid), []).append(_export_entry(r, protocol))
    return out


def _export_entry(r: dict[str, Any], protocol: str) -> dict[str, Any]:
    timing = r.get("timing_ms") or {}
    hardware = _hardware(r)
    runtime, runtime_stats = _export_timing(timing.get(f"candidate_{protocol}"), hardware)
    ref_runtime, ref_runtime_stats = _export_timing(timing.get(f"reference_{protocol}"), hardware)
    return {
        "sample_id": int(r["sample"]),
        "compiled": r.get("verdict") != "compile_error",
        "correctness": r.get(VERDICT_KEY[protocol]) == "correct",
        "metadata": _export_metadata(r, protocol, hardware),
        "runtime": runtime,
        "runtime_stats": runtime_stats,
        "ref_runtime": ref_runtime,
        "ref_runtime_stats": ref_runtime_stats,
    }


def _hardware(r: dict[str, Any]) -> str | None:
    env = r.get("env") or {}
    device = env.get("device")
    if isinstance(device, dict) and device.get("name"):
        return str(device["name"])
    return env.get("hardware")


def _device_string(r: dict[str, Any]) -> str | None:
    env = r.get("env") or {}
    device = env.get("device") if isinstance(env.get("device"), dict) else {}
    if device.get("id"):
        return str(device["id"])
    kind = env.get("device_kind")
    if kind and isinstance(device.get("index"), int):
        return f"{kind}:{device['index']}"
    return kind


def _number(x: Any) -> float | None:
    """A float from a record value (records write non-finite floats as "inf", "-inf", "nan")."""
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str) and x in ("inf", "-inf", "nan"):
        return float(x)
    return None


def _export_timing(summary: Any, hardware: str | None) -> tuple[float, dict[str, Any]]:
    """(runtime, runtime_stats) from a kbv timing summary: the median where kbv measured it, else the mean (records
    imported from KernelBench only have a mean); -1.0 and {} where there is no positive time."""
    if not isinstance(summary, dict):
        return -1.0, {}
    median, mean = _number(summary.get("median")), _number(summary.get("mean"))
    if median is not None and median > 0:
        runtime, statistic = median, "median"
    elif mean is not None and mean > 0:
        runtime, statistic = mean, "mean"
    else:
        return -1.0, {}
    stats: dict[str, Any] = {"mean": mean, "std": _number(summary.get("std")), "min": _number(summary.get("min")),
                             "max": _number(summary.get("max")), "num_trials": summary.get("n")}
    if median is not None:
        stats["median"] = median
    stats["statistic"] = statistic
    if hardware:
        stats["hardware"] = hardware
    return runtime, stats


def _fmt_difference(x: Any) -> str:
    value = _number(x)
    return f"{value:.6f}" if value is not None else str(x)


def _export_metadata(r: dict[str, Any], protocol: str, hardware: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if hardware:
        meta["hardware"] = hardware
    device = _device_string(r)
    if device:
        meta["device"] = device
    verdict = r.get(VERDICT_KEY[protocol])
    error = r.get("error") or {}
    message = str(error.get("message", "")) if error else ""
    kind = str(error.get("kind", "")) if error else ""
    corr = r.get("correctness") or {}
    dists = corr.get("distributions") or {}
    if verdict == "compile_error":
        meta["compilation_error"] = message
        meta["compilation_error_name"] = kind or "compile_error"
    elif verdict in ("runtime_error", "timeout"):
        meta["runtime_error"] = message
        meta["runtime_error_name"] = kind or verdict
        if error.get("traceback"):
            meta["runtime_error_traceback"] = error["traceback"]
    elif verdict == "incorrect":
        # the distributions the protocol's verdict rests on: all failed ones (verified), D1 (standard)
        failed = list(corr.get("failed_distributions") or []) if protocol == "verified" else ["D1"]
        reasons = [f"{d}: {dists[d]['reason']}" if (dists.get(d) or {}).get("reason") else d for d in failed]
        meta["correctness_issue"] = "Output mismatch" + (f" ({'; '.join(reasons)})" if reasons else "")
        meta["correctness_issue_name"] = "correctness_issue"
        meta["max_difference"] = [_fmt_difference(dists[d]["max_abs_error"]) for d in failed
                                  if "max_abs_error" in (dists.get(d) or {})]
        meta["failed_distributions"] = failed
    elif verdict == "rejected":
        broken = [f for f in (r.get("flags") or []) if f in ("input_mutated", "output_aliases_input")]
        meta["correctness_issue"] = "Rejected: " + (", ".join(broken) or "rule broken")
        meta["correctness_issue_name"] = "rejected"
    elif error:
        # correct under this protocol, but a later stage (or the other protocol's) failed
        meta["error_during_performance"] = message
    if protocol == "verified" and dists and verdict in ("correct", "incorrect", "rejected"):
        judged = [d for d in dists.values() if d.get("status") != "skipped"]
        planned = int(corr.get("trials_per_distribution") or 0) * len(judged)
        passed = sum(int(d.get("trials", 0)) - (1 if d.get("status") == "failed" else 0) for d in judged)
        if planned:
            meta["correctness_trials"] = f"({passed} / {planned})"
    speedup = (r.get("speedup") or {}).get(protocol)
    meta.update({
        "kbv_problem": r.get("problem"),
        "kbv_candidate": r.get("candidate"),
        "kbv_verdict": r.get("verdict"),
        "kbv_standard_verdict": r.get("standard_verdict"),
        "kbv_flags": list(r.get("flags") or []),
        "kbv_protocol": protocol,
        "kbv_speedup": speedup if isinstance(speedup, dict) else None,
    })
    return meta


# ---------------------------------------------------------------------------------------------------------------
# Import

_COMPILE_ERROR_KEYS = ("compilation_error", "cuda_error", "other_error", "gpu_error", "error_message", "error")


def _entries_by_problem(data: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(problem id, entries) in numeric order; an older layout's single entry per problem becomes a list of one."""
    if not isinstance(data, dict):
        raise ValueError("a KernelBench eval_results object is a JSON object keyed by problem id")
    if "averages" in data and "problems" in data:
        raise ValueError("this is a pass_at_k_results object, not eval_results")
    out = []
    for key, entries in data.items():
        try:
            int(key)
        except (TypeError, ValueError):
            raise ValueError(f"eval_results keys are problem ids, got {key!r}") from None
        if isinstance(entries, dict):
            entries = [entries]
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ValueError(f"problem {key}: expected a list of sample entries")
        out.append((str(key), entries))
    return sorted(out, key=lambda item: int(item[0]))


def _import_error(meta: dict[str, Any], compiled: bool) -> dict[str, Any] | None:
    def err(stage: str, key: str, kind_key: str | None = None, tb_key: str | None = None) -> dict[str, Any]:
        return {"stage": stage, "kind": str(meta.get(kind_key or f"{key}_name") or key),
                "message": str(meta[key]), "log_tail": "", "traceback": str(meta.get(tb_key, "") if tb_key else "")}

    if not compiled:
        for key in _COMPILE_ERROR_KEYS:
            if meta.get(key) not in (None, ""):
                return err("compile", key, "gpu_error" if key == "error_message" else None)
        return None
    if meta.get("runtime_error") not in (None, ""):
        return err("correctness", "runtime_error", tb_key="runtime_error_traceback")
    if meta.get("error_during_performance") not in (None, ""):
        return err("performance", "error_during_performance")
    for key in ("cuda_error", "other_error", "error"):
        if meta.get(key) not in (None, ""):
            return err("correctness", key)
    return None


def _import_timing(runtime: Any, stats: Any) -> dict[str, Any] | None:
    """A kbv timing summary from KernelBench's runtime (the mean, in ms) and runtime_stats."""
    value = _number(runtime)
    if value is None or not value > 0:
        return None
    stats = stats if isinstance(stats, dict) else {}
    return {"median": None, "mean": value, "std": _number(stats.get("std")), "min": _number(stats.get("min")),
            "max": _number(stats.get("max")), "n": stats.get("num_trials"), "statistic": "mean"}


def _parse_float(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _trials_of(text: Any) -> tuple[int, int] | None:
    """(passed, total) from KernelBench's "(5 / 5)"."""
    try:
        passed, total = str(text).strip().strip("()").split("/")
        return int(passed), int(total)
    except (ValueError, AttributeError):
        return None


def import_eval_results(data: dict[str, Any], level: int, problems: list[Problem] | None = None,
                        source: str = "") -> list[dict[str, Any]]:
    """kbv.result/1 records from a KernelBench eval_results object of one level.

    The problem key is ``level<L>/<file stem>`` where ``problems`` has that level and id (point it at the folder
    the run was evaluated on, e.g. KernelBench's ``KernelBench/``), else ``level<L>/<id>``."""
    by_id: dict[int, Problem] = {}
    for p in problems or []:
        if p.level == level or (p.level is None and p.problem_id not in by_id):
            by_id[p.problem_id] = p
    out = []
    for pid_text, entries in _entries_by_problem(data):
        pid = int(pid_text)
        problem = by_id.get(pid)
        key = f"level{level}/{problem.path.stem}" if problem else f"level{level}/{pid}"
        for index, entry in sorted(enumerate(entries), key=lambda ie: (_sample_of(ie[1], ie[0]), ie[0])):
            out.append(_import_entry(entry, _sample_of(entry, index), pid, level, key, problem, source))
    return out


def _sample_of(entry: dict[str, Any], index: int) -> int:
    sample = entry.get("sample_id")
    return int(sample) if isinstance(sample, (int, str)) and str(sample).lstrip("-").isdigit() else index


def _import_entry(entry: dict[str, Any], sample: int, pid: int, level: int, key: str, problem: Problem | None,
                  source: str) -> dict[str, Any]:
    meta = entry.get("metadata") if isinstance(entry.get("metadata"), dict) else {}
    compiled, correct = bool(entry.get("compiled")), bool(entry.get("correctness"))
    error = _import_error(meta, compiled)
    if not compiled:
        verdict, stage = "compile_error", "compile"
    elif not correct:
        # KernelBench marks a kernel that raised as compiled and not correct, with runtime_error in its metadata
        verdict = "runtime_error" if error is not None and error["stage"] == "correctness" else "incorrect"
        stage = "correctness"
    else:
        verdict, stage = "correct", "done"
    timing: dict[str, Any] = {}
    cand = _import_timing(entry.get("runtime"), entry.get("runtime_stats"))
    ref = _import_timing(entry.get("ref_runtime"), entry.get("ref_runtime_stats"))
    if cand:
        timing["candidate_standard"] = cand
    if ref:
        timing["reference_standard"] = ref
    standard = None
    if cand and ref:
        standard = {"value": ref["mean"] / cand["mean"], "ci_low": None, "ci_high": None, "confidence": None}
    correctness: dict[str, Any] = {}
    if compiled and verdict != "runtime_error":
        trials = _trials_of(meta.get("correctness_trials"))
        d1: dict[str, Any] = {"status": "passed" if correct else "failed"}
        if trials:
            d1["trials"] = trials[1]
        diffs = [v for v in map(_parse_float, meta.get("max_difference") or []) if v is not None] \
            if isinstance(meta.get("max_difference"), list) else []  # KernelBench writes them as "%.6f" strings
        if diffs:
            d1["max_abs_error"] = max(diffs)
        if not correct:
            d1["reason"] = str(meta.get("correctness_issue") or "output mismatch (KernelBench)")
        correctness = {"distributions": {"D1": d1}, "failed_distributions": [] if correct else ["D1"],
                       "checked_by": "kernelbench"}
    record = Record(
        problem=key, level=level, problem_id=pid, problem_sha256=problem.source_sha256 if problem else "",
        candidate=f"{source}#{pid}/{sample}",
        candidate_sha256=hashlib.sha256(json.dumps(entry, sort_keys=True, default=str).encode()).hexdigest(),
        sample=sample, verdict=verdict, standard_verdict=verdict, flags=[IMPORTED_FLAG], error=error, stage=stage,
        correctness=correctness, timing_ms=timing, speedup={"standard": standard, "verified": None},
        env={"source": "kernelbench", "source_file": source, "hardware": meta.get("hardware"),
             "device": {"name": meta.get("hardware"), "id": meta.get("device")}, "protocol": "standard",
             "kernelbench_metadata": meta},
    )
    return json.loads(record.to_json())


# ---------------------------------------------------------------------------------------------------------------
# Files


def write_json(obj: Any, path: str | Path, indent: int = 4) -> None:
    """Write JSON (KernelBench's files are indented) whole or not at all."""
    write_atomic(path, json.dumps(obj, indent=indent) + "\n")


def load_eval_results(path: str | Path) -> dict[str, Any]:
    """A KernelBench eval_results.json, checked to have that layout (problem ids to lists of entries)."""
    with Path(path).open() as f:
        data = json.load(f)
    _entries_by_problem(data)
    return data
