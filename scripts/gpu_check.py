#!/usr/bin/env python3
"""kbv's checks on a CUDA machine, staged so that one device call runs them and a cut-off run keeps what it did.

Stages (``--stages``, in this order; ``--smoke`` = env,build,pytest,examples and ``--suite`` = suite):
  env       what the machine is (nvidia-smi, torch, triton, nvcc, python packages kbv may use)
  build     every CUDA candidate the later stages use, built in parallel first (hash-named cache: later stages,
            the gpu tests included, import them warm)
  pytest    the tests marked ``gpu`` (pytest -m gpu), if pytest is importable here; the GPU corpus records stream
            into corpus-cuda-*.jsonl; KBV_CORPUS_IDS=a,b evaluates only those corpus entries (the others' tests
            skip), to split the corpus over several device calls (one entry at full size takes 1-2 minutes)
  examples  the bundled CUDA and common example candidates, plus hostile ones (illegal memory access, segfault,
            hang) paired with level1/5_ReLU: every one must get a recorded verdict and the run must go on
  suite     every built-in problem with the reference itself as the candidate: must be correct, speedup ~1.0
            (``--only level3/4_GRU,...`` for some of them)
  corpus    the CUDA entries of tests/candidates/MANIFEST.json (``--corpus-ids a,b`` for some), one timing pair
            each, into corpus.jsonl plus corpus-ids.json (sample -> entry id), to be checked against the manifest
            off the machine (tests/test_adversarial.py's check_entry)
  kernelbench  KernelBench's problems (--kb-dir, default .kb/kernelbench: copy ../shared/kernelbench there and
            carry it) with the reference as its own candidate, every check on (--levels, --only, --kb-limit,
            --precision, --preset, --kb-name)
  kernels   benchmarks/kernels/check_kernels.py: the honest custom Triton kernels checked on this GPU
  bench     benchmarks/pair_cost.py: the fixed cost of one pair (64x2048 ReLU) and the reward preset's
            evaluations per hour over level-1/2 KernelBench pairs (--bench-limit)
  builds    benchmarks/build_rate.py: distinct CUDA load_inline builds per minute (--builds-n), a cached
            rebuild, two concurrent builds of one source; with the precompiled torch/extension.h (and the CUDA
            source's torch/types.h; on-full: torch/extension.h there too) and without (--builds-pch)
  vskb      benchmarks/vs_kernelbench.py: kbv and KernelBench's own harness on the same pairs (--vskb-pairs;
            KernelBench's code from --kb-peer, pydantic from carried wheels)
  overhead  benchmarks/trial_overhead.py: the parts of one timed trial's wall time, in-process, at two sizes
  contention benchmarks/teardown_contention.py: a memory-bound kernel timed while another process allocates,
            holds and gives back device memory, at two sizes
  recording benchmarks/recording_cost.py: what recording every timed call's device kernels (CUPTI, through
            torch.profiler) costs each role's timing and whether it moves the speedup (--recording-pairs)
  agent     scripts/agent_replay.py: the agent's loop against a scripted model on two built-in problems, with
            --ncu (a replay of the machinery, not a model's skill)
  trace     ``kbv trace`` of every shipped recipe on the GPU, ``kbv suite build`` of the production suite from
            those traces, packed as production-suite.tar.gz (traces included); then the first problems of the
            suite (``--production-problems N``) evaluated with the reference as the candidate

Everything is written under --out (default $OUT, else ./gpu-results) as it happens: ``<stage>.jsonl`` records and
``gpu_check.log``. Run from the repository root with ``PYTHONPATH=src`` (no install needed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kbv import envinfo  # noqa: E402
from kbv.problems.candidates import Candidate, Pair, pair_candidates, write_reference_candidate  # noqa: E402
from kbv.eval import EvalOptions  # noqa: E402
from kbv.problems import builtin_suite_dir, discover, load_problem  # noqa: E402
from kbv.records import Record, read_records  # noqa: E402
from kbv.eval.runner import Progress, build_candidates, run_pairs  # noqa: E402

LOG: list = []


def say(*parts: object) -> None:
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    for f in LOG:
        f.write(line + "\n")
        f.flush()


class Lines(Progress):
    def built(self, pair, result) -> None:
        say(f"  built {pair.candidate.path.name}: {'ok' if result.ok else result.verdict} ({result.seconds:.1f} s)")

    def evaluated(self, record: Record) -> None:
        sp = {b: (record.speedup.get(b) or {}).get("value") for b in ("standard", "verified")}
        sp_s = " ".join(f"{b}={v:.3f}" for b, v in sp.items() if v is not None)
        err = (record.error or {}).get("message", "")[:100]
        say(f"  {record.problem} #{record.sample} {Path(record.candidate).name}: {record.verdict} "
            f"(standard {record.standard_verdict}) {sp_s} {err} [{record.wall_seconds.get('total', 0):.1f} s]")


def stage_env(out: Path) -> None:
    for cmd in (["nvidia-smi"], ["nvcc", "--version"]):
        try:
            say(subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout)
        except (OSError, subprocess.SubprocessError) as exc:
            say(f"{cmd[0]}: {exc}")
    import torch

    say("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count(),
        "python", sys.version.split()[0])
    for mod in ("triton", "numpy", "click", "rich", "pytest", "ninja"):
        try:
            m = __import__(mod)
            say(f"  {mod} {getattr(m, '__version__', '?')}")
        except ImportError:
            say(f"  {mod} missing")
    say("software", json.dumps(envinfo.software()), "gpu", json.dumps(envinfo.gpu_identity(0)))


def stage_pytest(out: Path, keyword: str | None = None) -> None:
    try:
        import pytest  # noqa: F401
    except ImportError:
        say("pytest missing: gpu tests not run")
        return
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), KBV_CORPUS_RECORDS_DIR=str(out),  # corpus-cuda.jsonl
               KBV_PYTEST_REPORT=str(out / "pytest-failures.log"))  # each failure as it happens
    with (out / "pytest-gpu.log").open("w") as log:
        # the files that hold gpu tests (others may import packages the GPU machine lacks, e.g. openai)
        files = sorted(str(f) for f in (ROOT / "tests").glob("test_*.py") if "pytest.mark.gpu" in f.read_text())
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-v", "-p", "no:cacheprovider",
                                   *(["-k", keyword] if keyword else []), *files], stdout=log,
                                  stderr=subprocess.STDOUT, env=env, cwd=ROOT, timeout=int(os.environ.get(
                                      "KBV_PYTEST_TIMEOUT", "440")))
            code: object = proc.returncode
        except subprocess.TimeoutExpired:  # the stage's limit: what ran is in the log, the next stage goes on
            code = "timeout (KBV_PYTEST_TIMEOUT)"
    tail = (out / "pytest-gpu.log").read_text().strip().splitlines()[-15:]
    say("pytest -m gpu exit", code, *["\n  " + t for t in tail])
    failures = out / "pytest-failures.log"
    if failures.exists():
        say("pytest failures:", *["\n  " + t for t in failures.read_text().strip().splitlines()[-60:]])


def stage_kernels(out: Path) -> None:
    """benchmarks/kernels/check_kernels.py: the honest custom Triton kernels against their KernelBench problems
    on this GPU (small shapes, six distributions)."""
    with (out / "kernels.log").open("w") as log:
        try:
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernels" / "check_kernels.py")], stdout=log,
                           stderr=subprocess.STDOUT, cwd=ROOT, timeout=300)
        except subprocess.TimeoutExpired:
            say("[kernels] timeout")
    say("[kernels]", *(out / "kernels.log").read_text().strip().splitlines()[-14:])


def _run(name: str, pairs: list[Pair], options: EvalOptions, out: Path, workers: int) -> list[dict]:
    path = out / f"{name}.jsonl"
    t0 = time.monotonic()
    say(f"[{name}] {len(pairs)} pairs")
    run_pairs(pairs, options, path, resume=True, build_workers=workers, progress=Lines())
    records = [r for r in read_records(path)]
    say(f"[{name}] done in {time.monotonic() - t0:.0f} s")
    return records


def example_pairs() -> list[Pair]:
    problems = discover(builtin_suite_dir())
    examples = ROOT / "src" / "kbv" / "examples"
    pairs, _ = pair_candidates(problems, [examples / "common", examples / "cuda"])
    relu = load_problem(builtin_suite_dir() / "level1" / "5_ReLU.py")
    hostile = ["cuda_illegal_access.py", "segfault.py", "os_exit.py", "hang_forward.py", "inplace_relu.py",
               "correct_torch.py"]
    for i, name in enumerate(hostile):
        path = ROOT / "tests" / "candidates" / name
        if path.exists():
            pairs.append(Pair(relu, Candidate.from_path(path, sample=100 + i)))
    return pairs


def stage_build(out: Path, workers: int) -> None:
    t0 = time.monotonic()
    pairs = example_pairs()
    results = build_candidates(pairs, EvalOptions(device="cuda"), build_workers=workers, progress=Lines())
    failed = [sha for sha, r in results.items() if not r.ok]
    say(f"[build] {len(results)} candidate files, {len(failed)} failed, {time.monotonic() - t0:.0f} s "
        f"with {workers} parallel builds")


def stage_examples(out: Path, workers: int) -> None:
    _run("examples", example_pairs(), EvalOptions(device="cuda", timeout=30), out, workers)


def stage_trace(out: Path, workers: int, n_eval: int, device: str = "cuda", size: str = "full") -> None:
    import tarfile

    work = out.parent / "kbv-production"
    traces = work / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    for recipe in ("llama3_8b", "mixtral_8x7b", "vit_l16"):
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "kbv.cli", "trace", recipe, "--device", device, "--size", size, "--out",
               str(traces / f"{recipe}.json")]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        say(f"[trace] {recipe}: exit {proc.returncode} in {time.monotonic() - t0:.0f} s")
        say("\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:]))
    suite = work / "production"
    cmd = [sys.executable, "-m", "kbv.cli", "suite", "build", *sorted(str(t) for t in traces.glob("*.json")),
           "--out", str(suite), "--held-out", "1", "--force"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    say(f"[trace] suite build: exit {proc.returncode}")
    say("\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:]))
    with tarfile.open(out / "production-suite.tar.gz", "w:gz") as tar:
        tar.add(traces, arcname="traces")
        if suite.exists():
            tar.add(suite, arcname="production")
    if n_eval and suite.exists():
        problems = discover(suite)[:n_eval]
        folder = work / "reference-candidates"
        pairs = [Pair(p, Candidate.from_path(write_reference_candidate(p, folder))) for p in problems]
        records = _run("production", pairs, EvalOptions(device=device, timeout=240, timing_pairs=1), out, workers)
        for r in records:
            say(f"[production] {r['problem']}: {r['verdict']} shapes "
                f"{[(s['index'], s['held_out'], s['verdict']) for s in (r.get('shape_results') or [])]}")


def stage_corpus(out: Path, workers: int, only: set[str] | None) -> None:
    """The CUDA entries of the manifest, one batch per set of ``options`` an entry asks for (a defence not on by
    default on this device, e.g. ``lend_timed``), into corpus.jsonl; corpus-ids.json maps each sample to its entry."""
    manifest = json.loads((ROOT / "tests" / "candidates" / "MANIFEST.json").read_text())
    entries = [e for e in manifest["entries"] if e.get("device") == "cuda" and not e.get("evaluated_in")
               and (only is None or e["id"] in only)]
    suite = {p.key: p for p in discover(builtin_suite_dir())}
    ids: dict[int, str] = {}
    batches: dict[str, list[Pair]] = {}
    for sample, entry in enumerate(entries):
        extra = json.dumps(entry.get("options") or {}, sort_keys=True)
        batches.setdefault(extra, []).append(Pair(suite[entry["problem"]],
                                                  Candidate.from_path(ROOT / entry["file"], sample=sample)))
        ids[sample] = entry["id"]
    (out / "corpus-ids.json").write_text(json.dumps(ids))
    for extra, pairs in batches.items():
        _run("corpus", pairs, EvalOptions(device="cuda", timeout=120, timing_pairs=1, **json.loads(extra)), out,
             workers)


def stage_suite(out: Path, workers: int, levels: set[int] | None, timing_pairs: int | None,
                only: set[str] | None = None) -> None:
    problems = [p for p in discover(builtin_suite_dir()) if (levels is None or p.level in levels)
                and (only is None or p.key in only)]
    folder = out.parent / "kbv-reference-candidates"
    pairs = [Pair(p, Candidate.from_path(write_reference_candidate(p, folder))) for p in problems]
    options = EvalOptions(device="cuda", timeout=240, timing_pairs=timing_pairs)
    records = _run("suite", pairs, options, out, workers)
    ok = [r for r in records if r["verdict"] == "correct"]
    say(f"[suite] {len(ok)}/{len(records)} correct")
    for b in ("standard", "verified"):
        values = [r["speedup"][b]["value"] for r in ok if (r.get("speedup") or {}).get(b)]
        if values:
            say(f"[suite] {b}: speedup min {min(values):.3f} max {max(values):.3f} "
                f"within 5%: {sum(abs(v - 1) <= 0.05 for v in values)}/{len(values)}")


def stage_kernelbench(out: Path, workers: int, kb_dir: Path, levels: set[int] | None, only: set[str] | None,
                      limit: int, precision: str, preset: str | None, name: str) -> None:
    """KernelBench's problems with the reference as its own candidate, every check on: each must be correct with
    self-speedups near 1.0; records stream into <name>.jsonl (a cut-off run keeps what it measured)."""
    problems = [p for p in discover(kb_dir) if (levels is None or p.level in levels)
                and (only is None or p.key in only)]
    if limit:
        problems = problems[:limit]
    folder = out.parent / "kbv-kernelbench-reference"
    pairs = [Pair(p, Candidate.from_path(write_reference_candidate(p, folder))) for p in problems]
    options = EvalOptions(device="cuda", timeout=240, precision=precision, preset=preset)
    records = _run(name, pairs, options, out, workers)
    ok = [r for r in records if r["verdict"] == "correct"]
    say(f"[{name}] {len(ok)}/{len(records)} correct")
    for b in ("standard", "verified"):
        values = [r["speedup"][b]["value"] for r in ok if (r.get("speedup") or {}).get(b)]
        if values:
            g = math.exp(sum(math.log(v) for v in values) / len(values))
            say(f"[{name}] {b}: geomean {g:.4f} min {min(values):.3f} max {max(values):.3f} "
                f"within 5%: {sum(abs(v - 1) <= 0.05 for v in values)}/{len(values)} "
                f"within 10%: {sum(abs(v - 1) <= 0.10 for v in values)}/{len(values)}")


def stage_bench(out: Path, args: argparse.Namespace) -> None:
    """The throughput benchmarks (benchmarks/): the fixed cost of one pair (a 64x2048 ReLU, the reference as its
    own candidate, every check, both baselines, default timing pairs) and the reward preset's evaluations per hour
    over level-1/2 KernelBench pairs; their output goes under <out>/bench-*/."""
    relu = out.parent / "kbv-bench-problems" / "level1" / "1_ReLU_64x2048.py"
    relu.parent.mkdir(parents=True, exist_ok=True)
    relu.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
                    "        return torch.relu(x)\n\n\nbatch_size = 64\ndim = 2048\n\n\ndef get_inputs():\n"
                    "    return [torch.rand(batch_size, dim)]\n\n\ndef get_init_inputs():\n    return []\n")
    fixed = ["--problems", str(relu.parent.parent), "--reference", "--device", "cuda"]
    runs = [("bench-fixed", fixed), ("bench-fixed-open", fixed), ("bench-fixed-noseccomp", fixed),
            ("bench-fixed-lent", fixed), ("bench-fixed-unlent", fixed),
            ("bench-reward", ["--problems", str(args.kb_dir), "--levels", args.levels or "1,2",
                              "--limit", str(args.bench_limit), *(["--ids", args.bench_ids] if args.bench_ids else []),
                              "--candidates", str(ROOT / "benchmarks" / "kernels" / "kernelbench"),
                              "--reference", "--device", "cuda", "--preset", "reward",
                              "--gpu-share", str(args.gpu_share)])]
    for name, extra in runs:
        if name.removeprefix("bench-") not in args.bench_runs.split(","):
            continue
        env = dict(os.environ)  # fixed-open: the same pair without the sandbox; fixed-noseccomp: without seccomp
        if name == "bench-fixed-open":
            env["KBV_SANDBOX"] = "off"
        if name == "bench-fixed-noseccomp":
            env["KBV_SANDBOX_DISABLE"] = "seccomp"
        if name in ("bench-fixed-lent", "bench-fixed-unlent"):  # both roles' timed inputs lent by a lender, or
            env["KBV_LEND_TIMED"] = "1" if name == "bench-fixed-lent" else "0"  # neither's: whether it moves the timings
        with (out / f"{name}.log").open("w") as log:
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pair_cost.py"), *extra,
                            "--out", str(out / name)], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                           timeout=900, env=env)
        say(f"[{name}]", *(out / f"{name}.log").read_text().strip().splitlines()[-25:])
        if name == "bench-reward":
            say_self_speedups(out, name, out / name / "pair_cost.jsonl", args)


def stage_builds(out: Path, args: argparse.Namespace) -> None:
    """benchmarks/build_rate.py: distinct CUDA load_inline builds per minute, a cached rebuild, concurrent builds
    of one source; once for each of ``--builds-pch`` (the precompiled torch/extension.h built first, or not used;
    ``on-full``: built first, the CUDA source reading torch/extension.h itself, not torch/types.h)."""
    for mode in args.builds_pch.split(","):
        pch_mode, _, header = mode.partition("-")
        log_path = out / f"builds-pch-{mode}.log"
        with log_path.open("w") as log:
            try:
                subprocess.run([sys.executable, str(ROOT / "benchmarks" / "build_rate.py"), "--device", "cuda",
                                "--n", str(args.builds_n), "--pch", pch_mode, "--workers", str(args.builds_workers),
                                "--device-header", "off" if header == "full" else "on",
                                "--out", str(out / f"builds-pch-{mode}")],
                               stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, timeout=600,
                               env={**os.environ, "KBV_CACHE_DIR": tempfile.mkdtemp(prefix=f"kbv-builds-{mode}-")})
            except subprocess.TimeoutExpired:
                say(f"[builds pch={mode}] timeout")
        say(f"[builds pch={mode}]", *log_path.read_text().strip().splitlines()[:4])


def stage_overhead(out: Path) -> None:
    """benchmarks/trial_overhead.py: where one timed trial's wall time goes, in-process, at two sizes."""
    with (out / "overhead.jsonl").open("w") as log:
        for shape in ("64,2048", "4096,4096"):
            proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "trial_overhead.py"), "--device", "cuda",
                                   "--shape", shape, "--cprofile"], capture_output=True, text=True, cwd=ROOT, timeout=300)
            log.write(proc.stdout)
            say("[overhead]", proc.stdout.strip() or proc.stderr.strip()[-2000:])


def stage_contention(out: Path) -> None:
    """benchmarks/teardown_contention.py: a memory-bound kernel timed while another process allocates, holds and
    gives back device memory (why clean commands read slow on the H100, h100-2026-12-06-c), at two sizes."""
    with (out / "contention.jsonl").open("w") as log:
        for gib, other in (("2", "24"), ("6", "30")):
            proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "teardown_contention.py"), "--gib", gib,
                                   "--other-gib", other], capture_output=True, text=True, cwd=ROOT, timeout=120)
            log.write(" ".join(proc.stdout.split()) + "\n")
            say("[contention]", proc.stdout.strip() or proc.stderr.strip()[-2000:])


RECORDING_PAIRS = (  # the problems of benchmarks/kernels/kernelbench's custom kernels (fused or not), and
    # references of many small kernels (a conv net, an MLP) beside few large ones (GEMMs)
    "level1/19", "level1/23", "level1/36", "level2/1", "level2/12", "level2/76", "level1/1", "level2/14", "level3/4",
    "level3/3", "level2/18",
)


def stage_recording(out: Path, args: argparse.Namespace) -> None:
    """benchmarks/recording_cost.py: each pair's roles timed plain and with every call's device kernels recorded."""
    with (out / "recording.log").open("w") as log:
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "recording_cost.py"), "--problems",
                        str(args.kb_dir), "--pairs", args.recording_pairs, "--device", "cuda",
                        "--out", str(out / "recording")], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                       timeout=900)
    say("[recording]", *(out / "recording.log").read_text().strip().splitlines()[-30:])


VSKB_PAIRS = (  # 20 KernelBench problems of all three levels, 4 with custom Triton kernels (docs/results/h200-2026-12-02-e;
    # level1/13 in place of level1/19_ReLU, whose 6 GB outputs cost KernelBench's harness 86 s, since
    # h200-2026-12-03): a small pair first (its KernelBench run is repeated once to warm the imports)
    "level3/4_LeNet5", "level2/1_Conv2D_ReLU_BiasAdd", "level2/12_Gemm_Multiply_LeakyReLU", "level2/76_Gemm_Add_ReLU",
    "level1/1_Square_matrix_multiplication_", "level1/2_Standard_matrix_multiplication_",
    "level1/7_Matmul_with_small_K_dimension_", "level1/8_Matmul_with_irregular_shapes_",
    "level1/9_Tall_skinny_matrix_multiplication_", "level1/10_3D_tensor_matrix_multiplication",
    "level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide", "level2/9_Matmul_Subtract_Multiply_ReLU",
    "level2/14_Gemm_Divide_Sum_Scaling", "level2/18_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp",
    "level2/29_Matmul_Mish_Mish", "level2/40_Matmul_Scaling_ResidualAdd", "level3/3_DeepNarrowMLP",
    "level3/13_DenseNet121TransitionLayer", "level3/17_SqueezeNetFireModule",
    "level1/13_Matmul_for_symmetric_matrices",
)

AGENT_REPLAYS = (  # (name, the replayed kernels in answer order, kbv agent run's own flags)
    ("agent-relu", ["benchmarks/kernels/kernelbench/level_1_problem_19_sample_0_kernel.py"],
     ["--problem", "src/kbv/suites/builtin/level1/5_ReLU.py", "--max-iters", "2"]),
    ("agent-gemm", ["benchmarks/kernels/kernelbench/level_2_problem_76_sample_0_kernel.py",  # GEMM in cuBLAS
                    "benchmarks/kernels/agent/level_2_problem_1_triton_gemm.py"],  # the GEMM in Triton too
     ["--problem", "src/kbv/suites/builtin/level2/1_Gemm_Bias_ReLU.py", "--max-iters", "3",
      "--require-custom-kernels"]),
)


def stage_agent(out: Path) -> None:
    """scripts/agent_replay.py on two built-in problems (a memory-bound ReLU; a GEMM whose reference is a library
    call, converted by a Triton GEMM), Triton backend, with --ncu (Nsight Compute's folder is put on PATH if ncu is
    not on it): a replay of the agent's machinery, not a model's skill. Runs into <out>/agent-*/."""
    env = dict(os.environ, PYTHONPATH=":".join(filter(None, [str(ROOT / "src"), str(ROOT / "tests"),
                                                            os.environ.get("PYTHONPATH")])))
    if shutil.which("ncu") is None:
        found = sorted(Path("/opt/nvidia").glob("nsight-compute/*/ncu")) + sorted(Path("/usr/local").glob("cuda*/bin/ncu"))
        if found:
            env["PATH"] = f"{found[-1].parent}:{env.get('PATH', '')}"
    say(f"[agent] ncu: {shutil.which('ncu', path=env.get('PATH'))}")
    for name, replies, flags in AGENT_REPLAYS:
        cmd = [sys.executable, str(ROOT / "scripts" / "agent_replay.py")]
        for reply in replies:
            cmd += ["--reply", str(ROOT / reply)]
        cmd += ["--", *flags, "--backend", "triton", "--device", "cuda", "--ncu", "--out", str(out / name)]
        with (out / f"{name}.log").open("w") as log:
            try:
                rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env, timeout=400).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        report = subprocess.run([sys.executable, "-c", "from kbv.cli import main; main()", "agent", "report",
                                 str(out / name)],
                                capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
        say(f"[{name}] rc {rc}", *(out / f"{name}.log").read_text().strip().splitlines()[-12:],
            report.stdout.strip()[-3000:])


def say_self_speedups(out: Path, label: str, records: Path, args: argparse.Namespace) -> None:
    """``benchmarks/self_speedups.py`` over a stage's records (the reference against itself: how far from 1, intervals,
    two speeds within a process, cached drift), written to ``<out>/<label>-self_speedups.json`` and said in brief."""
    if not records.exists():
        return
    path = out / f"{label}-self_speedups.json"
    try:
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "self_speedups.py"), f"{label}={records}",
                               "--problems", str(args.kb_dir), "--out", str(path)],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
    except subprocess.TimeoutExpired:
        say(f"[{label} self-speedups] timeout")
        return
    if proc.returncode != 0 or not path.exists():
        say(f"[{label} self-speedups] failed:", proc.stderr.strip()[-400:])
        return
    found = json.loads(path.read_text()).get(label) or {}
    brief = {k: found.get(k) for k in ("pairs", "verified", "standard", "process_spread", "sync_tail_ms")}
    cached = found.get("cached")
    if cached:
        brief["cached"] = {k: v for k, v in cached.items() if k != "kept_below_cache"}
    say(f"[{label} self-speedups]", json.dumps(brief))


def stage_vskb(out: Path, args: argparse.Namespace) -> None:
    """kbv against KernelBench's own harness on the same pairs (benchmarks/vs_kernelbench.py), pair by pair: the
    custom kernels of benchmarks/kernels/kernelbench where they exist, else the reference, on both sides."""
    with (out / "vskb.log").open("w") as log:
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vs_kernelbench.py"), "--kernelbench",
                        str(args.kb_peer), "--problems", str(args.kb_dir), "--pairs", args.vskb_pairs,
                        "--candidates", str(ROOT / "benchmarks" / "kernels" / "kernelbench"),
                        "--out", str(out / "vskb"),
                        *(["--budget-s", str(args.vskb_budget)] if args.vskb_budget else [])],
                       stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, timeout=1200)
    say("[vskb]", *(out / "vskb.log").read_text().strip().splitlines()[-30:])
    say_self_speedups(out, "vskb", out / "vskb" / "vs_kernelbench.jsonl", args)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stages", default="env,build,pytest,examples")
    ap.add_argument("--smoke", action="store_true", help="stages env,build,pytest,examples")
    ap.add_argument("--suite", action="store_true", help="stage suite")
    ap.add_argument("--levels", default=None, help="suite: only these levels, e.g. 1 or 2,3")
    ap.add_argument("--timing-pairs", type=int, default=None, help="suite: process pairs per timing")
    ap.add_argument("--only", default=None, help="suite: only these problem keys, comma-separated")
    ap.add_argument("--pytest-k", default=None, help="pytest: a -k expression to run some gpu tests only")
    ap.add_argument("--corpus-ids", default=None, help="corpus: only these manifest ids, comma-separated")
    ap.add_argument("--production-problems", type=int, default=3, help="trace: production problems to evaluate")
    ap.add_argument("--trace-device", default="cuda", help="trace: device (cpu with --trace-size tiny for a dry run)")
    ap.add_argument("--trace-size", default="full", choices=["full", "tiny"])
    ap.add_argument("--kb-dir", type=Path, default=ROOT / ".kb" / "kernelbench",
                    help="kernelbench/bench/vskb: KernelBench's problems (copied into an ignored folder and carried)")
    ap.add_argument("--kb-peer", type=Path, default=ROOT / ".kb" / "peers-kernelbench",
                    help="vskb: a copy of KernelBench's code")
    ap.add_argument("--kb-limit", type=int, default=0, help="kernelbench: at most this many problems")
    ap.add_argument("--kb-name", default="kernelbench", help="kernelbench: the records file's name")
    ap.add_argument("--precision", default="fp32", help="kernelbench: fp32 or bf16")
    ap.add_argument("--preset", default=None, help="kernelbench: a rule preset (reward)")
    ap.add_argument("--bench-limit", type=int, default=50, help="bench: pairs of the reward-preset batch")
    ap.add_argument("--bench-runs", default="fixed,reward", help="bench: which of fixed,fixed-open "
                    "(no sandbox),fixed-noseccomp,fixed-lent,fixed-unlent (KBV_LEND_TIMED=1 or 0: the self-speedup "
                    "with both roles' timed inputs lent by a lender, and with neither's),reward to run")
    ap.add_argument("--bench-ids", default=None, help="bench: the reward batch's problems as id ranges per level, "
                    "e.g. 1:1-30,2:1-20 (the custom kernels of benchmarks/kernels where they exist, else the reference)")
    ap.add_argument("--builds-n", type=int, default=16, help="builds: distinct CUDA candidates to build")
    ap.add_argument("--builds-workers", type=int, default=0,
                    help="builds: concurrent builds (0: build_rate.py's default, the cores, as kbv run)")
    ap.add_argument("--builds-pch", default="on,on-full",
                    help="builds: with the precompiled torch/extension.h (on: built first, timed apart; a CUDA "
                         "source reads torch/types.h), the same with torch/extension.h in the CUDA source (on-full), "
                         "without (off), or several in turn (on,on-full)")
    ap.add_argument("--gpu-share", type=int, default=1, help="bench: the reward batch's pairs in flight per GPU")
    ap.add_argument("--vskb-budget", type=float, default=None,
                    help="vskb: start no further pair after this many seconds (the rows so far are kept)")
    ap.add_argument("--vskb-pairs", default=",".join(VSKB_PAIRS),
                    help="vskb: comma-separated KernelBench problem keys, run in that order (default: the 20 pairs of "
                    "docs/results/h200-2026-12-02-e, about 20 s each on both sides: give --vskb-budget 540)")
    ap.add_argument("--recording-pairs", default=",".join(RECORDING_PAIRS),
                    help="recording: comma-separated KernelBench problems, level<N>/<id>")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-results")))
    ap.add_argument("--build-workers", type=int, default=envinfo.cpu_count())
    ap.add_argument("--pack", type=Path, default=None,
                    help="also keep --out packed in this one .tar.gz, rewritten after every stage and on SIGTERM "
                         "(a device call returns at most 8 files: a run cut off by its time limit keeps what it did)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.pack:
        def packed_exit(signum: int, frame: object) -> None:
            pack(args.out, args.pack)
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, packed_exit)
    os.environ.setdefault("KBV_CACHE_DIR", str(Path("/tmp/kbv-cache")))
    LOG.append((args.out / "gpu_check.log").open("a"))
    t0 = time.monotonic()
    stages = args.stages.split(",")
    if args.smoke or args.suite:
        stages = (["env", "build", "pytest", "examples"] if args.smoke else []) + (["suite"] if args.suite else [])
    levels = {int(x) for x in args.levels.split(",")} if args.levels else None
    for stage in stages:
        s0 = time.monotonic()
        say(f"=== {stage} ===")
        if stage == "env":
            stage_env(args.out)
        elif stage == "build":
            stage_build(args.out, args.build_workers)
        elif stage == "pytest":
            stage_pytest(args.out, args.pytest_k)
        elif stage == "kernels":
            stage_kernels(args.out)
        elif stage == "examples":
            stage_examples(args.out, args.build_workers)
        elif stage == "suite":
            stage_suite(args.out, args.build_workers, levels, args.timing_pairs,
                        set(args.only.split(",")) if args.only else None)
        elif stage == "corpus":
            stage_corpus(args.out, args.build_workers, set(args.corpus_ids.split(",")) if args.corpus_ids else None)
        elif stage == "kernelbench":
            stage_kernelbench(args.out, args.build_workers, args.kb_dir, levels,
                              set(args.only.split(",")) if args.only else None, args.kb_limit, args.precision,
                              args.preset, args.kb_name)
        elif stage == "bench":
            stage_bench(args.out, args)
        elif stage == "builds":
            stage_builds(args.out, args)
        elif stage == "vskb":
            stage_vskb(args.out, args)
        elif stage == "overhead":
            stage_overhead(args.out)
        elif stage == "contention":
            stage_contention(args.out)
        elif stage == "recording":
            stage_recording(args.out, args)
        elif stage == "agent":
            stage_agent(args.out)
        elif stage == "trace":
            stage_trace(args.out, args.build_workers, args.production_problems, args.trace_device, args.trace_size)
        else:
            say(f"unknown stage {stage}")
        say(f"=== {stage} took {time.monotonic() - s0:.0f} s (total {time.monotonic() - t0:.0f} s) ===")
        if args.pack:
            pack(args.out, args.pack)
    return 0


def pack(folder: Path, target: Path) -> None:
    """``folder`` as one .tar.gz at ``target``, replaced whole (written beside it, then renamed)."""
    import tarfile

    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    os.replace(partial, target)


if __name__ == "__main__":
    sys.exit(main())
