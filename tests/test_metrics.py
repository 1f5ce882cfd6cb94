"""kbv.report.metrics (aggregate figures over records) and kbv.stats (timing statistics)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from kbv import stats
from kbv.report import metrics
from kbv.report.metrics import by_level, fast_p, geomean_speedup, memory_efficiency, speedup_of, summarize_group
from kbv.protocol import CONFIDENCE, FAST_P_THRESHOLDS


_names = itertools.count()


def rec(level: int | None, verdict: str, standard_verdict: str, verified: float | None = None,
        standard: float | None = None, mem: tuple[int | None, int | None] | None = None, name: str = "") -> dict[str, Any]:
    """A record of its own problem (a fresh name unless one is given), sample 0."""
    name = name or f"p{next(_names)}"
    r: dict[str, Any] = {"problem": name, "level": level, "sample": 0, "verdict": verdict, "standard_verdict": standard_verdict,
                         "speedup": {}, "memory_bytes": {}}
    r["speedup"]["verified"] = None if verified is None else {"value": verified, "ci_low": verified * 0.9,
                                                               "ci_high": verified * 1.1}
    r["speedup"]["standard"] = None if standard is None else {"value": standard}
    r["flags"] = []
    if mem is not None:
        r["memory_bytes"] = {"candidate_peak": mem[0], "reference_peak": mem[1]}
        if mem[0] is not None and mem[1] is not None and mem[0] > mem[1]:
            r["flags"].append("memory_above_reference")  # as the pipeline flags it
    return r


# A: correct both, fast                     B: correct both, slow            C: verified-incorrect, standard-correct
# D: verified-correct, standard-incorrect   E: compile error                 F: correct, untimed, memory unmeasured
A = rec(1, "correct", "correct", verified=2.0, standard=1.6, mem=(100, 200), name="A")
B = rec(1, "correct", "correct", verified=0.25, standard=0.4, mem=(300, 200), name="B")
C = rec(1, "incorrect", "correct", verified=3.0, standard=1.2, mem=(50, 100), name="C")
D = rec(2, "correct", "incorrect", verified=1.0, standard=4.0, mem=(100, 100), name="D")
E = rec(2, "compile_error", "compile_error", name="E")
F = rec(2, "correct", "correct", name="F")
RECORDS = [A, B, C, D, E, F]


def test_speedup_of():
    assert speedup_of(A, "verified") == 2.0
    assert speedup_of(A, "standard") == 1.6
    assert speedup_of(E, "verified") is None  # baseline entry None (not timed)
    assert speedup_of({"speedup": {}}, "verified") is None
    assert speedup_of({}, "verified") is None
    assert speedup_of({"speedup": None}, "verified") is None
    assert speedup_of({"speedup": {"verified": {"value": None}}}, "verified") is None
    assert speedup_of({"speedup": {"verified": {"value": "inf"}}}, "verified") is None  # as records write inf
    assert speedup_of({"speedup": {"verified": {"value": 3}}}, "verified") == 3.0


@pytest.mark.parametrize("p, expected", [(0.0, 3 / 6), (0.5, 2 / 6), (0.8, 2 / 6), (1.0, 1 / 6), (1.5, 1 / 6),
                                         (2.0, 0.0), (0.1, 3 / 6), (0.24, 3 / 6), (0.25, 2 / 6)])
def test_fast_p_verified(p, expected):
    # verified-correct and timed: A 2.0, B 0.25, D 1.0; C (3.0) is incorrect, E failed, F untimed.
    # Strictly greater than p; the denominator is every record.
    assert fast_p(RECORDS, p, "verified") == pytest.approx(expected)


@pytest.mark.parametrize("p, expected", [(0.0, 3 / 6), (0.4, 2 / 6), (0.5, 2 / 6), (1.0, 2 / 6), (1.2, 1 / 6),
                                         (1.5, 1 / 6), (2.0, 0.0), (3.9, 0.0)])
def test_fast_p_standard_uses_standard_verdict_and_speedup(p, expected):
    # standard-correct and timed: A 1.6, B 0.4, C 1.2; D's 4.0 does not count (standard_verdict incorrect).
    assert fast_p(RECORDS, p, "standard") == pytest.approx(expected)


def test_fast_p_counts_failures_in_the_denominator():
    only_good = [A]
    assert fast_p(only_good, 1.0, "verified") == 1.0
    failures = [rec(2, "compile_error", "compile_error") for _ in range(3)]
    assert fast_p(only_good + failures, 1.0, "verified") == pytest.approx(0.25)
    assert fast_p([E, F], 0.0, "verified") == 0.0
    assert fast_p([], 1.0, "verified") is None


def test_fast_p_does_not_mix_verdict_and_baseline():
    # correct under verified only, fast only under standard: fast under neither
    mixed = rec(1, "correct", "incorrect", verified=0.5, standard=5.0)
    assert fast_p([mixed], 1.0, "verified") == 0.0
    assert fast_p([mixed], 1.0, "standard") == 0.0
    # correct under standard only, fast only under verified: fast under neither
    other = rec(1, "incorrect", "correct", verified=5.0, standard=0.5)
    assert fast_p([other], 1.0, "verified") == 0.0
    assert fast_p([other], 1.0, "standard") == 0.0


def test_geomean_over_correct_records_only():
    assert geomean_speedup(RECORDS, "verified") == pytest.approx((2.0 * 0.25 * 1.0) ** (1 / 3))
    assert geomean_speedup(RECORDS, "standard") == pytest.approx((1.6 * 0.4 * 1.2) ** (1 / 3))
    assert geomean_speedup([C, E], "verified") is None
    assert geomean_speedup([D], "standard") is None
    assert geomean_speedup([], "verified") is None


def test_memory_efficiency():
    # verified-correct with both peaks: A (100 <= 200), B (300 > 200), D (100 <= 100, equal counts); C incorrect,
    # F unmeasured.
    assert memory_efficiency(RECORDS) == pytest.approx(2 / 3)
    assert memory_efficiency([B]) == 0.0
    assert memory_efficiency([C, E, F]) is None
    half = rec(1, "correct", "correct", mem=(None, 100))
    assert memory_efficiency([half]) is None
    assert memory_efficiency([half, A]) == 1.0


def test_memory_efficiency_follows_the_flag_not_the_raw_peaks():
    # The pipeline flags memory_above_reference only beyond the measurement slack (MEMORY_SLACK_BYTES), so a
    # candidate a few bytes above the reference without the flag counts as efficient, and a flagged one does not.
    within_slack = rec(1, "correct", "correct", mem=(1000, 1000))
    within_slack["memory_bytes"]["candidate_peak"] = 1010
    assert "memory_above_reference" not in within_slack["flags"]
    assert memory_efficiency([within_slack]) == 1.0
    flagged = rec(1, "correct", "correct", mem=(1000, 1000))
    flagged["flags"] = ["memory_above_reference"]
    assert memory_efficiency([flagged]) == 0.0
    assert memory_efficiency([within_slack, flagged]) == 0.5
    # the flag on a record without both peaks does not count at all
    unmeasured = rec(1, "correct", "correct", mem=(None, 1000))
    unmeasured["flags"] = ["memory_above_reference"]
    assert memory_efficiency([unmeasured, within_slack]) == 1.0


def test_summarize_group_overall_figures():
    g = summarize_group("all", RECORDS)
    assert g.name == "all" and g.n == 6
    assert g.compiled == pytest.approx(5 / 6)
    assert g.correct_verified == pytest.approx(4 / 6)  # A B D F
    assert g.correct_standard == pytest.approx(4 / 6)  # A B C F
    assert set(g.fast_p_verified) == set(FAST_P_THRESHOLDS) == set(g.fast_p_standard)
    assert g.fast_p_verified[1.0] == pytest.approx(1 / 6)
    assert g.fast_p_standard[1.0] == pytest.approx(2 / 6)
    assert g.fast_p_verified[0.0] == pytest.approx(3 / 6)
    assert g.geomean_verified == pytest.approx(0.5 ** (1 / 3))
    assert g.geomean_standard == pytest.approx(0.768 ** (1 / 3))
    assert g.memory_efficiency == pytest.approx(2 / 3)


def test_summarize_empty_group():
    g = summarize_group("empty", [])
    assert g.n == 0
    assert g.compiled is None and g.correct_verified is None and g.correct_standard is None
    assert all(v is None for v in g.fast_p_verified.values())
    assert g.geomean_verified is None and g.memory_efficiency is None


def test_by_level_groups_per_level_then_overall():
    no_level = rec(None, "correct", "correct", verified=8.0, standard=8.0, mem=(1, 1))
    groups = by_level([F, no_level, A, D, B, E, C])
    assert [g.name for g in groups] == ["level 1", "level 2", "overall"]
    l1, l2, overall = groups
    assert (l1.n, l2.n, overall.n) == (3, 3, 7)  # the level-less record counts only overall

    assert l1.compiled == 1.0
    assert l1.correct_verified == pytest.approx(2 / 3)
    assert l1.correct_standard == 1.0
    assert l1.fast_p_verified[1.0] == pytest.approx(1 / 3)  # A
    assert l1.fast_p_standard[1.0] == pytest.approx(2 / 3)  # A, C
    assert l1.geomean_verified == pytest.approx((2.0 * 0.25) ** 0.5)
    assert l1.memory_efficiency == pytest.approx(1 / 2)

    assert l2.compiled == pytest.approx(2 / 3)
    assert l2.correct_verified == pytest.approx(2 / 3)  # D F
    assert l2.correct_standard == pytest.approx(1 / 3)  # F
    assert l2.fast_p_verified[0.0] == pytest.approx(1 / 3)  # D (1.0)
    assert l2.fast_p_verified[1.0] == 0.0
    assert l2.fast_p_standard[0.0] == 0.0  # D is fast (4.0) but standard-incorrect; F untimed
    assert l2.geomean_verified == pytest.approx(1.0)
    assert l2.geomean_standard is None
    assert l2.memory_efficiency == 1.0

    assert overall.fast_p_verified[2.0] == pytest.approx(1 / 7)  # only the level-less 8.0
    assert overall.geomean_verified == pytest.approx((2.0 * 0.25 * 1.0 * 8.0) ** 0.25)


def test_by_level_sorts_levels_numerically():
    groups = by_level([rec(10, "correct", "correct"), rec(2, "correct", "correct"), rec(1, "incorrect", "incorrect")])
    assert [g.name for g in groups] == ["level 1", "level 2", "level 10", "overall"]


def test_by_level_of_nothing_has_an_empty_overall():
    groups = by_level([])
    assert [g.name for g in groups] == ["overall"]
    assert groups[0].n == 0


def test_verdict_keys():
    assert metrics.VERDICT_KEY == {"verified": "verdict", "standard": "standard_verdict"}


# ---------------------------------------------------------------------------------------------------------------
# kbv.stats


def test_summarize_known_list():
    s = stats.summarize([9, 1, 8, 2, 7, 3, 6, 4, 5])
    assert s["median"] == 5.0
    assert s["p25"] == 3.0
    assert s["p75"] == 7.0
    assert s["iqr"] == 4.0
    assert s["min"] == 1.0 and s["max"] == 9.0
    assert s["mean"] == 5.0
    assert s["std"] == pytest.approx(math.sqrt(20 / 3))
    assert s["n"] == 9


def test_summarize_even_length_interpolates():
    s = stats.summarize([1.0, 2.0, 3.0, 10.0])
    assert s["median"] == 2.5
    assert s["p25"] == pytest.approx(1.75)
    assert s["p75"] == pytest.approx(4.75)


def test_summarize_empty():
    s = stats.summarize([])
    assert s["median"] is None and s["n"] == 0


def test_speedup_is_the_ratio_of_medians():
    ref = [10.0, 11.0, 9.0, 100.0, 10.5]  # median 10.5 (the outlier does not move it)
    cand = [5.0, 4.0, 6.0, 5.0, 0.1]  # median 5.0
    s = stats.speedup(ref, cand)
    assert s["value"] == pytest.approx(10.5 / 5.0)
    assert s["confidence"] == CONFIDENCE
    assert s["ci_low"] <= s["value"] <= s["ci_high"]


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_speedup_ci_contains_the_value(seed):
    rng = np.random.default_rng(seed)
    ref = 2.0 + rng.normal(0, 0.1, 60)
    cand = 1.0 + rng.normal(0, 0.05, 80)
    s = stats.speedup(ref.tolist(), cand.tolist(), seed=seed)
    assert s["value"] == pytest.approx(np.median(ref) / np.median(cand))
    assert s["ci_low"] < s["value"] < s["ci_high"]
    assert 1.8 < s["ci_low"] and s["ci_high"] < 2.2


def test_speedup_ci_narrows_with_less_noise():
    rng = np.random.default_rng(42)
    base_ref, base_cand = rng.standard_normal(100), rng.standard_normal(100)
    widths = []
    for sd in (0.5, 0.1, 0.01):
        s = stats.speedup((10 + sd * base_ref).tolist(), (5 + sd * base_cand).tolist())
        assert s["ci_low"] <= s["value"] <= s["ci_high"]
        widths.append(s["ci_high"] - s["ci_low"])
    assert widths[0] > widths[1] > widths[2] > 0
    assert widths[0] > 5 * widths[2]


def test_speedup_without_noise_has_a_point_ci():
    s = stats.speedup([4.0] * 20, [2.0] * 20)
    assert s["value"] == 2.0 and s["ci_low"] == pytest.approx(2.0) and s["ci_high"] == pytest.approx(2.0)


def test_speedup_is_deterministic_for_a_seed():
    rng = np.random.default_rng(3)
    ref, cand = (1 + rng.random(30)).tolist(), (1 + rng.random(30)).tolist()
    assert stats.speedup(ref, cand, seed=5) == stats.speedup(ref, cand, seed=5)


@pytest.mark.parametrize("ref, cand", [([], [1.0]), ([1.0], []), ([1.0, 2.0], [0.0, 0.0, 1.0]), ([1.0], [-1.0])])
def test_speedup_undefined(ref, cand):
    s = stats.speedup(ref, cand)
    assert s["value"] is None and s["ci_low"] is None and s["ci_high"] is None


def test_geometric_mean():
    assert stats.geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert stats.geometric_mean([2.0, None, 8.0, 0.0, -3.0]) == pytest.approx(4.0)
    assert stats.geometric_mean([2.0, float("inf"), float("nan"), 8.0]) == pytest.approx(4.0)
    assert stats.geometric_mean([1.0, 10.0, 100.0]) == pytest.approx(10.0)
    assert stats.geometric_mean([None, 0.0, -1.0]) is None
    assert stats.geometric_mean([]) is None


def test_hidden_distributions_come_from_the_protocol() -> None:
    """Issue 10, bug 4: the exploit rate and step (b) count every distribution the standard check does not see."""
    from kbv.protocol import DISTRIBUTION_NAMES
    from kbv.report import metrics as m

    assert m.HIDDEN == tuple(d for d in DISTRIBUTION_NAMES if d != "D1") == ("D2", "D3", "D4", "D5", "D6")
    for hidden in ("D5", "D6"):
        record = {"verdict": "incorrect", "correctness": {"distributions": {
            d: {"status": "failed" if d == hidden else "passed"} for d in DISTRIBUTION_NAMES}}}
        assert m.passes_d1_fails_hidden(record), hidden


@pytest.mark.parametrize("n", [7, 8, 331])
def test_bootstrap_medians_have_the_plain_bootstraps_distribution(n) -> None:
    """The median of a resample drawn as positions into the sorted values is the median of the resampled values:
    the same distribution as resampling the values (checked on quantiles of 2000 resamples each, ties included)."""
    import numpy as np

    from kbv.stats import bootstrap_medians

    rng = np.random.default_rng(n)
    values = np.round(rng.lognormal(0.0, 0.5, n), 1)  # rounded: ties, as timer ticks give
    fast = bootstrap_medians(values, np.random.default_rng(1))
    plain = np.median(np.random.default_rng(2).choice(values, size=(fast.size, n)), axis=1)
    assert fast.size == 2000 and set(np.unique(fast)) <= set(np.unique(np.concatenate([values, plain])))
    for q in (0.05, 0.25, 0.5, 0.75, 0.95):
        assert abs(np.quantile(fast, q) - np.quantile(plain, q)) <= 0.1 + 1e-9  # one tick of the rounded values
    sorted_first = bootstrap_medians(np.sort(values), np.random.default_rng(1))
    assert np.array_equal(sorted_first, fast)  # only the sorted values matter


def test_an_interval_says_whether_it_spans_process_pairs() -> None:
    """One pair's interval knows nothing of the spread between processes: the record says which kind it is."""
    one = stats.speedup_over_pairs([[2.0, 2.1, 1.9]], [[1.0, 1.1, 0.9]])
    several = stats.speedup_over_pairs([[2.0, 2.1, 1.9]] * 2, [[1.0, 1.1, 0.9]] * 2)
    assert (one["ci_from"], several["ci_from"]) == ("one_pair", "pairs")
