"""Aggregate figures over result records. Every definition a report shows lives here, and nowhere else.

Which records count
- Two different candidates (by hash) for the same problem and sample in one run are split into separate runs
  (``separate_candidates``), never merged as one sample.
- One sample per problem for every figure except pass@k: sample 0 (KernelBench's choice), or the lowest sample
  present. pass@k uses all samples.
- The denominator of rates and fast_p is the problem *universe*: every problem of the suite when one is given,
  else every problem that appears in any of the runs being compared. A problem with no record counts as failed
  (not compiled, not correct, not fast).

Protocols
- Standard figures use ``standard_verdict`` with the standard speedup (TF32 off baseline); verified figures use
  ``verdict`` with the verified speedup (TF32 on baseline).

Figures
- compiled: the verdict is not ``compile_error``.
- correct: verdict (or standard_verdict) is ``correct``.
- DSL adoption: correct under the verified protocol and flagged neither ``fallback`` nor ``partial_fallback``;
  shown only where records carry fallback data (a ``fallback`` section).
- fast_p (KernelBench's): the share of the universe that is correct and whose speedup exceeds p.
- geometric-mean speedup: over correct kernels that have a speedup. Separately, the BackendBench-style geometric
  mean over the whole universe with every failed or missing kernel counted as speedup 1.0 (labelled as such).
- correct but slower: among correct kernels with a speedup, the share below 1.0.
- memory efficiency: among kernels correct under the verified protocol with both peaks measured, the share not
  flagged ``memory_above_reference``; the leaderboard figure is the geometric mean of reference peak / kernel peak
  over the same kernels; "raised peak memory" is the share that is flagged.
- exploit rate: the share of the universe whose kernel passes D1 but fails one of D2-D6 or is ``rejected``.
- roofline attainment: median over correct kernels of ``roofline.attainment`` where records carry it; S_agg =
  sum of ``roofline.weight`` x attainment with failed kernels counted as 0, where records carry weights.
- pass@k: the unbiased estimator 1 - C(n-c, k) / C(n, k) per problem (n samples, c correct), averaged over
  problems, for k <= the smallest n.
- decomposition of the drop from the standard to the verified figure (geometric mean over correct kernels, and
  fast_1), in steps applied one after another so they add up: (a) the TF32 baseline: the same standard-correct
  kernels, verified speedups; (b) hidden distributions: minus kernels that pass D1 but fail D2-D6; (c) hack
  rejection: minus ``rejected`` kernels; the residual is whatever remains between that and the verified figure
  (stricter D1 checks such as dtype or exact tensor type, and kernels only the verified check accepts).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable

from kbv.protocol import DISTRIBUTIONS, FAST_P_THRESHOLDS, STANDARD_DISTRIBUTION
from kbv.stats import geometric_mean

VERDICT_KEY = {"verified": "verdict", "standard": "standard_verdict"}
BASELINE_NAMES = ("standard", "verified")
FAST_P_GRID = tuple(round(0.05 * i, 2) for i in range(61))  # 0.0 .. 3.0, for curves
PASS_AT_K = (1, 5, 10)
HIDDEN = tuple(d.name for d in DISTRIBUTIONS if d.name != STANDARD_DISTRIBUTION)  # D2-D6: unseen by the standard check

# Problem families by keyword in the problem's name, first match wins (a fused chain goes to its dominant op).
FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("attention", "sdpa", "bmm_scale_softmax")),
    ("rnn", ("gru", "lstm", "rnn")),
    ("convolution", ("conv",)),
    ("matmul", ("matmul", "gemm", "bmm", "linear", "matvec", "mlp")),
    ("normalization", ("norm",)),
    ("softmax", ("softmax",)),
    ("pooling", ("pool",)),
    ("loss", ("loss", "entropy", "kldiv")),
    ("reduction", ("sum", "mean", "max", "min", "argmax", "argmin", "prod", "reduction")),
    ("activation", ("relu", "gelu", "sigmoid", "tanh", "silu", "swish", "elu", "softplus", "hardtanh")),
)


# ---------------------------------------------------------------------------------------------------------------
# Record accessors


def finite_number(x: Any) -> float | None:
    """A finite float from a record value, else None (bools, strings such as "inf", missing values)."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def speedup_of(record: dict[str, Any] | None, baseline: str) -> float | None:
    entry = ((record or {}).get("speedup") or {}).get(baseline)
    if not isinstance(entry, dict):
        return None
    value = entry.get("value")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def is_correct(record: dict[str, Any] | None, baseline: str) -> bool:
    return record is not None and record.get(VERDICT_KEY[baseline]) == "correct"


def distribution_status(record: dict[str, Any], name: str) -> str | None:
    dist = ((record.get("correctness") or {}).get("distributions") or {}).get(name) or {}
    return dist.get("status")


def passes_d1_fails_hidden(record: dict[str, Any] | None) -> bool:
    """Passes the verified check on D1 but fails (or crashes on) one of D2-D6."""
    if record is None or distribution_status(record, "D1") != "passed":
        return False
    return any(distribution_status(record, d) in ("failed", "error") for d in HIDDEN)


def family_of(problem: str) -> str:
    name = problem.split("/")[-1].lower()
    name = re.sub(r"^\d+_", "", name)
    if problem.startswith("level3/"):
        return "model"
    for family, keywords in FAMILIES:
        if any(k in name for k in keywords):
            return family
    return "other"


def roofline_of(record: dict[str, Any] | None) -> dict[str, Any]:
    roof = (record or {}).get("roofline")
    return roof if isinstance(roof, dict) else {}


def attainment_of(record: dict[str, Any] | None) -> float | None:
    value = roofline_of(record).get("attainment")
    if isinstance(value, dict):
        value = value.get("candidate")
    return float(value) if isinstance(value, (int, float)) else None


def has_fallback_data(records: Iterable[dict[str, Any]]) -> bool:
    return any(isinstance(r.get("fallback"), dict) for r in records)


def tf32_effect_possible(record: dict[str, Any]) -> bool | None:
    """Whether the two baselines can run different kernels for this record: never on the CPU, and only where the
    problem has TF32-eligible work (``roofline.flops`` counts ``tf32`` FLOPs); None where the record does not say."""
    if ((record.get("env") or {}).get("device_kind")) == "cpu":
        return False
    flops = roofline_of(record).get("flops")
    return bool(finite_number(flops.get("tf32"))) if isinstance(flops, dict) else None


def triton_interpreted(record: dict[str, Any]) -> bool:
    """Timed on the CPU with Triton kernels: the Triton interpreter's timings (the record's fallback data shows a
    ``triton:`` call, or the candidate file, where it still exists, imports triton)."""
    if ((record.get("env") or {}).get("device_kind")) != "cpu":
        return False
    calls = (record.get("fallback") or {}).get("own_calls") if isinstance(record.get("fallback"), dict) else None
    if isinstance(calls, dict) and any(str(k).startswith("triton:") for k in calls):
        return True
    try:
        source = open(str(record.get("candidate") or ""), encoding="utf-8", errors="replace").read(200_000)
    except OSError:
        return False
    return bool(re.search(r"^\s*(import triton|from triton\b)", source, re.MULTILINE))


# ---------------------------------------------------------------------------------------------------------------
# Selection


def separate_candidates(runs: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Runs in which two different candidates (by hash) share a (problem, sample) are split, so no figure merges
    them: the n-th distinct candidate of each (problem, sample) goes to part n, labelled ``run [file]`` when one
    candidate file makes up the part, else ``run #n``. Other runs are unchanged."""
    out: dict[str, list[dict[str, Any]]] = {}
    for label, records in runs.items():
        order: dict[tuple[str, int], list[str]] = {}
        for r in records:
            seen = order.setdefault((r["problem"], int(r.get("sample", 0))), [])
            if r.get("candidate_sha256") not in seen:
                seen.append(r.get("candidate_sha256"))
        if all(len(v) < 2 for v in order.values()):
            out[label] = records
            continue
        parts: dict[int, list[dict[str, Any]]] = {}
        for r in records:
            n = order[(r["problem"], int(r.get("sample", 0)))].index(r.get("candidate_sha256"))
            parts.setdefault(n, []).append(r)
        for n, part in sorted(parts.items()):
            names = {str(r.get("candidate") or "").replace("\\", "/").rsplit("/", 1)[-1] for r in part}
            name = f"{label} [{names.pop()}]" if len(names) == 1 and "" not in names else f"{label} #{n + 1}"
            while name in out or name in runs:
                name += "'"
            out[name] = part
    return out


def one_per_problem(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Sample 0 of each problem (or its lowest sample)."""
    chosen: dict[str, dict[str, Any]] = {}
    for r in records:
        best = chosen.get(r["problem"])
        if best is None or int(r.get("sample", 0)) < int(best.get("sample", 0)):
            chosen[r["problem"]] = r
    return chosen


def level_of_key(problem: str) -> int | None:
    m = re.match(r"^level(\d+)/", problem)
    return int(m.group(1)) if m else None


def _levels(records: list[dict[str, Any]], keys: list[str]) -> dict[str, int | None]:
    """Each problem's level: the records' ``level`` field, else parsed from the key (``level1/...``)."""
    levels = {r["problem"]: r["level"] for r in records if isinstance(r.get("level"), int)}
    return {k: levels.get(k, level_of_key(k)) for k in keys}


# ---------------------------------------------------------------------------------------------------------------
# Figures over a universe of problems


def _share(count: int, n: int) -> float | None:
    return count / n if n else None


def fast_p(records: list[dict[str, Any]] | dict[str, dict[str, Any]], p: float, baseline: str,
           universe: Iterable[str] | None = None) -> float | None:
    """Share of the universe that is correct under ``baseline``'s protocol with speedup > p."""
    chosen = records if isinstance(records, dict) else one_per_problem(records)
    keys = list(universe) if universe is not None else list(chosen)
    fast = sum(1 for k in keys if is_correct(chosen.get(k), baseline)
               and (s := speedup_of(chosen.get(k), baseline)) is not None and s > p)
    return _share(fast, len(keys))


def geomean_speedup(records: Iterable[dict[str, Any]], baseline: str) -> float | None:
    """Geometric mean of the speedups of correct kernels."""
    return geometric_mean([s for r in records if is_correct(r, baseline) and (s := speedup_of(r, baseline))])


def geomean_failures_as_one(chosen: dict[str, dict[str, Any]], keys: list[str], baseline: str) -> float | None:
    """BackendBench's figure: every problem counts; failed or missing kernels count as speedup 1.0."""
    values = []
    for k in keys:
        r = chosen.get(k)
        s = speedup_of(r, baseline) if is_correct(r, baseline) else None
        values.append(s if s is not None else 1.0)
    return geometric_mean(values)


def memory_figures(records: Iterable[dict[str, Any]]) -> dict[str, float | None]:
    measured = []
    for r in records:
        mem = r.get("memory_bytes") or {}
        cand, ref = mem.get("candidate_peak"), mem.get("reference_peak")
        if is_correct(r, "verified") and isinstance(cand, (int, float)) and isinstance(ref, (int, float)):
            measured.append((cand, ref, "memory_above_reference" in (r.get("flags") or [])))
    if not measured:
        return {"efficiency": None, "leaderboard_ratio": None, "raised_share": None}
    raised = sum(1 for _, _, flagged in measured if flagged)
    ratios = [ref / cand for cand, ref, _ in measured if cand > 0 and ref > 0]
    return {"efficiency": 1 - raised / len(measured), "leaderboard_ratio": geometric_mean(ratios),
            "raised_share": raised / len(measured)}


def memory_efficiency(records: Iterable[dict[str, Any]]) -> float | None:
    return memory_figures(records)["efficiency"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k: 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_k_figures(records: Iterable[dict[str, Any]], universe: Iterable[str] | None = None) -> dict[int, float]:
    counts: dict[str, list[int]] = {}
    for r in records:
        n_c = counts.setdefault(r["problem"], [0, 0])
        n_c[0] += 1
        n_c[1] += is_correct(r, "verified")
    keys = list(universe) if universe is not None else list(counts)
    present = [counts[k] for k in keys if k in counts]
    if not present or max(n for n, _ in present) < 2:
        return {}
    smallest = min(n for n, _ in present)
    out = {}
    for k in PASS_AT_K:
        if k <= smallest:
            out[k] = sum(pass_at_k(*counts[key], k) if key in counts else 0.0 for key in keys) / len(keys)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Group summaries


@dataclass
class GroupSummary:
    name: str
    n: int  # problems in the universe of this group
    compiled: float | None
    correct_verified: float | None
    correct_standard: float | None
    dsl_adoption: float | None
    fast_p_verified: dict[float, float | None]
    fast_p_standard: dict[float, float | None]
    geomean_verified: float | None
    geomean_standard: float | None
    geomean_all_verified: float | None  # failures counted as 1.0 (BackendBench)
    geomean_all_standard: float | None
    correct_but_slower: float | None
    memory_efficiency: float | None
    memory_leaderboard_ratio: float | None
    memory_raised_share: float | None
    exploit_rate: float | None
    attainment_median: float | None
    s_agg: float | None
    pass_at_k: dict[int, float] = field(default_factory=dict)


def summarize_group(name: str, records: list[dict[str, Any]], universe: Iterable[str] | None = None
                    ) -> GroupSummary:
    chosen = one_per_problem(records)
    keys = sorted(set(universe) if universe is not None else set(chosen))
    n = len(keys)
    present = [chosen[k] for k in keys if k in chosen]
    correct_v = [r for r in present if is_correct(r, "verified")]
    timed_v = [s for r in correct_v if (s := speedup_of(r, "verified")) is not None]
    mem = memory_figures(present)
    attainments = sorted(a for r in correct_v if (a := attainment_of(r)) is not None)
    weighted = [r for r in present if isinstance(roofline_of(r).get("weight"), (int, float))]
    return GroupSummary(
        name=name, n=n,
        compiled=_share(sum(1 for r in present if r.get("verdict") != "compile_error"), n),
        correct_verified=_share(len(correct_v), n),
        correct_standard=_share(sum(1 for r in present if is_correct(r, "standard")), n),
        dsl_adoption=_share(sum(1 for r in correct_v if not {"fallback", "partial_fallback"} & set(r.get("flags") or [])),
                            n) if has_fallback_data(present) else None,
        fast_p_verified={p: fast_p(chosen, p, "verified", keys) for p in FAST_P_THRESHOLDS},
        fast_p_standard={p: fast_p(chosen, p, "standard", keys) for p in FAST_P_THRESHOLDS},
        geomean_verified=geomean_speedup(present, "verified"),
        geomean_standard=geomean_speedup(present, "standard"),
        geomean_all_verified=geomean_failures_as_one(chosen, keys, "verified") if n else None,
        geomean_all_standard=geomean_failures_as_one(chosen, keys, "standard") if n else None,
        correct_but_slower=_share(sum(1 for s in timed_v if s < 1.0), len(timed_v)),
        memory_efficiency=mem["efficiency"], memory_leaderboard_ratio=mem["leaderboard_ratio"],
        memory_raised_share=mem["raised_share"],
        exploit_rate=_share(sum(1 for r in present if passes_d1_fails_hidden(r) or r.get("verdict") == "rejected"), n),
        attainment_median=attainments[len(attainments) // 2] if attainments else None,
        s_agg=sum(roofline_of(r)["weight"] * ((attainment_of(r) or 0.0) if is_correct(r, "verified") else 0.0)
                  for r in weighted) if weighted else None,
        pass_at_k=pass_at_k_figures(records, keys),
    )


def universe_of(runs: dict[str, list[dict[str, Any]]], suite: Iterable[str] | None = None) -> list[str]:
    if suite is not None:
        return sorted(set(suite))
    return sorted({r["problem"] for records in runs.values() for r in records})


def by_level(records: Iterable[dict[str, Any]], universe: Iterable[str] | None = None) -> list[GroupSummary]:
    records = list(records)
    keys = sorted(set(universe) if universe is not None else {r["problem"] for r in records})
    level = _levels(records, keys)
    levels = sorted({lv for lv in level.values() if lv is not None})
    groups = [summarize_group(f"level {lv}", [r for r in records if level.get(r["problem"]) == lv],
                              [k for k in keys if level[k] == lv]) for lv in levels]
    groups.append(summarize_group("overall", records, keys))
    return groups


def by_family(records: Iterable[dict[str, Any]], universe: Iterable[str] | None = None) -> list[GroupSummary]:
    records = list(records)
    keys = sorted(set(universe) if universe is not None else {r["problem"] for r in records})
    families = sorted({family_of(k) for k in keys})
    return [summarize_group(f, [r for r in records if family_of(r["problem"]) == f],
                            [k for k in keys if family_of(k) == f]) for f in families]


def by_regime(records: Iterable[dict[str, Any]]) -> list[GroupSummary]:
    """Memory- vs compute-bound, where records carry ``roofline.regime``."""
    records = list(records)
    regimes = sorted({roofline_of(r).get("regime") for r in records} - {None})
    return [summarize_group(str(g), [r for r in records if roofline_of(r).get("regime") == g]) for g in regimes]


# ---------------------------------------------------------------------------------------------------------------
# Decomposition of the standard -> verified drop


@dataclass
class Step:
    name: str
    geomean: float | None  # geometric-mean speedup over the kernels still counted
    fast_1: float | None  # fast_1.0 over the universe
    kernels: int
    moved: list[dict[str, Any]] = field(default_factory=list)  # the problems this step moved most


@dataclass
class Decomposition:
    group: str
    steps: list[Step]  # standard, (a) tf32 baseline, (b) hidden distributions, (c) hack rejection, verified
    effects: dict[str, dict[str, float | None]]  # per step and the residual: change in geomean and fast_1


def _figures(members: dict[str, dict[str, Any]], baseline: str, n: int) -> tuple[float | None, float | None]:
    speeds = [s for r in members.values() if (s := speedup_of(r, baseline)) is not None]
    return geometric_mean(speeds), _share(sum(1 for s in speeds if s > 1.0), n)


def decompose(records: Iterable[dict[str, Any]], universe: Iterable[str] | None = None, group: str = "overall",
              movers: int = 5) -> Decomposition:
    chosen = one_per_problem(records)
    keys = sorted(set(universe) if universe is not None else set(chosen))
    n = len(keys)
    a_set = {k: chosen[k] for k in keys if k in chosen and is_correct(chosen[k], "standard")
             and speedup_of(chosen[k], "standard") is not None}
    g0, f0 = _figures(a_set, "standard", n)
    a_timed = {k: r for k, r in a_set.items() if speedup_of(r, "verified") is not None}
    g1, f1 = _figures(a_timed, "verified", n)
    b_set = {k: r for k, r in a_timed.items() if not passes_d1_fails_hidden(r)}
    g2, f2 = _figures(b_set, "verified", n)
    c_set = {k: r for k, r in b_set.items() if r.get("verdict") != "rejected"}
    g3, f3 = _figures(c_set, "verified", n)
    v_set = {k: chosen[k] for k in keys if k in chosen and is_correct(chosen[k], "verified")
             and speedup_of(chosen[k], "verified") is not None}
    gv, fv = _figures(v_set, "verified", n)

    def ratio_moves() -> list[dict[str, Any]]:
        rows = [{"problem": k, "standard": speedup_of(r, "standard"), "verified": speedup_of(r, "verified")}
                for k, r in a_timed.items()]
        rows.sort(key=lambda x: -abs(math.log(x["verified"] / x["standard"])))
        return rows[:movers]

    def removed(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
        gone = [{"problem": k, "standard": speedup_of(r, "standard"), "verified": speedup_of(r, "verified"),
                 "verdict": r.get("verdict"), "failed": (r.get("correctness") or {}).get("failed_distributions")}
                for k, r in before.items() if k not in after]
        gone.sort(key=lambda x: -(x["standard"] or 0.0))
        return gone[:movers]

    steps = [
        Step("standard", g0, f0, len(a_set)),
        Step("(a) TF32 baseline", g1, f1, len(a_timed), ratio_moves()),
        Step("(b) hidden distributions", g2, f2, len(b_set), removed(a_timed, b_set)),
        Step("(c) hack rejection", g3, f3, len(c_set), removed(b_set, c_set)),
        Step("verified", gv, fv, len(v_set)),
    ]

    def delta(x: float | None, y: float | None) -> float | None:
        return None if x is None or y is None else y - x

    effects = {
        "(a) TF32 baseline": {"geomean": delta(g0, g1), "fast_1": delta(f0, f1)},
        "(b) hidden distributions": {"geomean": delta(g1, g2), "fast_1": delta(f1, f2)},
        "(c) hack rejection": {"geomean": delta(g2, g3), "fast_1": delta(f2, f3)},
        "residual": {"geomean": delta(g3, gv), "fast_1": delta(f3, fv)},
        "total": {"geomean": delta(g0, gv), "fast_1": delta(f0, fv)},
    }
    return Decomposition(group, steps, effects)


def decompose_by_level(records: Iterable[dict[str, Any]], universe: Iterable[str] | None = None
                       ) -> list[Decomposition]:
    records = list(records)
    keys = sorted(set(universe) if universe is not None else {r["problem"] for r in records})
    level = _levels(records, keys)
    levels = sorted({lv for lv in level.values() if lv is not None})
    out = [decompose([r for r in records if level.get(r["problem"]) == lv],
                     [k for k in keys if level[k] == lv], f"level {lv}") for lv in levels]
    out.append(decompose(records, keys, "overall"))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Several runs side by side: everything a report renders


@dataclass
class RunComparison:
    runs: list[str]  # run labels, in the order given
    universe: list[str]  # the problems every rate and fast_p counts over
    records: dict[str, list[dict[str, Any]]]  # every record of each run (all samples)
    levels: dict[str, list[GroupSummary]]
    families: dict[str, list[GroupSummary]]
    regimes: dict[str, list[GroupSummary]]
    decomposition: dict[str, list[Decomposition]]
    fast_p_curves: dict[str, dict[str, list[tuple[float, float | None]]]]  # run -> protocol -> [(p, fast_p)]
    generation: dict[str, dict[str, Any]] = field(default_factory=dict)  # run -> kbv.study.figures, where generated
    agent: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # run -> kbv.agent summaries, agent runs
    time_spent: dict[str, dict[str, dict[str, float | None]]] = field(default_factory=dict)  # run -> time_breakdown
    gpu_use: dict[str, dict[str, float | None]] = field(default_factory=dict)  # run -> gpu_use, runs on a shared GPU


TIME_STAGES = ("compile", "correctness", "performance")


def time_breakdown(records: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Where a run's time went, from its records' ``wall_seconds``: for each stage and each ``<stage>/<part>``, the
    pairs that have it, its median and total seconds, and its share of the evaluation time (correctness plus
    performance, the build excluded, summed over the records). A record with parts of a stage but not the stage
    itself (a pair stopped at correctness still pays for its timing workers started ahead: ``performance/
    process_exit``) counts that stage as the sum of its parts."""
    seen: dict[str, list[float]] = {}
    for r in records:
        wall = r.get("wall_seconds") if isinstance(r.get("wall_seconds"), dict) else {}
        numbers: dict[str, float] = {}
        for key, value in wall.items():
            number = finite_number(value)
            if number is not None and (key in TIME_STAGES or key.split("/")[0] in TIME_STAGES[1:]):
                numbers[key] = number
        for stage in TIME_STAGES[1:]:
            parts = [v for k, v in numbers.items() if k.startswith(stage + "/")]
            if stage not in numbers and parts:
                numbers[stage] = sum(parts)
        for key, number in numbers.items():
            seen.setdefault(key, []).append(number)
    evaluation = sum(sum(seen.get(stage, [])) for stage in TIME_STAGES[1:])
    order = {stage: i for i, stage in enumerate(TIME_STAGES)}
    keys = sorted(seen, key=lambda k: (order[k.split("/")[0]], "/" in k, -sum(seen[k]), k))
    return {k: {"pairs": len(seen[k]), "median_s": statistics.median(seen[k]), "total_s": sum(seen[k]),
                "share": (sum(seen[k]) / evaluation if evaluation > 0 and k != "compile" else None)}
            for k in keys}


# a record's env.timeline events (kbv.eval.context.PairContext.mark) that open and close what held the shared GPU
GPU_SPANS = (("correctness", "correctness_in", "correctness_out"),
             ("correctness", "correctness_rerun_in", "correctness_rerun_out"),
             ("alone", "alone_in", "alone_out"), ("alone", "performance_rerun_in", "performance_rerun_out"),
             ("place", "place_in", "place_out"))


def gpu_use(records: list[dict[str, Any]]) -> dict[str, float | None] | None:
    """What a GPU shared by a run's pairs (``--gpu-share``) was doing, from the records' ``env.timeline``
    (wall-clock seconds, so pairs line up; one GPU's pairs assumed): from the first correctness stage asked for to
    the last timing place left (``span_s``), the seconds a timing stage held the device alone (``alone_s``: a run
    again alone counts here too), one or more correctness stages ran with none alone (``correctness_s``;
    ``correctness_mean_inside``: how many on average then), only a timing place's set-up or wind-down ran
    (``place_only_s``), and nothing of the run's was on it (``idle_s``). None where no record has a timeline."""
    events: list[tuple[float, str, int]] = []
    asked: list[float] = []
    for r in records:
        env = r.get("env") if isinstance(r.get("env"), dict) else {}
        line = env.get("timeline") if isinstance(env.get("timeline"), dict) else {}
        for kind, start, end in GPU_SPANS:
            t0, t1 = finite_number(line.get(start)), finite_number(line.get(end))
            if t0 is not None and t1 is not None and t1 >= t0:
                events += [(t0, kind, 1), (t1, kind, -1)]
        if (t := finite_number(line.get("correctness_asked"))) is not None:
            asked.append(t)
    if not events:
        return None
    events.sort(key=lambda e: (e[0], e[2]))  # at one instant, leaving before entering
    begin = min([events[0][0], *asked])
    inside = {"correctness": 0, "alone": 0, "place": 0}
    spent = {"alone_s": 0.0, "correctness_s": 0.0, "place_only_s": 0.0, "idle_s": 0.0}
    weighted, last = 0.0, begin
    for when, kind, step in events:
        span = when - last
        if inside["alone"]:
            spent["alone_s"] += span
        elif inside["correctness"]:
            spent["correctness_s"] += span
            weighted += span * inside["correctness"]
        elif inside["place"]:
            spent["place_only_s"] += span
        else:
            spent["idle_s"] += span
        inside[kind] += step
        last = when
    return {"span_s": round(last - begin, 2), **{k: round(v, 2) for k, v in spent.items()},
            "correctness_mean_inside": round(weighted / spent["correctness_s"], 2) if spent["correctness_s"] else None}


def compare_runs(runs: dict[str, list[dict[str, Any]]], suite: Iterable[str] | None = None) -> RunComparison:
    runs = separate_candidates(runs)  # two candidates for one (problem, sample) are never merged
    universe = universe_of(runs, suite)
    curves = {}
    for label, records in runs.items():
        chosen = one_per_problem(records)
        curves[label] = {b: [(p, fast_p(chosen, p, b, universe)) for p in FAST_P_GRID] for b in BASELINE_NAMES}
    return RunComparison(
        runs=list(runs), universe=universe, records=runs,
        levels={label: by_level(records, universe) for label, records in runs.items()},
        families={label: by_family(records, universe) for label, records in runs.items()},
        regimes={label: by_regime(list(one_per_problem(records).values())) for label, records in runs.items()},
        decomposition={label: decompose_by_level(records, universe) for label, records in runs.items()},
        fast_p_curves=curves,
        time_spent={label: time_breakdown(records) for label, records in runs.items()},
        gpu_use={label: use for label, records in runs.items() if (use := gpu_use(records)) is not None},
    )
