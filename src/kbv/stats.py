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
    """Reference median / candidate median from one process pair, with a percentile-bootstrap interval."""
    return speedup_over_pairs([reference_ms], [candidate_ms], seed)


def bootstrap_medians(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``BOOTSTRAP_RESAMPLES`` medians of resamples (with replacement) of ``values``. A resample is drawn as
    positions into the sorted values, and its median is the sorted value at the positions' median: the same
    distribution as the median of resampled values (the map from position to sorted value is monotone), at half
    the cost (small integers are partitioned instead of gathered floats)."""
    ordered = np.sort(values)
    n = ordered.size
    picks = rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n), dtype=np.int32)
    mid = n // 2
    if n % 2:
        return ordered[np.partition(picks, mid, axis=1)[:, mid]]
    middle = np.partition(picks, [mid - 1, mid], axis=1)
    return (ordered[middle[:, mid - 1]] + ordered[middle[:, mid]]) / 2


def speedup_over_pairs(reference: Sequence[Sequence[float]], candidate: Sequence[Sequence[float]],
                       seed: int = 0) -> dict[str, Any]:
    """Speedup from several process pairs: the geometric mean over pairs of (reference median / candidate median).

    Timings differ between processes running identical code (memory placement; see docs/results), so the interval
    comes from a two-level bootstrap: resample the pairs, then the trials within each. With one pair it is the
    ordinary bootstrap of a ratio of medians, and its interval (``ci_from: "one_pair"``) knows nothing of the
    spread between processes: on the H200 the reference against itself with one pair claimed 0.85x to 1.57x over 37
    problems, and 25 of the intervals excluded 1 (docs/results/h200-2026-12-02).
    """
    groups = [(np.asarray(r, dtype=np.float64), np.asarray(c, dtype=np.float64))
              for r, c in zip(reference, candidate) if len(r) and len(c)]
    if not groups or any(np.median(c) <= 0 for _, c in groups):
        return {"value": None, "ci_low": None, "ci_high": None, "confidence": CONFIDENCE, "pairs": len(groups)}
    rng = np.random.default_rng(seed)
    value = float(np.exp(np.mean([np.log(np.median(r) / np.median(c)) for r, c in groups])))
    # per pair: bootstrap replicates of log(reference median / candidate median), shape (resamples, pairs)
    replicates = np.stack([
        np.log(bootstrap_medians(r, rng) / np.maximum(bootstrap_medians(c, rng), 1e-12))
        for r, c in groups], axis=1)
    picks = rng.integers(0, len(groups), size=replicates.shape)  # resample the pairs themselves
    estimates = np.exp(np.take_along_axis(replicates, picks, axis=1).mean(axis=1))
    alpha = (1 - CONFIDENCE) / 2
    low, high = np.quantile(estimates, [alpha, 1 - alpha])
    return {"value": value, "ci_low": float(low), "ci_high": float(high), "confidence": CONFIDENCE,
            "pairs": len(groups), "ci_from": "pairs" if len(groups) > 1 else "one_pair"}


def geometric_mean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return float(math.exp(sum(math.log(v) for v in vals) / len(vals)))
