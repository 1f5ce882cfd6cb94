"""Roofline counting (FLOPs by precision class, minimum bytes), the bound, attainment, and hardware ceilings.

Every expected count is derived by hand from the problem's shapes; default sizes are counted on the meta device,
so nothing of their size is ever allocated.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import SUITE, problem_path
from kbv import roofline
from kbv.roofline import hardware
from kbv.roofline.hardware import Ceilings, calibrate, ceilings_for, load_measured, lookup, save_measured
from kbv.counts import Counts
from kbv.roofline import Roofline
from kbv.worker import flops
from kbv.worker.flops import count

H200 = lookup("H200 SXM")


def write_problem(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n" + textwrap.dedent(body))
    return path


# ---------------------------------------------------------------------------------------------------------------
# FLOP and byte counts against hand-derived values

MATMUL = """
class Model(nn.Module):
    def forward(self, A, B):
        return A @ B

M, K, N = 64, 32, 48

def get_inputs():
    return [torch.rand(M, K), torch.rand(K, N)]

def get_init_inputs():
    return []
"""


def test_matmul_flops_and_bytes(tmp_path: Path) -> None:
    m, k, n = 64, 32, 48
    path = write_problem(tmp_path, "1_Matmul.py", MATMUL)
    c = count(path)
    assert c.device == "meta" and c.fallback is None
    assert c.flops == {"tf32": 2 * m * n * k}  # fp32 matmul: a tensor-core (TF32) FLOP, as the verified baseline
    assert c.bytes == 4 * (m * k + k * n + m * n)
    assert c.bytes_breakdown == {"inputs": 4 * (m * k + k * n), "state": 0, "outputs": 4 * m * n}
    assert count(path, fp32_matmul="ieee").flops == {"fp32": 2 * m * n * k}  # TF32 off: the SIMT class
    bf16 = count(path, precision="bf16")
    assert bf16.flops == {"bf16": 2 * m * n * k}
    assert bf16.bytes == 2 * (m * k + k * n + m * n)


INTERMEDIATES = """
class Model(nn.Module):
    def forward(self, x):
        y = x * 2          # held to the end by its name
        z = (y + 1) * 3    # y + 1 freed once multiplied
        return z.sum(dim=1)

N, D = 64, 32

def get_inputs():
    return [torch.rand(N, D)]

def get_init_inputs():
    return []
"""


def test_the_intermediate_tensors_peak_is_counted_beside_the_minimum_bytes(tmp_path: Path) -> None:
    """``intermediate_bytes``: the most the ops' outputs held at once, less the outputs (the gate's first memory
    estimate, ``kbv.eval.pair.correctness_memory``); the roofline's minimum bytes stay inputs, state and outputs.
    Here y, y + 1 and their product are alive together (3 N D floats), then y and the product beside the output."""
    n, d = 64, 32
    c = count(write_problem(tmp_path, "1_Chain.py", INTERMEDIATES))
    assert c.bytes_breakdown == {"inputs": 4 * n * d, "state": 0, "outputs": 4 * n}
    assert c.intermediate_bytes == 4 * 3 * n * d - 4 * n
    assert count(write_problem(tmp_path, "2_Matmul.py", MATMUL)).intermediate_bytes == 0  # one op: its output
    in_place = INTERMEDIATES.replace("y = x * 2", "y = x.view(N, D).mul_(2)").replace("(y + 1) * 3", "y.add_(1)")
    assert count(write_problem(tmp_path, "3_InPlace.py", in_place)).intermediate_bytes == 0  # the input's memory


CONV = """
class Model(nn.Module):
    def __init__(self, cin, cout, k, bias):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, bias=bias)

    def forward(self, x):
        return self.conv(x)

N, CIN, COUT, H, W, KS = 2, 3, 8, 16, 12, 3
BIAS = {bias}

def get_inputs():
    return [torch.rand(N, CIN, H, W)]

def get_init_inputs():
    return [CIN, COUT, KS, BIAS]
"""


@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_flops_and_bytes(tmp_path: Path, bias: bool) -> None:
    n, cin, cout, h, w, ks = 2, 3, 8, 16, 12, 3
    hout, wout = h - ks + 1, w - ks + 1
    c = count(write_problem(tmp_path, "2_Conv.py", CONV.format(bias=bias)))
    # FlopCounterMode's formula (bias ignored) as TF32 tensor FLOPs; the bias add is 1 SIMT FLOP per output element
    expected = {"tf32": 2 * n * cout * hout * wout * cin * ks * ks}
    if bias:
        expected["fp32"] = n * cout * hout * wout
    assert c.flops == expected
    params = cout * cin * ks * ks + (cout if bias else 0)
    assert c.bytes == 4 * (n * cin * h * w + params + n * cout * hout * wout)


SOFTMAX = """
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)

B, D = 16, 100

def get_inputs():
    return [torch.rand(B, D)]

def get_init_inputs():
    return []
"""


def test_softmax_flops_and_bytes(tmp_path: Path) -> None:
    c = count(write_problem(tmp_path, "3_Softmax.py", SOFTMAX))
    assert c.flops == {"fp32": 5 * 16 * 100}  # max, subtract, exp, sum, divide per element
    assert c.bytes == 4 * 2 * 16 * 100
    assert c.uncounted == []


LAYERNORM = """
class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        return self.ln(x)

B, D = 24, 40

def get_inputs():
    return [torch.rand(B, D)]

def get_init_inputs():
    return [D]
"""


def test_layernorm_flops_and_bytes(tmp_path: Path) -> None:
    b, d = 24, 40
    c = count(write_problem(tmp_path, "4_LayerNorm.py", LAYERNORM))
    assert c.flops == {"fp32": 8 * b * d}
    assert c.bytes == 4 * (b * d + 2 * d + b * d)  # input, weight and bias, output


MLP = """
class Model(nn.Module):
    def __init__(self, i, h, o):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o))

    def forward(self, x):
        return self.net(x)

B, I, H, O = 8, 32, 64, 16

def get_inputs():
    return [torch.rand(B, I)]

def get_init_inputs():
    return [I, H, O]
"""


def test_mlp_is_the_sum_of_its_linears(tmp_path: Path) -> None:
    b, i, h, o = 8, 32, 64, 16
    c = count(write_problem(tmp_path, "5_MLP.py", MLP))
    assert c.flops["tf32"] == 2 * b * i * h + 2 * b * h * o
    assert c.flops["fp32"] == b * h + b * h + b * o  # bias 1, ReLU, bias 2
    assert c.bytes == 4 * (b * i + i * h + h + h * o + o + b * o)


ATTENTION = """
class Model(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal={causal})

B, HEADS, S, D = 2, 3, 10, 8

def get_inputs():
    return [torch.rand(B, HEADS, S, D), torch.rand(B, HEADS, S, D), torch.rand(B, HEADS, S, D)]

def get_init_inputs():
    return []
"""


def test_attention_full_and_causal(tmp_path: Path) -> None:
    b, h, s, d = 2, 3, 10, 8
    full = count(write_problem(tmp_path, "6_Attn.py", ATTENTION.format(causal=False)))
    assert full.flops["tf32"] == 4 * b * h * s * s * d  # QK^T and PV, as FlopCounterMode's SDPA formula
    assert full.flops["fp32"] == 6 * b * h * s * s  # scale and softmax per score
    causal = count(write_problem(tmp_path, "7_Attn.py", ATTENTION.format(causal=True)))
    kept = s * (s + 1) // 2
    assert causal.flops["tf32"] == 4 * b * h * kept * d
    assert causal.flops["fp32"] == 6 * b * h * kept
    assert causal.bytes == full.bytes == 4 * 4 * b * h * s * d


def test_an_output_that_is_its_input_is_counted_once(tmp_path: Path) -> None:
    body = SOFTMAX.replace("return torch.softmax(x, dim=1)", "return x.relu_()")
    c = count(write_problem(tmp_path, "8_InplaceReLU.py", body))
    assert c.flops == {"fp32": 16 * 100}
    assert c.bytes == 4 * 16 * 100


def test_ops_without_a_rule_are_listed(tmp_path: Path) -> None:
    body = SOFTMAX.replace("torch.softmax(x, dim=1)", "torch.special.bessel_j0(x)")
    c = count(write_problem(tmp_path, "9_Bessel.py", body))
    assert c.uncounted == ["special_bessel_j0"]
    assert c.flops == {}


DATA_DEPENDENT = """
class Model(nn.Module):
    def forward(self, x):
        return x * x.sum().item()

B, D = {b}, {d}

def get_inputs():
    return [torch.rand(B, D)]

def get_init_inputs():
    return []

KBV_PROFILES = {{"small": {{"B": 4, "D": 8}}}}
"""


def test_meta_failure_falls_back_to_the_cpu(tmp_path: Path) -> None:
    small = count(write_problem(tmp_path, "10_Item.py", DATA_DEPENDENT.format(b=16, d=32)))
    assert small.device == "cpu" and small.profile is None and "meta" in small.fallback
    assert small.flops == {"fp32": 16 * 32 * 2}  # sum + multiply
    # default sizes too large to allocate here: counted at the small profile, and the result says so
    big = count(write_problem(tmp_path, "11_Item.py", DATA_DEPENDENT.format(b=8192, d=8192)))
    assert big.device == "cpu" and big.profile == "small" and "small profile" in big.fallback
    assert big.flops == {"fp32": 4 * 8 * 2}
    assert big.bytes == 4 * 2 * 4 * 8


@pytest.mark.parametrize("key", [f"{p.parent.name}/{p.stem}" for p in sorted(SUITE.glob("level*/*.py"))])
def test_builtin_meta_and_cpu_counts_agree_at_the_small_profile(key: str) -> None:
    """The meta device counts what a real CPU forward counts (same ops, shapes and dtypes), op rule for op rule."""
    path = problem_path(key).resolve()
    meta = flops._count_once(path, "small", "fp32", "meta", "tf32", True, None, 0)
    cpu = flops._count_once(path, "small", "fp32", "cpu", "tf32", True, None, 0)
    assert meta.device == "meta" and cpu.device == "cpu"
    assert meta.flops == cpu.flops and meta.total_flops > 0
    assert meta.bytes_breakdown == cpu.bytes_breakdown and meta.bytes > 0
    assert meta.uncounted == cpu.uncounted == []


# ---------------------------------------------------------------------------------------------------------------
# Built-in problems at default size (meta: nothing of their size is allocated)

def test_builtin_square_matmul_at_default_size_allocates_nothing() -> None:
    n = 4096
    path = problem_path("level1/1_Square_Matmul")
    script = textwrap.dedent(f"""
        import json, resource
        from kbv.worker.flops import count
        count({str(problem_path("level1/5_ReLU"))!r}, profile="small")  # warm up imports and lazy initialisation
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        c = count({str(path)!r})
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({{"counts": c.to_json(), "grew_kib": after - before}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    c = Counts.from_json(data["counts"])
    assert c.device == "meta" and c.profile is None and c.fallback is None
    assert c.flops == {"tf32": 2 * n ** 3}
    assert c.bytes == 3 * n * n * 4
    assert data["grew_kib"] < 32 * 1024  # the three 64 MiB matrices would add 192 MiB


def test_regime_on_h200_datasheet() -> None:
    matmul = Roofline(count(problem_path("level1/1_Square_Matmul")), H200)
    relu = Roofline(count(problem_path("level1/5_ReLU")), H200)
    assert matmul.dominant_precision == "tf32" and matmul.ridge == pytest.approx(494.7e12 / 4.8e12)
    assert matmul.intensity == pytest.approx(2 * 4096 / (3 * 4)) and matmul.regime == "compute"
    assert relu.dominant_precision == "fp32" and relu.ridge == pytest.approx(66.9e12 / 4.8e12)
    assert relu.intensity == pytest.approx(1 / 8) and relu.regime == "memory"
    assert relu.t_roofline_ms == pytest.approx(1e3 * 2 * 4096 * 16384 * 4 / 4.8e12)
    assert not matmul.launch_bound and not relu.launch_bound


# ---------------------------------------------------------------------------------------------------------------
# The bound and attainment

CEIL = Ceilings("test", {"fp32": 1e12, "tf32": 8e12}, 1e11, "measured")


def counts(flops: dict[str, int], nbytes: int) -> Counts:
    return Counts(problem="p", precision="fp32", profile=None, device="meta", flops=flops, bytes=nbytes,
                  bytes_breakdown={"inputs": nbytes, "state": 0, "outputs": 0})


@pytest.mark.parametrize("nbytes,regime", [(10**8, "compute"),  # 1.5 ms of compute against 1 ms of memory
                                           (3 * 10**8, "memory")])  # 1.5 ms against 3 ms
def test_t_roofline_is_the_max_of_summed_compute_and_memory(nbytes: int, regime: str) -> None:
    flops = {"tf32": 8 * 10**9, "fp32": 5 * 10**8}
    roof = Roofline(counts(flops, nbytes), CEIL)
    t_compute = flops["tf32"] / 8e12 + flops["fp32"] / 1e12
    t_memory = nbytes / 1e11
    assert roof.t_compute_ms == pytest.approx(1e3 * t_compute)
    assert roof.t_memory_ms == pytest.approx(1e3 * t_memory)
    assert roof.t_roofline_ms == pytest.approx(1e3 * max(t_compute, t_memory))
    # intensity: total FLOPs per byte; the ridge is the dominant class's (tf32: 1 ms against fp32's 0.5 ms)
    assert roof.intensity == pytest.approx(8.5e9 / nbytes)
    assert roof.dominant_precision == "tf32" and roof.ridge == pytest.approx(8e12 / 1e11)
    assert roof.regime == regime


def test_launch_bound_below_ten_microseconds() -> None:
    assert Roofline(counts({"fp32": 10}, 10**5), CEIL).launch_bound  # 1 us of memory time
    assert not Roofline(counts({"fp32": 10}, 10**7), CEIL).launch_bound  # 100 us


def test_attainment_above_one_is_flagged() -> None:
    roof = Roofline(counts({"tf32": 8 * 10**9}, 10**6), CEIL)  # 1 ms compute-bound
    assert roof.t_roofline_ms == pytest.approx(1.0)
    assert roof.attainment(4.0) == pytest.approx(0.25) and not roof.above_roofline(roof.attainment(4.0))
    assert roof.attainment(0.5) == pytest.approx(2.0) and roof.above_roofline(roof.attainment(0.5))
    assert roof.attainment(None) is None and roof.attainment(0.0) is None
    section = roof.record_section({"candidate_verified": {"median": 0.5}, "reference_verified": {"median": 2.0},
                                   "reference_standard": {"median": 4.0}})
    assert section["attainment"] == pytest.approx({"candidate": 2.0, "reference_verified": 0.5,
                                                   "reference_standard": 0.25})
    assert section["above_roofline"] == ["candidate"] and section["candidate_timing"] == "verified"
    standard_only = roof.record_section({"candidate_verified": None, "reference_verified": None,
                                         "candidate_standard": {"median": 2.0}, "reference_standard": {"median": 4.0}})
    assert standard_only["attainment"]["candidate"] == pytest.approx(0.5)
    assert standard_only["candidate_timing"] == "standard" and standard_only["above_roofline"] == []
    untimed = roof.record_section({})
    assert untimed["attainment"] == {"candidate": None, "reference_verified": None, "reference_standard": None}
    assert untimed["candidate_timing"] is None and untimed["above_roofline"] == []


def test_json_keys_and_the_command_line(tmp_path: Path) -> None:
    path = write_problem(tmp_path, "1_Matmul.py", MATMUL)
    data = Roofline(count(path), H200).to_json()
    for key in ("flops", "bytes", "intensity", "regime", "t_roofline_ms", "ceilings"):
        assert key in data
    assert data["ceilings"]["name"] == "H200 SXM" and data["ceilings"]["source"] == "datasheet"
    done = subprocess.run([sys.executable, "-m", "kbv.roofline", "--problem", str(path), "--device", "NVIDIA H200",
                           "--cache-dir", str(tmp_path), "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["flops"] == {"tf32": 2 * 64 * 48 * 32} and printed["bytes"] == data["bytes"]
    assert printed["t_roofline_ms"] == pytest.approx(data["t_roofline_ms"])


def test_counts_cache_round_trip(tmp_path: Path) -> None:
    path = write_problem(tmp_path, "3_Softmax.py", SOFTMAX)
    first = roofline.counts_cached(path, None, "fp32", tmp_path / "cache")
    files = list((tmp_path / "cache" / "roofline").glob("*.json"))
    assert len(files) == 1
    files[0].write_text(json.dumps(first.to_json() | {"bytes": 123}))  # a hit is read, not recounted
    assert roofline.counts_cached(path, None, "fp32", tmp_path / "cache").bytes == 123
    assert roofline.counts_cached(path, None, "bf16", tmp_path / "cache").bytes == 2 * 2 * 16 * 100


# ---------------------------------------------------------------------------------------------------------------
# Hardware ceilings

def test_lookup_by_torch_and_nvidia_smi_names() -> None:
    h200, h100 = lookup("NVIDIA H200"), lookup("NVIDIA H100 80GB HBM3")
    assert h200.name == "H200 SXM" and h200.bandwidth == pytest.approx(4.8e12)
    assert h100.name == "H100 SXM" and h100.bandwidth == pytest.approx(3.35e12)
    assert h200.flops == h100.flops  # the same GH100 compute
    assert h200.flops["bf16"] == pytest.approx(989.4e12) and h200.flops["tf32"] == pytest.approx(494.7e12)
    assert h200.flops["fp32"] == pytest.approx(66.9e12) and h200.flops["fp8"] == pytest.approx(1978.9e12)
    assert h200.source == "datasheet"
    assert lookup("NVIDIA A100-SXM4-80GB").name == "A100 SXM 80GB" and "fp8" not in lookup("A100 SXM 80GB").flops
    assert lookup("NVIDIA L40S").name == "L40S" and lookup("NVIDIA B200").name == "B200"
    assert lookup("cpu").source == "placeholder"
    for other in ("NVIDIA H100 PCIe", "NVIDIA H200 NVL", "NVIDIA A100-SXM4-40GB", "NVIDIA GeForce RTX 4090"):
        with pytest.raises(KeyError):
            lookup(other)


def test_measured_ceilings_are_preferred_when_saved(tmp_path: Path) -> None:
    assert ceilings_for("NVIDIA H200", tmp_path).source == "datasheet"  # nothing saved yet
    measured = Ceilings("NVIDIA H200", {"fp32": 51e12, "tf32": 350e12, "bf16": 780e12, "fp16": 780e12},
                        4.25e12, "measured")
    save_measured(measured, tmp_path)
    save_measured(Ceilings("cpu", {"fp32": 1e11, "tf32": 1e11}, 2e10, "measured"), tmp_path)  # kept side by side
    used = ceilings_for("NVIDIA H200", tmp_path)
    assert used.source == "measured" and used.name == "H200 SXM"
    assert used.bandwidth == pytest.approx(4.25e12) and used.flops["bf16"] == pytest.approx(780e12)
    assert used.flops["fp8"] == pytest.approx(H200.flops["fp8"]) and used.filled == ("fp8",)  # not measured
    assert load_measured("H200 SXM", tmp_path).bandwidth == pytest.approx(4.25e12)
    assert ceilings_for("cpu", tmp_path).source == "measured"
    assert ceilings_for("NVIDIA H200", tmp_path, prefer_measured=False).source == "datasheet"
    assert ceilings_for("NVIDIA H200", tmp_path / "elsewhere").source == "datasheet"
    with pytest.raises(ValueError):
        save_measured(H200, tmp_path)  # datasheet numbers are never saved as measurements
    assert Roofline(count(problem_path("level1/5_ReLU")), used).t_roofline_ms == pytest.approx(
        1e3 * 2 * 4096 * 16384 * 4 / 4.25e12)


def test_cpu_calibration_is_positive_and_finite() -> None:
    measured = calibrate("cpu", matmul_size=256, copy_bytes=16 << 20, repeats=3, warmup=1)
    assert measured.source == "measured" and measured.name == "cpu"
    assert set(measured.flops) == {"fp32", "tf32"}
    for value in [*measured.flops.values(), measured.bandwidth]:
        assert math.isfinite(value) and value > 0
    assert 1e8 < measured.flops["fp32"] < 1e14 and 1e8 < measured.bandwidth < 1e13
    assert hardware.Ceilings.from_json(json.loads(json.dumps(measured.to_json()))) == measured


def test_no_ceiling_for_a_counted_precision_is_an_error() -> None:
    with pytest.raises(KeyError):
        Roofline(counts({"fp8": 10}, 10), lookup("A100 SXM 80GB"))


def test_precount_counts_many_problems_in_one_process_and_fills_the_cache(tmp_path, monkeypatch):
    """The runner counts every problem of a run up front in one process (a process per problem cost ~3 s each);
    counts_cached then reads them without counting again, and a problem that fails to count is left to it."""
    from kbv import proc as proc_module
    from kbv import roofline as rl

    suite = SUITE
    paths = [suite / "level1" / "5_ReLU.py", suite / "level2" / "1_Gemm_Bias_ReLU.py", tmp_path / "broken.py"]
    paths[2].write_text("import torch\nraise RuntimeError('no')\n")
    started = []
    real_run = proc_module.run
    monkeypatch.setattr(rl.proc, "run", lambda cmd, *a, **k: started.append(cmd) or real_run(cmd, *a, **k))
    assert rl.precount([(p, "small", "fp32", None) for p in paths], tmp_path / "cache") == 2
    assert len(started) == 1 and "--batch" in started[0]
    monkeypatch.setattr(rl, "count_isolated", lambda *a, **k: (_ for _ in ()).throw(AssertionError("recounted")))
    for p in paths[:2]:
        assert rl.counts_cached(p, "small", "fp32", tmp_path / "cache").total_flops > 0
    assert rl.precount([(p, "small", "fp32", None) for p in paths[:2]], tmp_path / "cache") == 0  # all cached
