"""Issue 13 (builds): a precompiled ``torch/extension.h`` that candidates' ``load_inline`` builds use, offered only
where a candidate's worker can read it and not write it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, problem_path
from kbv.eval import EvalOptions, pch
from kbv.protocol import PCH_MIN_BUILDS, PCH_VARIANTS
from kbv.sandbox import plan as sandbox_plan

PLAN = sandbox_plan.plan("auto")
needs_sandbox_user = pytest.mark.skipif(not (PLAN["requested"] and PLAN.get("ids")),
                                        reason=f"no sandbox user here: {PLAN.get('reason')}")
RELU = problem_path("level1/5_ReLU")
CPP_EXAMPLE = ROOT / "src" / "kbv" / "examples" / "cpu" / "level_1_problem_5_sample_0_kernel.py"


def _fake_ready(cache: Path) -> Path:
    """A headers folder that says it is complete (no real precompiled header: GCC would read the wrapper)."""
    where = pch.folder(cache, "cpu")
    (where / pch.WRAPPER).parent.mkdir(parents=True)
    (where / pch.WRAPPER).write_text(f'#include "{pch._torch_include() / pch.WRAPPER}"\n')
    (where / f"{pch.WRAPPER}.gch").mkdir()
    (where / pch.COMPLETE).write_text(json.dumps({"variants": [{"file": "0.gch"}]}))
    for path in [where, *where.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return where


def test_flag_sets_are_torchs_own_without_the_extension_name() -> None:
    sets = pch.flag_sets("cpu")
    assert [s["extra"] for s in sets] == [list(v) for v in PCH_VARIANTS]
    for entry in sets:
        assert "-DTORCH_API_INCLUDE_EXTENSION_H" in entry["flags"]  # read from torch's own build file
        assert not any(f.startswith("-DTORCH_EXTENSION_NAME") for f in entry["flags"])
        assert entry["flags"][-len(entry["extra"]):] == entry["extra"] or not entry["extra"]


def test_offered_only_to_a_sandbox_user_and_never_with_kbv_pch_off(tmp_path: Path, monkeypatch) -> None:
    where = _fake_ready(tmp_path)
    options = EvalOptions(device="cpu", cache_dir=tmp_path)
    monkeypatch.setattr(sandbox_plan, "plan", lambda mode, device="cpu": {"requested": True, "ids": (1, 1, "u"),
                                                                          "hide": True})
    assert pch.offered(options, "cpu") == where
    assert pch.offered(EvalOptions(device="cpu", cache_dir=tmp_path, pch="off"), "cpu") is None
    monkeypatch.setattr(sandbox_plan, "plan", lambda mode, device="cpu": {"requested": True, "ids": None})
    assert pch.offered(options, "cpu") is None  # a worker of the evaluating user could rewrite it
    monkeypatch.setattr(sandbox_plan, "plan", lambda mode, device="cpu": {"requested": False})
    assert pch.offered(options, "cpu") is None
    (where / pch.COMPLETE).unlink()
    monkeypatch.setattr(sandbox_plan, "plan", lambda mode, device="cpu": {"requested": True, "ids": (1, 1, "u")})
    assert pch.offered(options, "cpu") is None  # not built (or a build cut short)


def test_built_for_enough_load_inline_sources_only(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sandbox_plan, "plan", lambda mode, device="cpu": {"requested": True, "ids": (1, 1, "u")})
    auto = EvalOptions(device="cpu", cache_dir=tmp_path)
    inline, plain = "from torch.utils.cpp_extension import load_inline", "import torch"
    assert not pch.wanted([inline] * (PCH_MIN_BUILDS - 1) + [plain] * 5, auto, "cpu")
    assert pch.wanted([inline] * PCH_MIN_BUILDS, auto, "cpu")
    assert pch.wanted([inline], EvalOptions(device="cpu", cache_dir=tmp_path, pch="on"), "cpu")
    assert not pch.wanted([inline] * 20, EvalOptions(device="cpu", cache_dir=tmp_path, pch="off"), "cpu")
    _fake_ready(tmp_path)
    assert not pch.wanted([inline] * 20, auto, "cpu")  # there already


def test_usage_is_read_from_the_marker_in_each_object(tmp_path: Path) -> None:
    where = tmp_path / "pch" / "k1"
    where.mkdir(parents=True)
    (where / pch.COMPLETE).write_text(json.dumps({"variants": [{}], "built_from": ".k1.x/torch/extension.h",
                                                  "wrapper": "k1/torch/extension.h"}))
    objects = {"a/main.o": b"..\x00/c/pch/.k1.x/torch/extension.h\x00", "b/main.o": b"/c/pch/k1/torch/extension.h",
               "c/main.o": b"no marker: not compiled from the wrapper", "d/d.so": b"/c/pch/.k1.x/torch/extension.h"}
    for name, data in objects.items():
        (tmp_path / "ext" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "ext" / name).write_bytes(data)
    assert pch.used(tmp_path / "ext", where) == {"used": 2, "not_used": 1, "device_header": 0}
    (tmp_path / "ext" / "d" / "d.so").write_bytes(b"/c/pch/.k1.x/torch/extension.h\x00" + pch.DEVICE_TAG.encode())
    assert pch.used(tmp_path / "ext", where) == {"used": 2, "not_used": 1, "device_header": 1}


def test_kbv_pch_is_validated() -> None:
    from kbv.eval.options import OptionsError

    with pytest.raises(OptionsError, match="KBV_PCH"):
        EvalOptions(device="cpu", pch="yes").validate()


def _writer(target: Path) -> str:
    """A candidate that tries, at import, to rewrite the headers every later build would include."""
    return f'''import os, torch, torch.nn as nn
reached = []
where = os.environ.get("CPATH") or {str(target)!r}
for name in ("torch/extension.h", "complete.json"):
    try:
        with open(os.path.join(where, name), "a") as f:
            f.write("\\n#define KBV_POISONED 1\\n")
        reached.append(name)
    except OSError:
        pass
try:
    open(os.path.join(where, "torch/extension.h.gch", "9.gch"), "w").close()
    reached.append("a new variant")
except OSError:
    pass
if reached:
    raise RuntimeError("rewrote the precompiled headers: " + ", ".join(reached))
if not os.environ.get("CPATH"):
    raise RuntimeError("the headers were not offered")


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


@needs_sandbox_user
def test_a_candidate_cannot_rewrite_the_headers_later_builds_include() -> None:
    """Offered to a sandboxed worker, the headers' folder is read-only to it: the candidate that tries to poison
    them finds them offered and reaches nothing. The control: with the sandbox off the same candidate rewrites them,
    which is why they are then not offered at all."""
    from kbv.eval import evaluate

    cache = Path(tempfile.mkdtemp(prefix="kbv-pch-", dir="/tmp"))
    try:
        where = _fake_ready(cache)
        folder = Path(tempfile.mkdtemp(prefix="kbv-pch-cand-", dir="/tmp"))
        candidate = folder / "level_1_problem_5_sample_0_kernel.py"
        candidate.write_text(_writer(where))
        record = evaluate(RELU, candidate, EvalOptions(device="cpu", timeout=30.0, cache_dir=cache, trials=1))
        assert record.verdict == "correct", (record.error or {}).get("message")
        assert "POISONED" not in (where / pch.WRAPPER).read_text()

        off = EvalOptions(device="cpu", timeout=30.0, cache_dir=cache, trials=1, sandbox="off")
        assert pch.offered(off, "cpu") is None
        record = evaluate(RELU, candidate, off)
        assert record.verdict == "compile_error"
        assert "rewrote the precompiled headers: torch/extension.h" in (record.error or {}).get("message", "")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
@needs_sandbox_user
def test_a_cpp_candidate_builds_with_the_precompiled_header(kbv_cache_dir: Path) -> None:
    """The headers built for this toolchain (both variants, in the run's cache: later C++ builds of the test run use
    them too); a C++ candidate built with them is correct, and its build used them."""
    from kbv.eval import evaluate

    done = pch.build(kbv_cache_dir, "cpu")
    assert not done.get("error") and len(done["variants"]) == len(PCH_VARIANTS), done
    assert pch.build(kbv_cache_dir, "cpu") == done  # built once
    folder = Path(tempfile.mkdtemp(prefix="kbv-pch-cpp-", dir="/tmp"))
    try:
        candidate = folder / "level_1_problem_5_sample_0_kernel.py"  # a source no other test builds
        candidate.write_text(CPP_EXAMPLE.read_text().replace('"kbv_example_relu_cpu"', '"kbv_pch_relu_cpu"')
                             + f"# {uuid.uuid4()}\n")  # a fresh build every run (the sandbox's build root persists)
        record = evaluate(RELU, candidate, EvalOptions(device="cpu", timeout=60.0, trials=1, protocol="verified"))
        assert record.verdict == "correct", (record.error or {}).get("message")
        assert record.env.get("precompiled_header") == {"used": 1, "not_used": 0, "device_header": 0}  # C++: no CUDA
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _fake_torch(root: Path) -> Path:
    """A torch header folder whose two headers the wrapper may include say which they are."""
    (root / pch.WRAPPER).parent.mkdir(parents=True)
    (root / pch.WRAPPER).write_text("int kbv_read_torch_extension_h;\n")
    (root / pch.DEVICE_HEADER).parent.mkdir(parents=True)
    (root / pch.DEVICE_HEADER).write_text("int kbv_read_torch_types_h;\n")
    return root


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")
@pytest.mark.parametrize("macros, reads", [
    ([], "extension"),  # main.cpp (g++): torch/extension.h, as the precompiled header was made from
    (["__CUDACC__"], "types"),  # a CUDA source (nvcc defines __CUDACC__ in every pass): torch/types.h
    (["__CUDACC__", pch.FULL_HEADER_MACRO], "extension"),  # a CUDA source made again after a failure
])
def test_the_wrapper_gives_a_cuda_source_torch_types_h(tmp_path: Path, macros: list[str], reads: str) -> None:
    """Issue 13 (builds): torch's own header is most of a CUDA source's nvcc time (77.5 against 33.2 s for one
    kernel, docs/results/cpu-2026-12-06-b); the wrapper that CPATH finds first gives a CUDA source torch/types.h,
    which load_inline already puts first in every CUDA source, unless FULL_HEADER_MACRO is defined; main.cpp reads
    torch/extension.h. Each branch leaves its marker."""
    include = _fake_torch(tmp_path / "torch_include")
    headers = tmp_path / "headers"
    (headers / pch.WRAPPER).parent.mkdir(parents=True)
    (headers / pch.WRAPPER).write_text(pch.wrapper_text(include))
    source = tmp_path / "cuda.cu.cpp"
    source.write_text("#include <torch/extension.h>\n#include <torch/extension.h>\n")  # twice: guarded
    out = subprocess.run(["g++", "-E", "-P", *(f"-D{m}" for m in macros), str(source)], capture_output=True,
                         text=True, env={**os.environ, "CPATH": str(headers)}, check=True).stdout
    assert out.count("kbv_read_torch_types_h") == (reads == "types")
    assert out.count("kbv_read_torch_extension_h") == (reads == "extension")
    assert (pch.DEVICE_TAG in out) is (reads == "types") and ("kbv_precompiled_header_" in out) is (reads != "types")


def test_a_full_header_build_appends_the_macro_to_nvccs_own_flags(monkeypatch, tmp_path: Path) -> None:
    """``device_header`` off (KBV_DEVICE_HEADER=0, or a build made again): where the headers are offered, the
    worker's NVCC_APPEND_FLAGS gains FULL_HEADER_MACRO after whatever flags the user gave nvcc; on, or where the
    headers are not offered, nothing is added."""
    from kbv.eval import workspace
    from kbv.problems.candidates import Candidate

    where = _fake_ready(tmp_path)
    cand = tmp_path / "c.py"
    cand.write_text("")
    candidate = Candidate.from_path(cand)
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-lineinfo")
    for device_header, offered, want in [(False, where, "-lineinfo -DKBV_FULL_TORCH_HEADER"), (True, where, None),
                                         (False, None, None)]:
        monkeypatch.setattr(pch, "offered", lambda options, device, w=offered: w)
        options = EvalOptions(device="cpu", cache_dir=tmp_path, device_header=device_header)
        env = workspace._candidate_env(candidate, "cuda", None, options, tmp_path)
        assert env.get("NVCC_APPEND_FLAGS") == want, (device_header, offered, env)
        assert ("CPATH" in env) is (offered is not None)
    monkeypatch.delenv("NVCC_APPEND_FLAGS")
    assert pch.full_header_env({}) == {"NVCC_APPEND_FLAGS": "-DKBV_FULL_TORCH_HEADER"}


@pytest.mark.parametrize("case", ["retried", "ok", "cpu", "timeout", "off", "not_offered", "no_cuda_sources",
                                  "both_fail"])
def test_a_cuda_build_that_fails_with_torch_types_h_is_made_again_with_torch_extension_h(
        monkeypatch, tmp_path: Path, case: str) -> None:
    """A CUDA source that needs more of torch than torch/types.h (torch::nn, pybind11) fails to compile with the
    wrapper's CUDA branch: the build is made once more with FULL_HEADER_MACRO (``device_header`` off), and that
    outcome is the build's, its error too where it fails again; the record keeps the first attempt's seconds and
    message (``env.device_header_retry``). No second build where the first succeeded, timed out, ran on the CPU,
    had the branch off or the headers not offered, or has no CUDA sources."""
    from kbv.eval import pair as pair_mod
    from kbv.eval.evidence import Failure
    from kbv.problems import load_problem
    from kbv.problems.candidates import Candidate

    cand = tmp_path / "c.py"
    cand.write_text("cuda_sources = '...'\n" if case != "no_cuda_sources" else "cpp_sources = '...'\n")
    calls: list[bool] = []

    def failed(kind: str, message: str) -> pair_mod.CompileResult:
        return pair_mod.CompileResult(ok=False, seconds=2.0, failure=Failure("compile", "candidate", kind,
                                                                             {"message": message}))

    def fake_compile(problem, candidate, options, device, gpu):
        calls.append(options.device_header)
        if case == "ok":
            return pair_mod.CompileResult(ok=True, seconds=1.0)
        if options.device_header:
            return failed("timeout" if case == "timeout" else "build", "namespace torch has no member nn")
        return failed("build", "a real error") if case == "both_fail" else pair_mod.CompileResult(ok=True, seconds=3.0)

    monkeypatch.setattr(pair_mod, "_compile", fake_compile)
    monkeypatch.setattr(pch, "offered", lambda options, device: None if case == "not_offered" else tmp_path)
    options = EvalOptions(device="cpu", cache_dir=tmp_path, device_header=case != "off")
    device = "cpu" if case == "cpu" else "cuda"
    result = pair_mod.compile_candidate(load_problem(RELU), Candidate.from_path(cand), options, device)
    if case in ("retried", "both_fail"):
        assert calls == [True, False]
        assert result.ok is (case == "retried") and result.seconds == (5.0 if case == "retried" else 4.0)
        assert result.device_header_retry == {"seconds": 2.0, "message": "namespace torch has no member nn"}
        if case == "both_fail":
            assert result.error["message"] == "a real error"
    else:
        assert calls == [case != "off"] and result.device_header_retry is None
