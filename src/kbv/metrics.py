"""Aggregate figures over result records. Every definition a report shows lives here.

- compiled: the verdict is not ``compile_error``.
- correct (verified): ``verdict == "correct"``; correct (standard): ``standard_verdict == "correct"``.
- fast_p (KernelBench's definition): the share of *all* records in the group that are correct and whose speedup
  exceeds p; failed or untimed kernels count as not fast. Verified figures use ``verdict`` with the verified
  speedup, standard figures ``standard_verdict`` with the standard speedup.
- geometric-mean speedup: over the correct records that have that speedup (same pairing of verdict and baseline).
- memory efficiency: among records correct under the verified protocol with both peaks measured, the share not
  flagged ``memory_above_reference`` (candidate peak at most the reference's, within the measurement slack of
  ``kbv.protocol.MEMORY_SLACK_BYTES``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from kbv.protocol import FAST_P_THRESHOLDS
from kbv.stats import geometric_mean

VERDICT_KEY = {"verified": "verdict", "standard": "standard_verdict"}


def speedup_of(record: dict[str, Any], baseline: str) -> float | None:
    entry = (record.get("speedup") or {}).get(baseline)
    if not isinstance(entry, dict):
        return None
    value = entry.get("value")
    return float(value) if isinstance(value, (int, float)) else None


def is_correct(record: dict[str, Any], baseline: str) -> bool:
    return record.get(VERDICT_KEY[baseline]) == "correct"


def fast_p(records: list[dict[str, Any]], p: float, baseline: str) -> float | None:
    if not records:
        return None
    fast = 0
    for r in records:
        s = speedup_of(r, baseline)
        if is_correct(r, baseline) and s is not None and s > p:
            fast += 1
    return fast / len(records)


def geomean_speedup(records: list[dict[str, Any]], baseline: str) -> float | None:
    return geometric_mean([s for r in records if is_correct(r, baseline) and (s := speedup_of(r, baseline))])


def memory_efficiency(records: list[dict[str, Any]]) -> float | None:
    measured = []
    for r in records:
        mem = r.get("memory_bytes") or {}
        if r.get("verdict") == "correct" and mem.get("candidate_peak") is not None \
                and mem.get("reference_peak") is not None:
            measured.append("memory_above_reference" not in (r.get("flags") or []))
    return sum(measured) / len(measured) if measured else None


@dataclass
class GroupSummary:
    name: str
    n: int
    compiled: float | None
    correct_verified: float | None
    correct_standard: float | None
    fast_p_verified: dict[float, float | None]
    fast_p_standard: dict[float, float | None]
    geomean_verified: float | None
    geomean_standard: float | None
    memory_efficiency: float | None


def summarize_group(name: str, records: list[dict[str, Any]]) -> GroupSummary:
    n = len(records)

    def share(pred: Any) -> float | None:
        return sum(1 for r in records if pred(r)) / n if n else None

    return GroupSummary(
        name=name, n=n,
        compiled=share(lambda r: r.get("verdict") != "compile_error"),
        correct_verified=share(lambda r: is_correct(r, "verified")),
        correct_standard=share(lambda r: is_correct(r, "standard")),
        fast_p_verified={p: fast_p(records, p, "verified") for p in FAST_P_THRESHOLDS},
        fast_p_standard={p: fast_p(records, p, "standard") for p in FAST_P_THRESHOLDS},
        geomean_verified=geomean_speedup(records, "verified"),
        geomean_standard=geomean_speedup(records, "standard"),
        memory_efficiency=memory_efficiency(records),
    )


def by_level(records: Iterable[dict[str, Any]]) -> list[GroupSummary]:
    records = list(records)
    levels = sorted({r.get("level") for r in records if r.get("level") is not None})
    groups = [summarize_group(f"level {lv}", [r for r in records if r.get("level") == lv]) for lv in levels]
    groups.append(summarize_group("overall", records))
    return groups
