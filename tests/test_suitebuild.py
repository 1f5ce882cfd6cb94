"""Trace -> weighted suite (kbv.tracesuite.build, kbv.tracesuite.templates) and the weighted aggregate (kbv.tracesuite.weights)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from kbv.tracesuite.templates import Unreproducible, module_layout, op_layout, render_problem
from kbv.problems import load_problem
from kbv.tracesuite.build import TraceError, build_suite, import_source
from kbv.tracesuite.weights import (WeightsError, aggregate, level_sums, load_heldout, load_provenance, load_weights)
from kbv.worker.loading import import_file


@pytest.fixture(autouse=True)
def _wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read whole table rows: a wide terminal (kbv's commands follow COLUMNS, else 80)."""
    monkeypatch.setenv("COLUMNS", "200")

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "fixtures" / "traces" / "acme_tinyllama_run42.json"
SECRETS = ("acme", "secret-recipe", "acme_tinyllama_run42", "tinyllama", "FakeGPU", "secretkernel", "2026-12-01")
# model families kbv ships recipes for, or that a template might cite: never in a problem file
MODEL_NAMES = ("llama", "mixtral", "mistral", "qwen", "vit_", "gpt", "h200", "nvidia")


def T(shape: list[int], dtype: str = "bfloat16", stride: list[int] | None = None) -> dict[str, Any]:
    return {"tensor": {"shape": shape, "dtype": dtype, "stride": stride}}


def _trace(data: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("suite")
    return out, build_suite([TRACE], out, coverage=1.0, held_out=1)


def _run(module: Any, overrides: dict[str, Any]) -> tuple[list[Any], Any]:
    for name, value in overrides.items():
        setattr(module, name, value)
    torch.manual_seed(0)
    inputs = module.get_inputs()
    with torch.no_grad():
        out = module.Model(*module.get_init_inputs())(*inputs)
    return inputs, out


# ---------------------------------------------------------------------------------------------------------------
# The built suite


def test_every_shape_of_every_problem_runs_on_the_cpu(built) -> None:
    out, result = built
    heldout = load_heldout(out)
    files = sorted(out.glob("level*/*.py"))
    assert len(files) == len(result.problems) == 16
    for n, path in enumerate(files):
        problem = load_problem(path)
        module = import_file(path, f"kbv_test_suite_{n}")
        shapes = module.KBV_SHAPES + heldout.get(problem.key, [])
        assert module.KBV_SHAPES[0] == {k: getattr(module, k) for k in module.KBV_SHAPES[0]}, path.name
        for shape in shapes:
            inputs, outputs = _run(module, shape)
            for name, value in shape.items():  # tensors come out with the recorded shapes and strides
                if name.endswith("_shape"):
                    slot = [i for i, s in enumerate(_tensor_slots(shape)) if s == name[:-6]][0]
                    assert list(inputs[slot].shape) == value, (path.name, name)
                    stride = shape[name[:-6] + "_stride"]
                    if stride is not None:
                        assert list(inputs[slot].stride()) == stride, (path.name, name)
            items = list(outputs) if isinstance(outputs, tuple) else [outputs]
            assert items and all(isinstance(o, torch.Tensor) for o in items), path.name
            assert not any(o.is_floating_point() and o.isnan().any() for o in items), (path.name, shape)


def _tensor_slots(shape: dict[str, Any]) -> list[str]:
    return [k[:-6] for k in shape if k.endswith("_shape")]


def test_selection_skips_and_reports_what_cannot_be_reproduced(built) -> None:
    out, result = built
    prov = load_provenance(out)
    reasons = {(s["phase"], s["entry"]): s["reason"] for s in prov["skipped"]}
    assert "no arguments recorded" in reasons[("prefill", "aten::mm.default")]
    assert "no arguments recorded" in reasons[("decode", "aten::mm.default")]
    assert "not an aten operator" in reasons[("prefill", "mylib::fused_thing.default")]
    assert "integer tensor" in reasons[("prefill", "aten::index_put_.default")]
    assert "view" in reasons[("prefill", "aten::view.default")]
    assert "unknown module kind" in reasons[("prefill", "module:conv_block")]
    levels = result.weights["levels"]
    # the skipped time stays in the denominator: 992 us of operator time in prefill, 760 reproducible
    assert levels["prefill"]["level1"]["recorded_us"] == pytest.approx(992.0)
    assert levels["prefill"]["level1"]["raw_sum"] == pytest.approx(760 / 992)
    assert levels["prefill"]["level1"]["unreproducible_us"] == pytest.approx(232.0)
    assert levels["decode"]["level2"]["raw_sum"] == pytest.approx(1.0)
    assert result.weights["estimate"] is True and result.weights["time_source"] == "cpu"


def test_weights_sum_to_one_per_phase_and_level(built) -> None:
    out, result = built
    weights = load_weights(out)
    sums = level_sums(weights)
    assert set(sums) == {"prefill", "decode"}
    for phase, levels in sums.items():
        assert set(levels) == {"level1", "level2"}
        for level, total in levels.items():
            assert total == pytest.approx(1.0), (phase, level)
            raw = sum(e["raw_weight"] for k, e in weights["phases"][phase].items() if k.startswith(level + "/"))
            assert raw == pytest.approx(weights["levels"][phase][level]["raw_sum"])
    # the matmul problem: prefill shapes 300 + 200 us of 760 selected operator time
    mm = weights["phases"]["prefill"]["level1/1_Mm_bf16"]
    assert mm["weight"] == pytest.approx(500 / 760)
    assert sum(s["time_us"] for s in mm["shapes"]) == pytest.approx(mm["time_us"])


def test_identical_shapes_merge_across_phases_and_held_out_shapes_leave_the_file(built) -> None:
    out, result = built
    prov = load_provenance(out)["problems"]["level1/1_Mm_bf16"]
    shape0 = prov["shapes"][0]
    assert shape0["values"]["in0_shape"] == [8, 32] and not shape0["held_out"]
    assert sorted(o["phase"] for o in shape0["origins"]) == ["decode", "prefill"]
    module = import_source((out / "level1" / "1_Mm_bf16.py").read_text(), "mm")
    held = load_heldout(out)["level1/1_Mm_bf16"]
    # four shapes by time 320, 200, 150, 90: the second hottest is held out, never the hottest
    assert held == [{"in0_shape": [8, 64], "in0_stride": None, "in1_shape": [64, 32], "in1_stride": [1, 64]}]
    assert held[0] not in module.KBV_SHAPES and len(module.KBV_SHAPES) == 3
    assert [s["held_out"] for s in prov["shapes"]] == [False, False, False, True]
    decode = result.weights["phases"]["decode"]["level1/1_Mm_bf16"]
    assert {s["index"] for s in decode["shapes"]} == {0, 1, 2}  # 1 and 2: the decode-only shapes


def test_release_contract_problem_files_carry_no_provenance(built) -> None:
    out, _ = built
    for path in out.glob("level*/*.py"):
        text = path.read_text()
        for secret in SECRETS + MODEL_NAMES:
            assert secret.lower() not in text.lower(), (path.name, secret)
    provenance = (out / "evaluator" / "provenance.json").read_text()
    assert "acme_tinyllama_run42.json" in provenance and "acme-secret-recipe" in provenance


def test_two_traces_add_up(tmp_path: Path) -> None:
    data = json.loads(TRACE.read_text())
    other = copy.deepcopy(data)
    other["recipe"] = "another"
    second = _trace(other, tmp_path / "second.json")
    one = build_suite([TRACE], tmp_path / "one", coverage=1.0)
    two = build_suite([TRACE, second], tmp_path / "two", coverage=1.0)
    assert [p.key for p in one.problems] == [p.key for p in two.problems]
    for phase, entries in one.weights["phases"].items():
        for key, entry in entries.items():
            doubled = two.weights["phases"][phase][key]
            assert doubled["weight"] == pytest.approx(entry["weight"])  # every time doubled: same shares
            assert doubled["time_us"] == pytest.approx(2 * entry["time_us"])
            assert doubled["calls"] == 2 * entry["calls"]
    origins = two.provenance["problems"]["level1/1_Mm_bf16"]["shapes"][0]["origins"]
    assert sorted((o["trace"], o["phase"]) for o in origins) == sorted(
        (t, ph) for t in (TRACE.name, "second.json") for ph in ("prefill", "decode"))


def test_coverage_takes_the_hottest_entries_until_reached(tmp_path: Path) -> None:
    result = build_suite([TRACE], tmp_path / "half", coverage=0.5)
    keys = [p.key for p in result.problems]
    # operators: prefill 300 + 200 >= 496, decode 150 + 90 >= 170 -> only matmul shapes
    assert keys == ["level1/1_Mm_bf16", "level2/1_GatedMLP_bf16", "level2/2_MoE_bf16"]
    mm = result.problems[0]
    assert len(mm.shapes) == 4
    # the [8, 32] x [32, 64] shape was cold in decode (20 us) but the problem covers it: its time joins
    assert mm.shapes[0].time("decode") == pytest.approx(20.0) and mm.shapes[0].time() == pytest.approx(320.0)
    levels = result.weights["levels"]
    assert levels["prefill"]["level1"]["raw_sum"] == pytest.approx(500 / 992)
    assert levels["decode"]["level1"]["raw_sum"] == pytest.approx(260 / 340)
    assert levels["prefill"]["level2"]["raw_sum"] == pytest.approx(500 / 825)
    assert levels["prefill"]["level1"]["cold_entries"] == 11
    assert levels["decode"]["level1"]["cold_entries"] == 3  # 4 after the cut, one joined the kept [8, 32] shape
    assert levels["decode"]["level1"]["cold_us"] == pytest.approx(40.0 + 30.0 + 10.0)
    for levels_of_phase in level_sums(result.weights).values():
        assert all(v == pytest.approx(1.0) for v in levels_of_phase.values())


def test_max_shapes_caps_each_problem(tmp_path: Path) -> None:
    result = build_suite([TRACE], tmp_path / "cap", coverage=1.0, max_shapes=2, held_out=1)
    mm = next(p for p in result.problems if p.key == "level1/1_Mm_bf16")
    assert [s.values["in0_shape"] for s in mm.shapes] == [[8, 32]]
    assert [s.values["in0_shape"] for s in mm.held_out] == [[8, 64]]
    capped = [s for s in result.provenance["skipped"] if "max-shapes" in s["reason"]]
    assert sorted(s["time_us"] for s in capped) == [90.0, 150.0]
    assert result.weights["levels"]["decode"]["level1"]["dropped_us"] == pytest.approx(240.0)


def test_a_shape_that_does_not_run_is_dropped(tmp_path: Path) -> None:
    data = json.loads(TRACE.read_text())
    bad = {"op": "aten::mm", "overload": "default", "args": [T([8, 32]), T([16, 64])], "kwargs": {},
           "inputs": [], "calls": 1, "time_us": 1000.0}
    data["phases"]["prefill"]["ops"].append(bad)
    result = build_suite([_trace(data, tmp_path / "t.json")], tmp_path / "s", coverage=1.0)
    failed = [s for s in result.provenance["skipped"] if "failed" in s["reason"]]
    assert len(failed) == 1 and failed[0]["time_us"] == 1000.0
    mm = next(p for p in result.problems if p.key == "level1/1_Mm_bf16")
    assert [16, 64] not in [s.values["in1_shape"] for s in mm.shapes]
    assert result.weights["levels"]["prefill"]["level1"]["dropped_us"] == pytest.approx(1000.0)


def test_traces_with_different_time_sources_are_refused(tmp_path: Path) -> None:
    data = json.loads(TRACE.read_text())
    data["time_source"] = "device"
    with pytest.raises(TraceError, match="time sources"):
        build_suite([TRACE, _trace(data, tmp_path / "gpu.json")], tmp_path / "s")
    bad = _trace({"schema": "something/1"}, tmp_path / "bad.json")
    with pytest.raises(TraceError, match="schema"):
        build_suite([bad], tmp_path / "s2")


def test_an_existing_suite_is_kept_without_force(tmp_path: Path) -> None:
    build_suite([TRACE], tmp_path, coverage=0.5)
    with pytest.raises(FileExistsError):
        build_suite([TRACE], tmp_path, coverage=0.5)
    build_suite([TRACE], tmp_path, coverage=1.0, force=True)
    assert len(list(tmp_path.glob("level1/*.py"))) == 8


# ---------------------------------------------------------------------------------------------------------------
# Layouts and templates


def test_integers_are_shapes_and_everything_else_is_signature() -> None:
    a = op_layout("aten::_softmax", "default", [T([4, 8]), -1, False], {})
    b = op_layout("aten::_softmax", "default", [T([2, 3]), 1, False], {})
    c = op_layout("aten::_softmax", "default", [T([2, 3], "float32"), 1, False], {})
    assert a.signature == b.signature != c.signature
    assert a.values == {"in0_shape": [4, 8], "in0_stride": None, "arg1": -1}
    ln = [op_layout("aten::native_layer_norm", "default", [T([4, 8]), [8], T([8]), T([8]), eps], {})
          for eps in (1e-5, 1e-6)]
    assert ln[0].signature != ln[1].signature  # a float argument is part of the signature
    assert "out[0]" in ln[0].model_source  # mean and rstd (saved for backward) are dropped
    rsqrt = op_layout("aten::rsqrt", "default", [T([4], "float32")], {})
    assert rsqrt.skip == {d: "rsqrt is defined for positive inputs only" for d in ("D4", "D5", "D6")}
    emb = op_layout("aten::embedding", "default", [T([100, 8]), T([2, 5], "int64")], {})
    assert emb.inputs[1].fill == "index" and emb.inputs[1].bound == "in0_shape[0]"
    inplace = op_layout("aten::add_", "Tensor", [T([4]), T([4])], {"alpha": 2})
    assert "in0 = in0.clone()" in inplace.model_source and inplace.values["kw_alpha"] == 2
    op_layout("aten::gather", "default", [T([4]), 0, T([2], "int64")], {})  # an index read: drawn in range
    add = op_layout("aten::index_add_", "default", [T([10, 4]), 0, T([6], "int64"), T([6, 4])], {})
    assert (add.inputs[1].fill, add.inputs[1].bound) == ("index", "in0_shape[arg1]")  # accumulates: safe
    cast = op_layout("aten::_to_copy", "default", [T([3, 4])],
                     {"dtype": {"dtype": "float32"}, "device": {"device": "cuda"}})
    assert "dtype=torch.float32, device=in0.device" in cast.model_source
    sdpa = "aten::_scaled_dot_product_flash_attention_for_cpu"
    op_layout(sdpa, "default", [T([1, 2, 4, 8]), T([1, 2, 4, 8]), T([1, 2, 4, 8]), 0.0, True], {})
    with pytest.raises(Unreproducible, match="random"):
        op_layout(sdpa, "default", [T([1, 2, 4, 8]), T([1, 2, 4, 8]), T([1, 2, 4, 8]), 0.1, True], {})
    with pytest.raises(Unreproducible, match="view"):
        op_layout("aten::_unsafe_view", "default", [T([4, 2]), [8]], {})
    for layout in (add, cast):
        module = import_source(render_problem(layout, [layout.values]), "layout")
        _, out = _run(module, layout.values)
        assert out.dtype == (torch.float32 if layout is cast else torch.bfloat16)
    for call, reason in [(("aten::scatter", "src", [T([4]), 0, T([2], "int64"), T([2])]), "integer tensor"),
                         (("aten::bernoulli", "default", [T([4])]), "random"),
                         (("aten::mm", "out", [T([2, 2]), T([2, 2])]), "out="),
                         (("aten::zeros", "default", [[2, 2]]), "creation"),
                         (("aten::no_such_op", "default", [T([2])]), "does not exist")]:
        with pytest.raises(Unreproducible, match=reason):
            op_layout(*call, {})


def _module(kind: str, params: dict[str, Any], inputs: list[Any], extra: dict[str, Any] | None = None) -> Any:
    layout = module_layout(kind, params, inputs, extra)
    module = import_source(render_problem(layout, [layout.values]), kind)
    module.DTYPE = torch.float32
    torch.manual_seed(0)
    return module.Model(*module.get_init_inputs())


def test_attention_template_aligns_the_causal_mask_to_the_last_key() -> None:
    model = _module("attention", {"n_heads": 4, "n_kv_heads": 2, "head_dim": 8, "causal": True},
                    [T([1, 4, 3, 8]), T([1, 2, 9, 8]), T([1, 2, 9, 8])])
    q, k, v = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 9, 8), torch.randn(1, 2, 9, 8)
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    scores = q @ kk.transpose(-1, -2) / math.sqrt(8)
    allowed = torch.arange(9)[None, :] <= torch.arange(3)[:, None] + 6  # query i sees keys up to 6 + i
    expected = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ vv
    torch.testing.assert_close(model(q, k, v), expected, rtol=1e-5, atol=1e-5)
    q8 = torch.randn(1, 4, 9, 8)  # prefill from an empty cache: ordinary causal attention
    torch.testing.assert_close(model(q8, k, v), F.scaled_dot_product_attention(q8, kk, vv, is_causal=True))


def test_rotary_template_depends_only_on_relative_positions() -> None:
    model = _module("rotary", {"head_dim": 8, "theta": 10000.0}, [T([1, 5, 2, 8]), T([1, 5, 1, 8])], {"start_pos": 0})
    q, k = torch.randn(1, 5, 2, 8), torch.randn(1, 5, 1, 8)
    q0, k0 = model(q, k, 0)
    q7, k7 = model(q, k, 7)
    assert not torch.allclose(q0, q7)
    torch.testing.assert_close(q0[:, 0], q[:, 0])  # position 0 is not rotated
    scores = lambda a, b: torch.einsum("bshd,btgd->bhst", a, b)  # noqa: E731
    torch.testing.assert_close(scores(q0, k0), scores(q7, k7), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(q7.norm(dim=-1), q.norm(dim=-1), rtol=1e-4, atol=1e-4)


def test_moe_template_matches_a_per_token_reference() -> None:
    params = {"hidden_size": 16, "intermediate_size": 8, "n_experts": 4, "top_k": 2, "norm_topk_prob": True}
    model = _module("moe", params, [T([6, 16])])
    x = torch.randn(6, 16)
    expected = torch.zeros_like(x)
    for t in range(6):
        probs = torch.softmax(model.gate(x[t]), -1)
        w, idx = probs.topk(2)
        w = w / w.sum()
        for weight, e in zip(w, idx):
            h = F.silu(model.w_gate[e] @ x[t]) * (model.w_up[e] @ x[t])
            expected[t] += weight * (model.w_down[e] @ h)
    torch.testing.assert_close(model(x), expected, rtol=1e-5, atol=1e-5)


def test_norm_and_mlp_templates_compute_their_formulas() -> None:
    x = torch.randn(3, 16)
    rms = _module("rmsnorm", {"hidden_size": 16, "eps": 1e-6}, [T([3, 16])])
    torch.testing.assert_close(rms(x), rms.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    mlp = _module("mlp", {"hidden_size": 16, "intermediate_size": 32, "activation": "gelu"}, [T([3, 16])])
    torch.testing.assert_close(mlp(x), mlp.fc2(F.gelu(mlp.fc1(x))))
    with pytest.raises(Unreproducible, match="activation"):
        module_layout("mlp", {"hidden_size": 16, "intermediate_size": 32, "activation": "relu6"}, [T([3, 16])], {})
    with pytest.raises(Unreproducible, match="missing"):
        module_layout("rmsnorm", {"hidden_size": 16}, [T([3, 16])], {})


# ---------------------------------------------------------------------------------------------------------------
# The weighted aggregate


WEIGHTS = {"schema": "kbv.weights/1", "phase_time_us": {"prefill": 300.0, "decode": 100.0},
           "phases": {"prefill": {"level1/1_A": {"weight": 0.6}, "level1/2_B": {"weight": 0.4},
                                  "level2/1_M": {"weight": 1.0}},
                      "decode": {"level1/1_A": {"weight": 0.7}, "level1/3_C": {"weight": 0.3}}}}


def _record(problem: str, verdict: str, sample: int = 0, attainment: Any = None, regime: str | None = None
            ) -> dict[str, Any]:
    roofline = {} if attainment is None and regime is None else {"attainment": attainment, "regime": regime}
    return {"problem": problem, "sample": sample, "verdict": verdict, "standard_verdict": verdict,
            "roofline": roofline}


def test_aggregate_weights_attainment_and_counts_failures_as_zero() -> None:
    records = [_record("level1/1_A", "correct", 0, {"candidate": 0.5}, "memory"),
               _record("level1/1_A", "incorrect", 1),
               _record("level1/2_B", "incorrect"),
               _record("level1/3_C", "correct", 0, 0.2, "compute"),
               _record("level3/9_Z", "correct", 0, 0.9, "compute")]
    agg = aggregate(records, WEIGHTS)
    pre = agg["prefill"]
    assert pre["levels"]["level1"]["s_agg"] == pytest.approx(0.6 * 0.5)
    assert pre["levels"]["level2"]["s_agg"] == 0.0
    assert pre["s_agg"] == pytest.approx(0.3 / 2)  # each level sums to 1: the mean of the level figures
    assert pre["covered_weight"] == pytest.approx(1.0 / 2.0)
    assert pre["correct_weight"] == pytest.approx(0.6 / 2.0)
    assert pre["missing"] == ["level2/1_M"]
    assert pre["regimes"]["memory"] == {"weight_share": pytest.approx(0.3), "s_agg": pytest.approx(0.5),
                                        "problems": 1, "contribution": pytest.approx(0.15)}
    assert pre["regimes"]["unknown"]["contribution"] == 0.0
    assert sum(r["contribution"] for r in pre["regimes"].values()) == pytest.approx(pre["s_agg"])
    dec = agg["decode"]
    assert dec["s_agg"] == pytest.approx(0.7 * 0.5 + 0.3 * 0.2)
    assert agg["overall"]["basis"] == "phase time"
    assert agg["overall"]["s_agg"] == pytest.approx(0.75 * 0.15 + 0.25 * 0.41)
    a = agg["operators"]["level1/1_A"]
    assert (a["samples"], a["correct"], a["pass_rate"]) == (2, 1, 0.5)
    assert a["weights"] == {"prefill": 0.6, "decode": 0.7} and a["regime"] == "memory"
    assert agg["operators"]["level2/1_M"]["status"] == "missing"
    assert agg["flags"]["unweighted"] == ["level3/9_Z"]


def test_aggregate_flags_unmeasured_and_falls_back_to_equal_phase_shares() -> None:
    weights = {**WEIGHTS, "phase_time_us": None}
    records = [_record("level1/1_A", "correct"), _record("level1/3_C", "correct", 0, 0.4)]
    agg = aggregate(records, weights)
    assert agg["flags"]["unmeasured"] == ["level1/1_A"]  # correct but no attainment: scored 0, listed
    assert agg["overall"]["basis"] == "equal"
    assert agg["overall"]["s_agg"] == pytest.approx(0.5 * 0.0 + 0.5 * (0.3 * 0.4))
    assert aggregate(records, weights, baseline="standard")["decode"]["s_agg"] == pytest.approx(0.12)
    with pytest.raises(WeightsError):
        aggregate(records, {"phases": {"overall": {}}})


def test_load_weights_checks_the_schema(tmp_path: Path) -> None:
    (tmp_path / "evaluator").mkdir()
    path = tmp_path / "evaluator" / "weights.json"
    path.write_text(json.dumps({**WEIGHTS, "phases": {"prefill": {"level1/1_A": {"weight": -1}}}}))
    with pytest.raises(WeightsError, match="non-negative"):
        load_weights(tmp_path)
    path.write_text(json.dumps(WEIGHTS))
    assert load_weights(path)["phases"]["decode"]["level1/3_C"]["weight"] == 0.3
    path.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(WeightsError, match="schema"):
        load_weights(tmp_path)


# ---------------------------------------------------------------------------------------------------------------
# The commands


def test_suite_build_and_score_commands(tmp_path: Path) -> None:
    from kbv.cli import main

    runner = CliRunner()
    res = runner.invoke(main, ["suite", "build", str(TRACE), "--out", str(tmp_path / "s"), "--coverage", "0.95",
                               "--held-out", "1"])
    assert res.exit_code == 0, res.output
    assert "level1/1_Mm_bf16" in res.output and "not an aten operator" in res.output
    weights = load_weights(tmp_path / "s")
    records = [_record(k, "correct", 0, 0.5, "memory") for k in weights["phases"]["prefill"]]
    run = tmp_path / "run.jsonl"
    run.write_text("".join(json.dumps({"schema": "kbv.result/1", **r}) + "\n" for r in records))
    res = runner.invoke(main, ["suite", "score", str(run), "--suite", str(tmp_path / "s"), "--json"])
    assert res.exit_code == 0, res.output
    agg = json.loads(res.output)
    assert agg["prefill"]["s_agg"] == pytest.approx(0.5)
    assert agg["decode"]["covered_weight"] < 1.0  # decode-only problems have no record
    res = runner.invoke(main, ["suite", "build", str(TRACE), "--out", str(tmp_path / "s")])
    assert res.exit_code != 0 and "--force" in res.output


def test_the_shipped_production_suite_keeps_the_release_contract() -> None:
    """The suite built from H200 traces: problem files name no model, recipe, trace or GPU; weights sum to 1."""
    from kbv.problems import resolve_suite
    from kbv.tracesuite.weights import level_sums, load_weights

    suite = resolve_suite("production")
    files = sorted(suite.glob("level*/*.py"))
    assert len(files) >= 20
    for path in files:
        text = path.read_text().lower()
        for secret in MODEL_NAMES + ("mixtral_8x7b", "llama3_8b", "vit_l16", "traces/", ".json"):
            assert secret not in text, (path.name, secret)
    for phase, sums in level_sums(load_weights(suite)).items():
        assert all(abs(v - 1.0) < 1e-9 for v in sums.values()), (phase, sums)
