"""KernelBench-compatible export (eval_results.json, pass_at_k_results.json) and import (kbv.report.kernelbench)."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kbv.report import kernelbench as kb
from kbv.report import metrics
from kbv.problems import builtin_suite_dir, discover
from kbv.protocol import SCHEMA
from kbv.records import Record, read_records, recorded_keys

ROOT = Path(__file__).resolve().parents[1]
SUITE_RESULTS = ROOT / "docs" / "results" / "h200-2026-11-29" / "suite.jsonl.gz"
RECORD_FIELDS = {f.name for f in dataclasses.fields(Record)}


def _real() -> dict[str, dict[str, Any]]:
    """The real H200 suite records, by problem key (35 of them, all correct)."""
    return {r["problem"]: r for r in read_records(SUITE_RESULTS)}


def _records() -> dict[str, dict[str, Any]]:
    """Real records, some turned into failures: a compile error, a runtime error, a kernel wrong on D3 only
    (verified incorrect, standard correct, timed under both baselines), a second sample, a level-2 record."""
    real = _real()
    out = {"r10": copy.deepcopy(real["level1/10_BatchNorm2d"]), "r5s0": copy.deepcopy(real["level1/5_ReLU"]),
           "l2": copy.deepcopy(real["level2/3_Matmul_Scale_Residual"])}
    r5s1 = copy.deepcopy(real["level1/5_ReLU"])
    r5s1["sample"] = 1
    r5s1["candidate"] = r5s1["candidate"].replace("sample_0", "sample_1")
    r5s1["timing_ms"]["candidate_verified"]["median"] = 0.07  # twice as fast as the reference
    out["r5s1"] = r5s1

    r1 = copy.deepcopy(real["level1/1_Square_Matmul"])
    r1.update(verdict="compile_error", standard_verdict="compile_error", stage="compile", timing_ms={}, speedup={},
              correctness={}, memory_bytes={},
              error={"stage": "compile", "kind": "build", "message": "error: identifier 'tile' is undefined",
                     "log_tail": "ninja: build stopped", "traceback": ""})
    out["r1"] = r1

    r7 = copy.deepcopy(real["level1/7_Softmax"])
    r7.update(verdict="runtime_error", standard_verdict="runtime_error", stage="correctness", timing_ms={},
              speedup={}, error={"stage": "correctness", "kind": "crash",
                                 "message": "CUDA error: an illegal memory access was encountered",
                                 "log_tail": "", "traceback": "Traceback (most recent call last): ..."})
    out["r7"] = r7

    r8 = copy.deepcopy(real["level1/8_LayerNorm"])
    r8["verdict"] = "incorrect"  # standard_verdict stays correct: D1 passes
    r8["correctness"]["distributions"]["D3"] = {"status": "failed", "trials": 1, "max_abs_error": 0.5,
                                                "max_rel_error": 2.0, "error_ratio": 3.0, "centred_error": 0.5,
                                                "reason": "centred error 0.5 > 0.02"}
    r8["correctness"]["failed_distributions"] = ["D3"]
    out["r8"] = r8
    return out


def _ordered(recs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    # deliberately out of order: ids and samples must come out sorted
    return [recs[k] for k in ("r10", "r5s1", "r8", "l2", "r1", "r5s0", "r7")]


# ---------------------------------------------------------------------------------------------------------------
# Export


def test_export_layout_ids_samples_and_level_filter():
    out = kb.export_eval_results(_ordered(_records()), level=1)
    assert list(out) == ["1", "5", "7", "8", "10"]  # numeric order, not "1", "10", "5", ...
    assert [e["sample_id"] for e in out["5"]] == [0, 1]
    assert all(len(out[k]) == 1 for k in ("1", "7", "8", "10"))
    assert set(out["5"][0]) == {"sample_id", "compiled", "correctness", "metadata", "runtime", "runtime_stats",
                                "ref_runtime", "ref_runtime_stats"}
    level2 = kb.export_eval_results(_ordered(_records()), level=2)
    assert list(level2) == ["3"]
    assert level2["3"][0]["metadata"]["kbv_problem"] == "level2/3_Matmul_Scale_Residual"
    assert kb.export_eval_results(_ordered(_records()), level=3) == {}


def test_export_correct_entry_field_by_field():
    recs = _records()
    entry = kb.export_eval_results(_ordered(recs), level=1)["5"][0]
    assert entry["sample_id"] == 0
    assert entry["compiled"] is True and entry["correctness"] is True
    assert entry["runtime"] == 0.14159999787807465  # candidate_verified median, not the mean 0.14394...
    assert entry["runtime_stats"] == {"mean": 0.14394032004475593, "std": 0.006130530308740714,
                                      "min": 0.13913600146770477, "max": 0.21484799683094025, "num_trials": 1000,
                                      "median": 0.14159999787807465, "statistic": "median",
                                      "hardware": "NVIDIA H200"}
    assert entry["ref_runtime"] == 0.14185599982738495  # reference_verified median
    assert entry["ref_runtime_stats"]["mean"] == 0.14446319991350173
    assert entry["ref_runtime_stats"]["num_trials"] == 1000
    meta = entry["metadata"]
    assert meta["hardware"] == "NVIDIA H200"
    assert meta["device"] == "cuda:0"
    assert meta["kbv_problem"] == "level1/5_ReLU"
    assert meta["kbv_candidate"] == recs["r5s0"]["candidate"]
    assert meta["kbv_verdict"] == "correct" and meta["kbv_standard_verdict"] == "correct"
    assert meta["kbv_flags"] == []
    assert meta["kbv_protocol"] == "verified"
    assert meta["kbv_speedup"] == recs["r5s0"]["speedup"]["verified"]
    assert meta["correctness_trials"] == "(12 / 12)"  # 4 distributions x 3 trials
    for key in ("compilation_error", "runtime_error", "correctness_issue", "error_during_performance"):
        assert key not in meta

    second = kb.export_eval_results(_ordered(recs), level=1)["5"][1]
    assert second["sample_id"] == 1 and second["runtime"] == 0.07


def test_export_standard_protocol_uses_standard_verdict_and_baseline():
    out = kb.export_eval_results(_ordered(_records()), level=1, protocol="standard")
    relu = out["5"][0]
    assert relu["runtime"] == 0.14185599982738495  # candidate_standard median
    assert relu["ref_runtime"] == 0.14203199744224548  # reference_standard median
    assert relu["runtime_stats"]["num_trials"] == 1000
    assert relu["metadata"]["kbv_protocol"] == "standard"
    assert "correctness_trials" not in relu["metadata"]  # kbv records D1's standard check per trial nowhere
    norm = out["8"][0]  # wrong on D3 only: KernelBench's check (D1) passes
    assert norm["correctness"] is True
    assert norm["runtime"] == 0.2675679922103882
    assert "correctness_issue" not in norm["metadata"]
    bn = out["10"][0]
    assert bn["runtime_stats"]["num_trials"] == 997


def test_export_failures_map_to_kernelbench_metadata():
    out = kb.export_eval_results(_ordered(_records()), level=1)
    comp = out["1"][0]
    assert comp["compiled"] is False and comp["correctness"] is False
    assert comp["runtime"] == -1.0 and comp["runtime_stats"] == {}
    assert comp["ref_runtime"] == -1.0 and comp["ref_runtime_stats"] == {}
    assert comp["metadata"]["compilation_error"] == "error: identifier 'tile' is undefined"
    assert comp["metadata"]["compilation_error_name"] == "build"
    assert comp["metadata"]["kbv_verdict"] == "compile_error"
    assert "runtime_error" not in comp["metadata"]

    crash = out["7"][0]
    assert crash["compiled"] is True and crash["correctness"] is False
    assert crash["runtime"] == -1.0
    assert crash["metadata"]["runtime_error"] == "CUDA error: an illegal memory access was encountered"
    assert crash["metadata"]["runtime_error_name"] == "crash"
    assert crash["metadata"]["runtime_error_traceback"] == "Traceback (most recent call last): ..."
    assert "compilation_error" not in crash["metadata"]

    wrong = out["8"][0]
    assert wrong["compiled"] is True and wrong["correctness"] is False
    assert wrong["runtime"] == 0.26767998933792114  # timed: correct under the standard protocol
    assert wrong["metadata"]["correctness_issue"] == "Output mismatch (D3: centred error 0.5 > 0.02)"
    assert wrong["metadata"]["correctness_issue_name"] == "correctness_issue"
    assert wrong["metadata"]["max_difference"] == ["0.500000"]
    assert wrong["metadata"]["failed_distributions"] == ["D3"]
    assert wrong["metadata"]["correctness_trials"] == "(9 / 12)"  # D3 failed on its first trial
    assert wrong["metadata"]["kbv_verdict"] == "incorrect"
    assert wrong["metadata"]["kbv_standard_verdict"] == "correct"


def test_export_rejected_and_performance_error():
    real = _real()
    rejected = copy.deepcopy(real["level1/6_GELU"])
    rejected.update(verdict="rejected", flags=["input_mutated"])
    late = copy.deepcopy(real["level1/16_Sigmoid"])
    late.update(verdict="runtime_error", error={"stage": "performance", "kind": "timeout",
                                                "message": "timed out after 60 s", "log_tail": "", "traceback": ""})
    verified = kb.export_eval_results([rejected, late], level=1)
    assert verified["6"][0]["correctness"] is False
    assert verified["6"][0]["metadata"]["correctness_issue"] == "Rejected: input_mutated"
    assert verified["6"][0]["metadata"]["correctness_issue_name"] == "rejected"
    assert verified["16"][0]["metadata"]["runtime_error"] == "timed out after 60 s"
    assert verified["16"][0]["metadata"]["runtime_error_name"] == "timeout"
    standard = kb.export_eval_results([rejected, late], level=1, protocol="standard")
    assert standard["6"][0]["correctness"] is True
    assert "correctness_issue" not in standard["6"][0]["metadata"]
    assert standard["16"][0]["correctness"] is True
    assert standard["16"][0]["metadata"]["error_during_performance"] == "timed out after 60 s"
    assert "runtime_error" not in standard["16"][0]["metadata"]


def test_export_incorrect_under_both_protocols_names_the_distributions_each_rests_on():
    wrong = copy.deepcopy(_real()["level1/9_RMSNorm"])
    wrong.update(verdict="incorrect", standard_verdict="incorrect", timing_ms={}, speedup={})
    dists = wrong["correctness"]["distributions"]
    dists["D1"] = {"status": "failed", "trials": 1, "max_abs_error": 0.2, "reason": "max abs error 0.2"}
    dists["D3"] = {"status": "failed", "trials": 2, "max_abs_error": 0.004, "reason": "centred error 0.3"}
    wrong["correctness"]["failed_distributions"] = ["D1", "D3"]
    verified = kb.export_eval_results([wrong], level=1)["9"][0]
    assert verified["metadata"]["failed_distributions"] == ["D1", "D3"]
    assert verified["metadata"]["max_difference"] == ["0.200000", "0.004000"]
    assert verified["metadata"]["correctness_issue"] == \
        "Output mismatch (D1: max abs error 0.2; D3: centred error 0.3)"
    assert verified["metadata"]["correctness_trials"] == "(7 / 12)"  # D1 0 + D2 3 + D3 1 + D4 3
    standard = kb.export_eval_results([wrong], level=1, protocol="standard")["9"][0]
    assert standard["correctness"] is False and standard["runtime"] == -1.0
    assert standard["metadata"]["failed_distributions"] == ["D1"]  # KernelBench's check sees D1 only
    assert standard["metadata"]["max_difference"] == ["0.200000"]
    assert standard["metadata"]["correctness_issue"] == "Output mismatch (D1: max abs error 0.2)"


def test_export_duplicates_and_bad_protocol():
    recs = _records()
    again = copy.deepcopy(recs["r5s0"])
    again["timing_ms"]["candidate_verified"]["median"] = 9.0
    with pytest.raises(ValueError, match="problem 5 sample 0"):
        kb.export_eval_results([recs["r5s0"], again], level=1)
    last = kb.export_eval_results([recs["r5s0"], again], level=1, on_duplicate="last")
    assert [e["runtime"] for e in last["5"]] == [9.0]
    with pytest.raises(ValueError, match="protocol"):
        kb.export_eval_results([recs["r5s0"]], level=1, protocol="both")


# ---------------------------------------------------------------------------------------------------------------
# pass@k


@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 1, 0.4), (5, 2, 5, 1.0), (5, 2, 3, 1 - 1 / 10), (10, 3, 5, 1 - 21 / 252), (10, 3, 1, 0.3),
    (10, 0, 1, 0.0), (10, 0, 10, 0.0), (10, 10, 10, 1.0), (1, 1, 1, 1.0), (1, 0, 1, 0.0),
])
def test_pass_at_k_values(n, c, k, expected):
    assert kb.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_kernelbench_product_form():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                product = 1.0 if n - c < k else 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))
                assert kb.pass_at_k(n, c, k) == pytest.approx(product, abs=1e-12), (n, c, k)


@pytest.mark.parametrize("n, c, k", [(5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_rejects_impossible_arguments(n, c, k):
    with pytest.raises(ValueError):
        kb.pass_at_k(n, c, k)


def _sample(pid: int, sample: int, verdict: str, standard: str | None = None) -> dict[str, Any]:
    return {"problem": f"level1/{pid}_P", "level": 1, "problem_id": pid, "sample": sample, "verdict": verdict,
            "standard_verdict": standard or verdict, "flags": [], "timing_ms": {}, "speedup": {}, "env": {}}


def _pass_at_k_records() -> list[dict[str, Any]]:
    # problem 2: 5 samples, 2 correct (and a third correct under the standard protocol only)
    # problem 10: 10 samples, 3 correct; problem 1: 1 sample, a compile error
    recs = [_sample(2, s, v, sv) for s, (v, sv) in enumerate([("correct", None), ("incorrect", None),
                                                            ("correct", None), ("incorrect", "correct"),
                                                            ("runtime_error", None)])]
    recs += [_sample(10, s, "correct" if s in (1, 4, 8) else "incorrect") for s in range(10)]
    recs += [_sample(1, 0, "compile_error")]
    recs += [dict(_sample(3, 0, "correct"), level=2)]  # another level: not counted
    return recs


def test_export_pass_at_k_layout_and_values():
    result = kb.export_pass_at_k(_pass_at_k_records(), level=1)
    assert list(result["problems"]) == ["1", "2", "10"]
    assert result["problems"]["1"] == {"total_samples": 1, "correct_samples": 0, "pass@1": 0.0}
    p2 = result["problems"]["2"]
    assert (p2["total_samples"], p2["correct_samples"]) == (5, 2)
    assert p2["pass@1"] == pytest.approx(0.4) and p2["pass@5"] == pytest.approx(1.0)
    assert "pass@10" not in p2  # k > n: undefined, left out
    p10 = result["problems"]["10"]
    assert (p10["total_samples"], p10["correct_samples"]) == (10, 3)
    assert p10["pass@1"] == pytest.approx(0.3)
    assert p10["pass@5"] == pytest.approx(1 - 21 / 252)
    assert p10["pass@10"] == pytest.approx(1.0)
    assert result["averages"]["avg_pass@1"] == pytest.approx((0.0 + 0.4 + 0.3) / 3)
    assert result["averages"]["avg_pass@5"] == pytest.approx((1.0 + 1 - 21 / 252) / 2)
    assert result["averages"]["avg_pass@10"] == pytest.approx(1.0)
    meta = result["metadata"]
    assert meta["total_problems"] == 3 and meta["problems_with_samples"] == 3
    assert meta["total_evaluated_samples"] == 16 and meta["total_correct_samples"] == 5
    assert (meta["pass@1_count"], meta["pass@5_count"], meta["pass@10_count"]) == (3, 2, 1)
    assert meta["level"] == 1 and meta["protocol"] == "verified"


def test_export_pass_at_k_standard_protocol_counts_standard_verdicts():
    result = kb.export_pass_at_k(_pass_at_k_records(), level=1, protocol="standard")
    assert result["problems"]["2"]["correct_samples"] == 3
    assert result["problems"]["2"]["pass@1"] == pytest.approx(0.6)
    assert result["metadata"]["total_correct_samples"] == 6


# ---------------------------------------------------------------------------------------------------------------
# Import

HW = "NVIDIA H100 80GB HBM3"
# Written by hand from KernelBench's documented layout (scripts/eval_from_generations.py, src/eval.py): a build
# failure, a kernel that raised, a wrong and a right sample of one problem (the right one timed with its reference),
# and a right one with no reference time. Problem ids as strings, deliberately not in order.
FIXTURE: dict[str, Any] = {
    "12": [
        {"sample_id": 1, "compiled": True, "correctness": True,
         "metadata": {"hardware": HW, "device": "cuda:0", "correctness_trials": "(5 / 5)"},
         "runtime": 0.5, "runtime_stats": {"mean": 0.5, "std": 0.01, "min": 0.48, "max": 0.6, "num_trials": 100,
                                           "hardware": HW, "device": "cuda:0"},
         "ref_runtime": 1.0, "ref_runtime_stats": {"mean": 1.0, "std": 0.02, "min": 0.95, "max": 1.1,
                                                   "num_trials": 100, "hardware": HW, "device": "cuda:0"}},
        {"sample_id": 0, "compiled": True, "correctness": False,
         "metadata": {"hardware": HW, "device": "cuda:0", "max_difference": ["0.125000", "0.250000"],
                      "avg_difference": ["0.010000", "0.020000"], "correctness_issue": "Output mismatch",
                      "correctness_trials": "(3 / 5)"},
         "runtime": -1.0, "runtime_stats": {}},
    ],
    "3": [
        {"sample_id": 0, "compiled": False, "correctness": False,
         "metadata": {"hardware": HW, "device": "cuda:0", "compilation_error_name": "builtins.RuntimeError",
                      "compilation_error": "Error building extension 'matmul'"},
         "runtime": -1.0, "runtime_stats": {}},
    ],
    "42": [
        {"sample_id": 0, "compiled": True, "correctness": True,
         "metadata": {"hardware": HW, "device": "cuda:1", "correctness_trials": "(5 / 5)"},
         "runtime": 2.0, "runtime_stats": {"mean": 2.0, "std": 0.1, "min": 1.9, "max": 2.4, "num_trials": 100}},
    ],
    "7": [
        {"sample_id": 0, "compiled": True, "correctness": False,
         "metadata": {"hardware": HW, "device": "cuda:0",
                      "runtime_error": "CUDA error: an illegal memory access was encountered",
                      "runtime_error_name": "torch.AcceleratorError",
                      "runtime_error_traceback": "Traceback (most recent call last): ..."},
         "runtime": -1.0, "runtime_stats": {}},
    ],
}
ORDER = [(3, 0), (7, 0), (12, 0), (12, 1), (42, 0)]


def _imported(problems=None) -> dict[tuple[int, int], dict[str, Any]]:
    records = kb.import_eval_results(copy.deepcopy(FIXTURE), level=1, problems=problems, source="runs/kb-run")
    assert [(r["problem_id"], r["sample"]) for r in records] == ORDER
    return {(r["problem_id"], r["sample"]): r for r in records}


def test_import_verdicts_and_schema():
    recs = _imported()
    for r in recs.values():
        assert set(r) == RECORD_FIELDS - {"auth"}  # imported: unauthenticated (kbv.attest)
        assert r["schema"] == SCHEMA
        assert r["level"] == 1
        assert r["flags"] == [kb.IMPORTED_FLAG]
        assert r["standard_verdict"] == r["verdict"]
        assert r["env"]["source"] == "kernelbench" and r["env"]["hardware"] == HW
        assert r["speedup"]["verified"] is None
    assert {k: r["verdict"] for k, r in recs.items()} == {
        (3, 0): "compile_error", (7, 0): "runtime_error", (12, 0): "incorrect", (12, 1): "correct",
        (42, 0): "correct"}
    assert {k: r["stage"] for k, r in recs.items()} == {
        (3, 0): "compile", (7, 0): "correctness", (12, 0): "correctness", (12, 1): "done", (42, 0): "done"}


def test_import_errors_correctness_and_timing():
    recs = _imported()
    comp = recs[(3, 0)]
    assert comp["error"] == {"stage": "compile", "kind": "builtins.RuntimeError",
                             "message": "Error building extension 'matmul'", "log_tail": "", "traceback": ""}
    assert comp["timing_ms"] == {} and comp["speedup"]["standard"] is None and comp["correctness"] == {}
    crash = recs[(7, 0)]
    assert crash["error"]["stage"] == "correctness"
    assert crash["error"]["kind"] == "torch.AcceleratorError"
    assert crash["error"]["message"] == "CUDA error: an illegal memory access was encountered"
    assert crash["error"]["traceback"] == "Traceback (most recent call last): ..."
    wrong = recs[(12, 0)]
    assert wrong["error"] is None
    assert wrong["correctness"]["failed_distributions"] == ["D1"]
    assert wrong["correctness"]["distributions"]["D1"] == {"status": "failed", "trials": 5, "max_abs_error": 0.25,
                                                           "reason": "Output mismatch"}
    assert wrong["timing_ms"] == {} and wrong["speedup"]["standard"] is None

    right = recs[(12, 1)]
    assert right["error"] is None
    assert right["correctness"]["distributions"]["D1"] == {"status": "passed", "trials": 5}
    assert right["correctness"]["failed_distributions"] == []
    assert right["speedup"]["standard"] == {"value": 2.0, "ci_low": None, "ci_high": None, "confidence": None}
    assert right["timing_ms"]["candidate_standard"] == {"median": None, "mean": 0.5, "std": 0.01, "min": 0.48,
                                                        "max": 0.6, "n": 100, "statistic": "mean"}
    assert right["timing_ms"]["reference_standard"]["mean"] == 1.0
    assert "candidate_verified" not in right["timing_ms"]

    unref = recs[(42, 0)]
    assert unref["speedup"]["standard"] is None  # no reference time: no speedup
    assert unref["timing_ms"]["candidate_standard"]["mean"] == 2.0
    assert "reference_standard" not in unref["timing_ms"]
    assert unref["env"]["device"] == {"name": HW, "id": "cuda:1"}


def test_import_problem_keys_candidates_and_hashes():
    plain = _imported()
    assert [plain[k]["problem"] for k in ORDER] == ["level1/3", "level1/7", "level1/12", "level1/12", "level1/42"]
    assert all(r["problem_sha256"] == "" for r in plain.values())
    assert plain[(12, 1)]["candidate"] == "runs/kb-run#12/1"
    assert plain[(12, 1)]["candidate_sha256"] == hashlib.sha256(
        json.dumps(FIXTURE["12"][0], sort_keys=True).encode()).hexdigest()
    assert len({r["candidate_sha256"] for r in plain.values()}) == len(ORDER)

    problems = discover(builtin_suite_dir())
    named = _imported(problems)
    assert [named[k]["problem"] for k in ORDER] == [
        "level1/3_Batched_Matmul", "level1/7_Softmax", "level1/12_MaxPool2d", "level1/12_MaxPool2d", "level1/42"]
    by_key = {p.key: p for p in problems}
    assert named[(7, 0)]["problem_sha256"] == by_key["level1/7_Softmax"].source_sha256
    assert named[(42, 0)]["problem_sha256"] == ""
    level2 = kb.import_eval_results({"3": FIXTURE["3"]}, level=2, problems=problems)
    assert level2[0]["problem"] == "level2/3_Matmul_Scale_Residual" and level2[0]["level"] == 2


def test_imported_records_are_readable_and_work_with_metrics(tmp_path):
    records = kb.import_eval_results(copy.deepcopy(FIXTURE), level=1, source="kb")
    path = tmp_path / "imported.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    back = list(read_records(path))
    assert back == records
    assert len(recorded_keys(path)) == len(ORDER)
    # kbv.report.metrics takes one sample per problem (sample 0): 3 compile error, 7 crash, 12 wrong, 42 right but untimed
    summary = metrics.summarize_group("level 1", back)
    assert summary.n == 4
    assert summary.compiled == pytest.approx(3 / 4)
    assert summary.correct_standard == pytest.approx(1 / 4)
    assert summary.correct_verified == pytest.approx(1 / 4)
    assert summary.fast_p_standard[1.0] == 0.0  # 42 has no reference time, so no speedup
    # pass@k over all samples: problem 12 has 1 of 2 right; the same figure as KernelBench's layout gives
    assert summary.pass_at_k == {1: pytest.approx((0 + 0 + 0.5 + 1) / 4)}
    assert kb.pass_at_k_results(FIXTURE)["averages"] == {"avg_pass@1": pytest.approx(0.375)}
    # with the right sample of problem 12 as its only one: 12 is 2.0x faster under the standard baseline
    single = [r for r in back if (r["problem_id"], r["sample"]) != (12, 0)]
    assert metrics.fast_p(single, 1.0, "standard") == pytest.approx(1 / 4)
    assert metrics.fast_p(single, 2.0, "standard") == 0.0  # 2.0 is not faster than 2.0
    assert metrics.fast_p(single, 0.0, "verified") == 0.0  # nothing timed under the verified baseline
    assert metrics.geomean_speedup(single, "standard") == pytest.approx(2.0)


def test_pass_at_k_agrees_with_kbv_metrics():
    for n in range(1, 11):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert kb.pass_at_k(n, c, k) == pytest.approx(metrics.pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_import_accepts_older_single_entry_layout_and_rejects_others():
    older = {"5": FIXTURE["42"][0]}  # one entry per problem, not a list
    (rec,) = kb.import_eval_results(older, level=1)
    assert (rec["problem_id"], rec["sample"], rec["verdict"]) == (5, 0, "correct")
    no_id = {"5": [{k: v for k, v in FIXTURE["42"][0].items() if k != "sample_id"}] * 2}
    assert [r["sample"] for r in kb.import_eval_results(no_id, level=1)] == [0, 1]  # position stands in
    with pytest.raises(ValueError, match="problem id"):
        kb.import_eval_results({"relu": []}, level=1)
    with pytest.raises(ValueError, match="list of sample entries"):
        kb.import_eval_results({"5": [1, 2]}, level=1)
    with pytest.raises(ValueError, match="pass_at_k"):
        kb.import_eval_results({"averages": {}, "metadata": {}, "problems": {}}, level=1)


# ---------------------------------------------------------------------------------------------------------------
# Round trips and files


def test_kbv_to_kernelbench_to_kbv_round_trip():
    records = _ordered(_records())
    exported = kb.export_eval_results(records, level=1)
    imported = kb.import_eval_results(exported, level=1)
    originals = {(r["problem_id"], r["sample"]): r for r in records if r["level"] == 1}
    assert [(r["problem_id"], r["sample"]) for r in imported] == sorted(originals)
    for r in imported:
        original = originals[(r["problem_id"], r["sample"])]
        entry = next(e for e in exported[str(r["problem_id"])] if e["sample_id"] == r["sample"])
        assert (r["verdict"] != "compile_error") == (original["verdict"] != "compile_error")
        assert (r["verdict"] == "correct") == (original["verdict"] == "correct")
        assert r["verdict"] == original["verdict"]  # correct, incorrect, compile_error, runtime_error survive
        cand = r["timing_ms"].get("candidate_standard")
        assert (cand["mean"] if cand else -1.0) == entry["runtime"]
    # and back out again: the same ids, samples, compiled, correctness and runtimes
    again = kb.export_eval_results(imported, level=1, protocol="standard")
    assert list(again) == list(exported)
    for pid in exported:
        assert [(e["sample_id"], e["compiled"], e["correctness"], e["runtime"], e["ref_runtime"])
                for e in again[pid]] == \
               [(e["sample_id"], e["compiled"], e["correctness"], e["runtime"], e["ref_runtime"])
                for e in exported[pid]]
    assert again["5"][0]["runtime_stats"]["statistic"] == "mean"
    assert exported["5"][0]["runtime_stats"]["statistic"] == "median"


def test_kernelbench_to_kbv_to_kernelbench_round_trip():
    imported = kb.import_eval_results(copy.deepcopy(FIXTURE), level=1)
    exported = kb.export_eval_results(imported, level=1, protocol="standard")
    assert list(exported) == ["3", "7", "12", "42"]
    for pid, entries in FIXTURE.items():
        original = sorted(entries, key=lambda e: e["sample_id"])
        assert [(e["sample_id"], e["compiled"], e["correctness"], e["runtime"], e.get("ref_runtime", -1.0))
                for e in exported[pid]] == \
               [(e["sample_id"], e["compiled"], e["correctness"], e["runtime"], e.get("ref_runtime", -1.0))
                for e in original]
    assert exported["12"][1]["runtime_stats"]["num_trials"] == 100
    assert exported["12"][1]["metadata"]["hardware"] == HW
    assert exported["7"][0]["metadata"]["runtime_error"] == "CUDA error: an illegal memory access was encountered"
    assert exported["3"][0]["metadata"]["compilation_error"] == "Error building extension 'matmul'"
    # KernelBench's pass@k over the fixture and over the round trip agree
    assert kb.pass_at_k_results(exported) == kb.pass_at_k_results(FIXTURE)


def test_write_and_load_files(tmp_path):
    exported = kb.export_eval_results(_ordered(_records()), level=1)
    path = tmp_path / "runs" / "kbv" / "eval_results.json"
    kb.write_json(exported, path)
    assert json.loads(path.read_text()) == exported
    assert list(json.loads(path.read_text())) == ["1", "5", "7", "8", "10"]  # order kept in the file
    assert kb.load_eval_results(path) == exported
    assert [p.name for p in path.parent.iterdir()] == ["eval_results.json"]  # no temporary left behind
    records = kb.import_eval_results(kb.load_eval_results(path), level=1, source=str(path))
    assert records[0]["candidate"] == f"{path}#1/0"
    pak = tmp_path / "pass_at_k_results.json"
    kb.write_json(kb.export_pass_at_k(_ordered(_records()), level=1), pak, indent=2)
    with pytest.raises(ValueError, match="pass_at_k"):
        kb.load_eval_results(pak)
    bad = tmp_path / "list.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        kb.load_eval_results(bad)
