"""Statistics over raw per-trial times, computed by the parent (workers send samples, never summaries)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from kbv.protocol import BOOTSTRAP_RESAMPLES, CONFIDENCE


def summarize(times_ms: Sequence[float]) -> dict[str, Any]:
    """Median and spread of a timing sample."""
    a = np.asarray(times_ms, dtype=np.float64)
    if a.size == 0:
        return {"median": None, "n": 0}
    p25, p75 = np.percentile(a, [25, 75])
    return {
        "median": float(np.median(a)), "p25": float(p25), "p75": float(p75), "iqr": float(p75 - p25),
        "min": float(a.min()), "max": float(a.max()), "mean": float(a.mean()), "std": float(a.std()),
        "n": int(a.size),
    }


def speedup(reference_ms: Sequence[float], candidate_ms: Sequence[float], seed: int = 0) -> dict[str, Any]:
    """Reference median / candidate median, with a percentile-bootstrap confidence interval."""
    ref = np.asarray(reference_ms, dtype=np.float64)
    cand = np.asarray(candidate_ms, dtype=np.float64)
    if ref.size == 0 or cand.size == 0 or np.median(cand) <= 0:
        return {"value": None, "ci_low": None, "ci_high": None, "confidence": CONFIDENCE}
    rng = np.random.default_rng(seed)
    ref_med = np.median(rng.choice(ref, size=(BOOTSTRAP_RESAMPLES, ref.size)), axis=1)
    cand_med = np.median(rng.choice(cand, size=(BOOTSTRAP_RESAMPLES, cand.size)), axis=1)
    ratios = ref_med / np.maximum(cand_med, 1e-12)
    alpha = (1 - CONFIDENCE) / 2
    low, high = np.quantile(ratios, [alpha, 1 - alpha])
    return {"value": float(np.median(ref) / np.median(cand)), "ci_low": float(low), "ci_high": float(high),
            "confidence": CONFIDENCE}


def geometric_mean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return float(math.exp(sum(math.log(v) for v in vals) / len(vals)))
