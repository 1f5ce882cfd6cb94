"""Merging the per-shape records of a multi-shape problem into the one record of the (problem, candidate) pair.

Rules (docs/formats.md): the verdict is the worst over shapes, held-out shapes included (correct only if correct on
all); flags are the union; the speedup per baseline is the geometric mean over shapes (present only when every
shape was timed), its interval the geometric means of the shapes' interval bounds (each shape at its bound at once:
wider than needed, never narrower); roofline attainment is the median over shapes; peak memory is the largest over
shapes. Top-level ``correctness``, ``timing_ms``, ``shapes`` and ``roofline`` details are the first shape's; ``shape_results`` keeps
each shape's verdict, flags, speedups, attainment and error.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from kbv.eval.verdict import over_shapes
from kbv.records import Record

ShapeRun = tuple[int, dict[str, Any] | None, bool, Record]  # (index, overrides, held out, record)


def _summary(index: int, overrides: dict[str, Any] | None, held_out: bool, r: Record) -> dict[str, Any]:
    roof = r.roofline or {}
    return {
        "index": index, "held_out": held_out, "overrides": overrides, "verdict": r.verdict,
        "standard_verdict": r.standard_verdict, "flags": list(r.flags), "stage": r.stage,
        "speedup": {b: (s or {}).get("value") for b, s in r.speedup.items()},
        "attainment": roof.get("attainment"), "regime": roof.get("regime"),
        "t_roofline_ms": roof.get("t_roofline_ms"),
        "timing_ms": {k: (v or {}).get("median") if isinstance(v, dict) else v for k, v in r.timing_ms.items()
                      if k.startswith(("candidate_", "reference_"))},
        "memory_bytes": dict(r.memory_bytes), "error": r.error, "seeds": r.seeds, "shapes": r.shapes,
    }


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def merge(runs: list[ShapeRun]) -> Record:
    if not runs:
        raise ValueError("no shapes evaluated")
    first = runs[0][3]
    records = [r for *_, r in runs]
    merged = Record(**{k: v for k, v in vars(first).items()})
    merged.shape_results = [_summary(i, o, h, r) for i, o, h, r in runs]
    merged.verdict = over_shapes([r.verdict for r in records])
    merged.standard_verdict = over_shapes([r.standard_verdict for r in records])
    merged.flags = sorted({f for r in records for f in r.flags})
    failing = next((r for r in records if r.error), None)
    merged.error = failing.error if failing else None
    worst = next((i for i, _, _, r in runs if r.verdict == merged.verdict), 0)
    merged.stage = next(r.stage for i, _, _, r in runs if i == worst)
    merged.speedup = {}
    for baseline in first.speedup:
        raw = [(r.speedup.get(baseline) or {}).get("value") for r in records]
        values = [float(v) for v in raw if isinstance(v, (int, float)) and v > 0]
        if len(values) == len(raw):
            merged.speedup[baseline] = {"value": _geomean(values), "ci_low": None, "ci_high": None,
                                        "over": "geometric mean over shapes", "per_shape": values}
            raw_bounds = [((r.speedup.get(baseline) or {}).get("ci_low"),
                           (r.speedup.get(baseline) or {}).get("ci_high")) for r in records]
            bounds = [(float(lo), float(hi)) for lo, hi in raw_bounds
                      if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and 0 < lo <= hi]
            if len(bounds) == len(records):
                # every shape at its own bound at once: wider than the geometric mean's own interval would be
                merged.speedup[baseline] |= {
                    "ci_low": _geomean([lo for lo, _ in bounds]),
                    "ci_high": _geomean([hi for _, hi in bounds]),
                    "confidence": (first.speedup.get(baseline) or {}).get("confidence"),
                    "ci_from": "shapes: the geometric means of each shape's interval bounds"}
        else:
            merged.speedup[baseline] = None
    roofs = [r.roofline for r in records if isinstance(r.roofline, dict)]
    if len(roofs) == len(records) and all(isinstance(x.get("attainment"), dict) for x in roofs):
        merged.roofline = dict(first.roofline or {})
        keys = set.intersection(*(set(x["attainment"]) for x in roofs))
        merged.roofline["attainment"] = {
            k: statistics.median(x["attainment"][k] for x in roofs) for k in keys
            if all(isinstance(x["attainment"][k], (int, float)) for x in roofs)}
        merged.roofline["attainment_over"] = "median over shapes"
    for key in ("candidate_peak", "reference_peak"):
        peaks = [v for v in (r.memory_bytes.get(key) for r in records) if isinstance(v, int)]
        if peaks and len(peaks) == len(records):
            merged.memory_bytes[key] = max(peaks)
    merged.wall_seconds = {k: round(sum(r.wall_seconds.get(k, 0.0) for r in records), 3)
                           for k in {k for r in records for k in r.wall_seconds}}
    return merged
