"""The GPU route of fallback detection, on data: kernel classification by launcher and by the candidate's own
symbols (the profiler part itself runs on the GPU machine, tests/test_gpu.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kbv import fallback


def _own_object(tmp_path: Path) -> Path:
    src = tmp_path / "k.cpp"
    src.write_text("template <typename T> void scale_kernel(T* x, int n) { for (int i = 0; i < n; ++i) x[i] *= 2; }\n"
                   "template void scale_kernel<float>(float*, int);\n"
                   "void relu_kernel(const float* x, float* y, int n) { for (int i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0; }\n")
    out = tmp_path / "build" / "own.so"
    out.parent.mkdir()
    subprocess.run(["g++", "-shared", "-fPIC", "-O1", str(src), "-o", str(out)], check=True, timeout=120)
    return out


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nm") is None, reason="needs g++ and nm")
def test_own_names_come_from_defined_symbols_and_the_triton_cache(tmp_path: Path) -> None:
    _own_object(tmp_path)
    cache = tmp_path / "triton" / "abc123"
    cache.mkdir(parents=True)
    (cache / "add_kernel.json").write_text(json.dumps({"name": "add_kernel", "num_warps": 4}))
    (cache / "triton_poi_fused_relu_0.json").write_text(json.dumps({"name": "triton_poi_fused_relu_0"}))
    own = fallback.own_kernel_names([tmp_path / "build", tmp_path / "triton"])
    assert "relu_kernel" in own["defined"] and "scale_kernel<float>" in own["defined"]
    assert {"add_kernel", "triton_poi_fused_relu_0"} <= set(own["triton"])

    kernels = [
        # profiler spellings: parameters, a return type on template instances
        {"name": "relu_kernel(float const*, float*, int)", "us": 40.0, "launcher": fallback.FORWARD_RANGE},
        {"name": "void scale_kernel<float>(float*, int)", "us": 10.0, "launcher": None},
        {"name": "add_kernel", "us": 10.0, "launcher": None},
        # Inductor's kernel in the candidate's cache, a vendor GEMM with no ATen op around it, one under aten::mm
        {"name": "triton_poi_fused_relu_0", "us": 5.0, "launcher": None},
        {"name": "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32", "us": 25.0, "launcher": None},
        {"name": "relu_kernel(float const*, float*, int)", "us": 7.0, "launcher": "aten::mm"},
        # data movement: a copy kernel under aten::copy_ and a memset
        {"name": "void at::native::elementwise_kernel<128, 2>(int, at::native::F)", "us": 3.0, "launcher": "aten::copy_"},
        {"name": "Memset (Device)", "us": 1.0, "launcher": None},
        # the GPU-side mirror of kbv's own record_function range around the forward (seen on the H200)
        {"name": fallback.FORWARD_RANGE, "us": 5000.0, "launcher": None},
    ]
    verdict = fallback.classify_gpu(kernels, own)
    assert verdict["own_us"] == pytest.approx(60.0)
    assert verdict["library_us"] == pytest.approx(37.0)  # Inductor 5 + vendor 25 + a "named like own" one under aten 7
    assert verdict["data_movement_us"] == pytest.approx(4.0)
    assert verdict["library_share_time"] == pytest.approx(37.0 / 97.0)
    assert verdict["flags"] == ["partial_fallback"]
    assert "triton_poi_fused_relu_0" in verdict["library_kernels"]


def test_all_library_time_is_fallback_and_no_compute_is_no_verdict() -> None:
    own = {"defined": ["relu_kernel"], "triton": []}
    lib = [{"name": "ampere_sgemm_128x64_nn", "us": 100.0, "launcher": "aten::addmm"}]
    assert fallback.classify_gpu(lib, own)["flags"] == ["fallback"]
    data_only = [{"name": "Memcpy DtoD (Device -> Device)", "us": 5.0, "launcher": None}]
    verdict = fallback.classify_gpu(data_only, own)
    assert verdict["library_share_time"] is None and verdict["flags"] == []
    assert fallback.classify_gpu([{"name": "relu_kernel(float*)", "us": 1.0, "launcher": None}], own)["flags"] == []
