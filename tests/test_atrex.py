"""Importing Atrex-Bench operator directories (kbv.tracesuite.atrex) from fixtures written to Atrex's documented schema."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from kbv.tracesuite.atrex import AtrexError, import_atrex
from kbv.problems import load_problem
from kbv.tracesuite.weights import level_sums, load_heldout, load_provenance, load_weights
from kbv.worker.loading import import_file


@pytest.fixture(autouse=True)
def _wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read whole table rows: a wide terminal (kbv's commands follow COLUMNS, else 80)."""
    monkeypatch.setenv("COLUMNS", "200")

DATA = Path(__file__).resolve().parent / "fixtures" / "atrex" / "data"
IMPORTANCE = {"rms_norm": 0.027508, "silu_and_mul": 0.017601, "fused_add_rms_norm": 0.011487}
HIDDEN = ("vllm", "sglang", "rtp-llm", "aiter", "atrex_0", "0.027508", "0.017601", "0.011487", "production",
          "description", "cuda")


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("atrex")
    return out, import_atrex(DATA, out, held_out=1)


def _run(module: Any, shape: dict[str, Any]) -> tuple[list[Any], Any, Any]:
    for name, value in shape.items():
        setattr(module, name, value)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    inputs = module.get_inputs()
    with torch.no_grad():
        return inputs, model, model(*inputs)


def test_every_shape_of_every_operator_runs_on_the_cpu(imported) -> None:
    out, result = imported
    heldout = load_heldout(out)
    keys = [op.key for op in result.operators]
    assert keys == ["level1/1_RmsNorm", "level1/2_SiluAndMul", "level1/3_FusedAddRmsNorm"]  # by importance
    runs = 0
    for n, key in enumerate(keys):
        path = out / f"{key}.py"
        assert load_problem(path).key == key
        module = import_file(path, f"kbv_test_atrex_{n}")
        for shape in module.KBV_SHAPES + heldout.get(key, []):
            inputs, model, output = _run(module, shape)
            runs += 1
            if key == "level1/1_RmsNorm":
                x, weight = inputs
                assert list(x.shape) == [shape["INPUT_KWARGS"]["token_count"], shape["INPUT_KWARGS"]["hidden_size"]]
                eps = (shape["INIT_KWARGS"] or {}).get("eps", 1e-6)
                assert model.eps == eps
                xf = x.float()
                expected = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
                torch.testing.assert_close(output, expected)
            elif key.endswith("SiluAndMul"):
                (x,) = inputs
                half = x.shape[-1] // 2
                assert list(output.shape) == [x.shape[0], half]
                torch.testing.assert_close(output, (torch.nn.functional.silu(x[:, :half].float()).to(x.dtype)
                                                    * x[:, half:]))
            else:  # a dict output comes back as a tuple in the dict's order
                assert isinstance(output, tuple) and len(output) == 2
                x, residual, weight = inputs
                torch.testing.assert_close(output[1], x + residual)
    assert runs == 4 + 3 + 2


def test_init_kwargs_reach_the_constructor_in_its_order(imported) -> None:
    out, _ = imported
    module = import_file(out / "level1" / "3_FusedAddRmsNorm.py", "kbv_test_atrex_fused")
    assert module.INIT_KWARGS == {"scale": 2.0, "eps": 1e-05}
    assert module.get_init_inputs() == [1e-05, 2.0]  # __init__(self, eps=1e-06, scale=1.0)
    module.INIT_KWARGS = {"eps": 1e-06}
    assert module.get_init_inputs() == [1e-06, 1.0]  # defaults fill the rest
    module.INIT_KWARGS = {"bogus": 1}
    with pytest.raises(TypeError, match="bogus"):
        module.get_init_inputs()


def test_weights_follow_importance_normalised_per_phase(imported) -> None:
    out, _ = imported
    weights = load_weights(out)
    assert weights["importance_sum"] == pytest.approx(sum(IMPORTANCE.values()))
    assert weights["published_importance_sum"] == pytest.approx(0.394972 + sum(IMPORTANCE.values()))
    prefill, decode = weights["phases"]["prefill"], weights["phases"]["decode"]
    assert set(prefill) == {"level1/1_RmsNorm", "level1/3_FusedAddRmsNorm"}  # "prefill/decode" counts in both
    assert set(decode) == {"level1/1_RmsNorm", "level1/2_SiluAndMul"}
    both = IMPORTANCE["rms_norm"] + IMPORTANCE["fused_add_rms_norm"]
    assert prefill["level1/1_RmsNorm"]["weight"] == pytest.approx(IMPORTANCE["rms_norm"] / both)
    assert weights["levels"]["decode"]["level1"]["raw_sum"] == pytest.approx(0.027508 + 0.017601)
    for levels in level_sums(weights).values():
        assert levels == {"level1": pytest.approx(1.0)}
    silu = decode["level1/2_SiluAndMul"]
    # shapes in index order (visible 0, 2; held out 1): only some Atrex shapes carry call counts and durations
    assert [(s["index"], s["calls"], s["time_us"]) for s in silu["shapes"]] == [
        (0, None, None), (1, 1974, 162399.0), (2, 94, 6335.0)]
    assert silu["calls"] == 1974 + 94


def test_roofline_and_provenance_keep_atrex_numbers_by_shape_index(imported) -> None:
    out, _ = imported
    roof = json.loads((out / "evaluator" / "roofline.json").read_text())
    assert roof["schema"] == "kbv.tracesuite.atrex-roofline/1"
    shapes = roof["problems"]["level1/1_RmsNorm"]["shapes"]
    # shapes.json ids 0, 1, 2, 10 in numeric order; id "1" held out -> visible 0, 2, 10 then 1
    assert [s["atrex_shape"] for s in shapes] == ["0", "2", "10", "1"]
    assert shapes[3]["semantic_W_flops"] == {"bf16": 1923} and shapes[3]["semantic_Q_read_bytes"] == 1024
    assert shapes[0]["SOL_time_ms"] == {"XPU-A": 2.7e-07, "XPU-B": 3.6e-07}
    prov = load_provenance(out)["problems"]["level1/1_RmsNorm"]
    assert prov["atrex_id"] == "atrex_027" and prov["origin"]["framework"] == "vllm"
    assert [s["held_out"] for s in prov["shapes"]] == [False, False, False, True]
    assert all(s["validated"] in ("meta", "cpu") for s in prov["shapes"])
    assert prov["cuda_rewrites"] == 2 and set(prov["files"]) == {"input.py", "metadata.json", "reference.py",
                                                                 "roofline.json", "shapes.json"}
    assert load_heldout(out)["level1/1_RmsNorm"] == [{"INIT_KWARGS": {"eps": 1e-05},
                                                      "INPUT_KWARGS": {"token_count": 3, "hidden_size": 128}}]


def test_problem_files_carry_no_hidden_metadata(imported) -> None:
    out, _ = imported
    for path in out.glob("level1/*.py"):
        text = path.read_text().lower()
        for hidden in HIDDEN:
            assert hidden not in text, (path.name, hidden)


def test_a_broken_directory_is_reported_and_the_rest_imported(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    (data / "silu_and_mul" / "input.py").write_text("import torch\n\ndef make(shape):\n    return {}\n")
    clash = data / "clash"
    shutil.copytree(DATA / "rms_norm", clash)
    (clash / "input.py").write_text((clash / "input.py").read_text() + "\n\nclass Model:\n    pass\n")
    result = import_atrex(data, tmp_path / "out")
    assert set(result.errors) == {"silu_and_mul", "clash"}
    assert "_make_inputs" in result.errors["silu_and_mul"] and "Model" in result.errors["clash"]
    assert [op.name for op in result.operators] == ["rms_norm", "fused_add_rms_norm"]
    with pytest.raises(AtrexError):
        import_atrex(tmp_path / "out", tmp_path / "again")  # no operator directories there


def test_import_atrex_command(tmp_path: Path) -> None:
    from kbv.cli import main

    res = CliRunner().invoke(main, ["import-atrex", str(DATA / "rms_norm"), "--out", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    assert "level1/1_RmsNorm" in res.output and "4/4" in res.output
    module = import_file(tmp_path / "s" / "level1" / "1_RmsNorm.py", "kbv_test_atrex_cli")
    assert len(module.KBV_SHAPES) == 4 and not (tmp_path / "s" / "evaluator" / "heldout.json").read_text().count(
        "INPUT_KWARGS")
