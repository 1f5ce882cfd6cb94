"""A built suite's evaluator-side files (``evaluator/weights.json``, ``heldout.json``, ``provenance.json``) and the
importance-weighted aggregate over result records.

``aggregate(records, weights)`` (a pure function) gives, per phase of ``weights``:

- ``s_agg``: ``sum_i w_i S_i / sum_i w_i`` over the phase's weighted problems, where ``S_i`` is the record's
  roofline attainment (``metrics.attainment_of``: candidate t_roofline / t_measured; for a multi-shape problem the
  median over shapes, as the record carries it) when the record is correct under ``baseline``'s protocol, and 0
  for a failed, missing or unmeasured kernel. Levels (operators, modules) each carry weights summing to 1, so the
  phase figure is the mean of the level figures; ``levels`` has each one (``s_agg = sum_i w_i S_i`` there).
- ``covered_weight`` (share of the weight with a record), ``correct_weight`` (share with a correct record);
- ``regimes``: the memory- vs compute-bound split by the records' ``roofline.regime`` (``unknown`` where no
  record of the problem carries one): each regime's share of the weight, its own weighted attainment and its
  contribution to ``s_agg`` (contributions add up to ``s_agg``).

``overall`` combines the phases by their share of the traced time (``weights["phase_time_us"]``) where known,
else equally. ``operators`` has per problem: pass rate over all samples, the sample-0 verdict, S_i, regime and
weight per phase. One record per problem is scored (sample 0, ``metrics.one_per_problem``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from kbv.report.metrics import attainment_of, is_correct, level_of_key, one_per_problem, roofline_of

WEIGHTS_SCHEMA = "kbv.weights/1"
HELDOUT_SCHEMA = "kbv.heldout/1"
PROVENANCE_SCHEMA = "kbv.provenance/1"
RESERVED = ("overall", "operators", "flags")


class WeightsError(ValueError):
    """An evaluator file that does not follow its schema."""


def _evaluator_file(suite_or_file: str | Path, name: str, schema: str) -> dict[str, Any]:
    path = Path(suite_or_file)
    if path.is_dir():
        path = path / "evaluator" / name
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise WeightsError(f"{path}: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != schema:
        raise WeightsError(f"{path}: schema is not {schema}")
    return data


def load_weights(suite_or_file: str | Path) -> dict[str, Any]:
    """``weights.json`` of a suite folder (or the file itself), checked."""
    data = _evaluator_file(suite_or_file, "weights.json", WEIGHTS_SCHEMA)
    phases = data.get("phases")
    if not isinstance(phases, dict):
        raise WeightsError("weights.json: phases must map phase names to problems")
    for phase, problems in phases.items():
        if phase in RESERVED:
            raise WeightsError(f"weights.json: {phase!r} cannot be a phase name")
        for key, entry in problems.items():
            w = entry.get("weight") if isinstance(entry, dict) else None
            if not isinstance(w, (int, float)) or isinstance(w, bool) or w < 0:
                raise WeightsError(f"weights.json: {phase}/{key} has no non-negative weight")
    return data


def load_heldout(suite_or_file: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Held-out shapes per problem key: lists of module-constant override dicts (as ``KBV_SHAPES`` entries)."""
    data = _evaluator_file(suite_or_file, "heldout.json", HELDOUT_SCHEMA)
    problems = data.get("problems") or {}
    if not all(isinstance(v, list) and all(isinstance(s, dict) for s in v) for v in problems.values()):
        raise WeightsError("heldout.json: problems must map keys to lists of override dicts")
    return problems


def load_provenance(suite_or_file: str | Path) -> dict[str, Any]:
    return _evaluator_file(suite_or_file, "provenance.json", PROVENANCE_SCHEMA)


def level_sums(weights: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Sum of weights per phase and level (``level1``, ``level2``, ...): 1 each in a built suite."""
    out: dict[str, dict[str, float]] = {}
    for phase, problems in weights["phases"].items():
        sums: dict[str, float] = defaultdict(float)
        for key, entry in problems.items():
            sums[f"level{level_of_key(key)}"] += float(entry["weight"])
        out[phase] = dict(sums)
    return out


# ---------------------------------------------------------------------------------------------------------------
# The aggregate


def _score(record: dict[str, Any] | None, baseline: str) -> tuple[float, str]:
    """(S_i, status): status is correct, failed, missing or unmeasured (correct without an attainment)."""
    if record is None:
        return 0.0, "missing"
    if not is_correct(record, baseline):
        return 0.0, "failed"
    s = attainment_of(record)
    return (s, "correct") if s is not None else (0.0, "unmeasured")


def _figures(items: list[tuple[float, float, str]]) -> dict[str, Any]:
    """items: (weight, S, status) -> weighted figures."""
    total = sum(w for w, _, _ in items)
    ws = sum(w * s for w, s, _ in items)

    def share(pred: Any) -> float | None:
        return sum(w for w, _, st in items if pred(st)) / total if total else None

    return {"s_agg": ws / total if total else None, "weighted_sum": ws, "weight": total, "problems": len(items),
            "covered_weight": share(lambda st: st != "missing"), "correct_weight": share(lambda st: st == "correct")}


def aggregate(records: Iterable[dict[str, Any]], weights: dict[str, Any], baseline: str = "verified"
              ) -> dict[str, Any]:
    """The weighted figures described in the module docstring (records of one run; all samples may be given)."""
    records = list(records)
    chosen = one_per_problem(records)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    regimes: dict[str, str] = {}
    for r in records:
        counts[r["problem"]][0] += 1
        counts[r["problem"]][1] += is_correct(r, baseline)
        regime = roofline_of(r).get("regime")
        if isinstance(regime, str):
            regimes.setdefault(r["problem"], regime)

    out: dict[str, Any] = {}
    operators: dict[str, dict[str, Any]] = {}
    above: set[str] = set()
    for phase, problems in weights["phases"].items():
        if phase in RESERVED:
            raise WeightsError(f"{phase!r} cannot be a phase name")
        items: list[tuple[str, float, float, str]] = []
        for key, entry in problems.items():
            s, status = _score(chosen.get(key), baseline)
            if roofline_of(chosen.get(key)).get("above_roofline"):
                above.add(key)
            items.append((key, float(entry["weight"]), s, status))
            op = operators.setdefault(key, {
                "samples": counts[key][0], "correct": counts[key][1],
                "pass_rate": counts[key][1] / counts[key][0] if counts[key][0] else 0.0,
                "verdict": (chosen.get(key) or {}).get("verdict", "missing"), "status": status,
                "attainment": attainment_of(chosen.get(key)), "score": s,
                "regime": regimes.get(key, "unknown"), "weights": {}})
            op["weights"][phase] = float(entry["weight"])
        figures = _figures([(w, s, st) for _, w, s, st in items])
        by_level: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
        by_regime: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
        for key, w, s, st in items:
            by_level[f"level{level_of_key(key)}"].append((w, s, st))
            by_regime[regimes.get(key, "unknown")].append((w, s, st))
        levels = {}
        for level, level_items in sorted(by_level.items()):
            f = _figures(level_items)
            f["s_agg"] = f.pop("weighted_sum")  # sum_i w_i S_i: the level's weights sum to 1
            levels[level] = f
        regime_figures = {}
        for regime, reg_items in sorted(by_regime.items()):
            f = _figures(reg_items)
            regime_figures[regime] = {
                "weight_share": f["weight"] / figures["weight"] if figures["weight"] else None,
                "s_agg": f["s_agg"], "problems": f["problems"],
                "contribution": f["weighted_sum"] / figures["weight"] if figures["weight"] else None}
        out[phase] = {"s_agg": figures["s_agg"], "weight_total": figures["weight"],
                      "covered_weight": figures["covered_weight"], "correct_weight": figures["correct_weight"],
                      "problems": figures["problems"], "levels": levels, "regimes": regime_figures,
                      "missing": sorted(k for k, _, _, st in items if st == "missing")}

    phase_names = list(weights["phases"])
    times = weights.get("phase_time_us") or {}
    known = all(isinstance(times.get(p), (int, float)) and times[p] > 0 for p in phase_names)
    total_time = sum(times[p] for p in phase_names) if known else 0.0
    shares = {p: (times[p] / total_time if known and total_time else 1 / len(phase_names)) for p in phase_names}
    scored = [p for p in phase_names if out[p]["s_agg"] is not None]
    out["overall"] = {
        "s_agg": sum(shares[p] * out[p]["s_agg"] for p in scored) if scored else None,
        "phase_shares": shares, "basis": "phase time" if known else "equal"}
    out["operators"] = operators
    weighted = set(operators)
    out["flags"] = {"above_roofline": sorted(above),
                    "unmeasured": sorted(k for k, o in operators.items() if o["status"] == "unmeasured"),
                    "unweighted": sorted(set(chosen) - weighted)}
    return out
