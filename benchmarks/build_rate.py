#!/usr/bin/env python3
"""How fast kbv builds ``load_inline`` candidates: distinct builds per minute, a cached rebuild, concurrent builds.

    python benchmarks/build_rate.py --device cuda --n 32 --out bench-build/     # on the GPU machine
    python benchmarks/build_rate.py --device cpu --n 2 --out bench-build/       # C++ candidates, on this CPU

``--n`` distinct candidates for the built-in level1/5_ReLU (kbv's own CUDA ReLU example on CUDA, a C++ ReLU on
the CPU; each differs by a constant in its source, and every run's by a token, so each has its own hash and its own
build) are built by
``kbv.eval.runner.build_candidates`` with ``--workers`` concurrent builds (default: the machine's cores, as `kbv run`),
exactly as ``kbv eval`` builds. Then the same candidates are built again (every build cached: the figure is the
median cost of a cached build), and finally two runners build one fresh candidate at the same time (both must
succeed: concurrent builds of one source never collide). Writes ``<out>/build_rate.json``.

Each cold build's steps are read from its ``.ninja_log`` (nvcc on the CUDA source, the C++ half, the link: ``steps``
in the summary), to show where a build's time goes.

``--pch on`` builds the precompiled ``torch/extension.h`` first (``kbv.eval.pch``; its time is reported apart, as
a one-off per toolchain) so every build is offered it; ``--pch off`` builds without it; ``auto`` is kbv's default.
Where it is offered, a CUDA source reads ``torch/types.h`` for ``torch/extension.h``; ``--device-header off`` reads
``torch/extension.h`` itself (A/B of that on the same machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kbv import envinfo  # noqa: E402
from kbv.eval import EvalOptions, pch  # noqa: E402
from kbv.eval.runner import build_candidates  # noqa: E402
from kbv.eval.workspace import build_folders  # noqa: E402
from kbv.problems import builtin_suite_dir, load_problem  # noqa: E402
from kbv.problems.candidates import Candidate, Pair  # noqa: E402

CUDA_EXAMPLE = ROOT / "src" / "kbv" / "examples" / "cuda" / "level_1_problem_5_sample_0_kernel.py"
CPP = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="kbv_bench_relu_cpp_{i}", cpp_sources=r"""
#include <torch/extension.h>
torch::Tensor relu(torch::Tensor x) {{ return x.clamp_min(0) + {i} * 0; }}  // {run}
""", functions=["relu"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.relu(x)
'''


RUN = uuid.uuid4().hex[:12]  # in every source: a run's builds are its own (kbv's build caches outlive the run)


def candidates(device: str, n: int, folder: Path, first: int = 0) -> list[Path]:
    paths = []
    for i in range(first, first + n):
        if device == "cuda":
            text = CUDA_EXAMPLE.read_text().replace('"kbv_example_relu_cuda"', f'"kbv_bench_relu_cuda_{i}"')
            text = text.replace("v < 0.f ? 0.f : v;", f"v < 0.f ? 0.f : v; /* {i} {RUN} */")
        else:
            text = CPP.format(i=i, run=RUN)
        path = folder / f"level_1_problem_5_sample_{i}_kernel.py"
        path.write_text(text)
        paths.append(path)
    return paths


def build(paths: list[Path], options: EvalOptions, workers: int) -> tuple[float, dict]:
    problem = load_problem(builtin_suite_dir() / "level1" / "5_ReLU.py")
    pairs = [Pair(problem, Candidate.from_path(p, sample=i)) for i, p in enumerate(paths)]
    t0 = time.monotonic()
    results = build_candidates(pairs, options, build_workers=workers)
    return time.monotonic() - t0, results


def ninja_steps(paths: list[Path], device: str, cache_dir: Path) -> dict[str, dict[str, float]]:
    """Where the cold builds' time went, from each build's ``.ninja_log`` (its last entry per output): per kind of
    step (``cuda.cuda.o``: nvcc on the CUDA source; ``main.o``: the C++ half, torch's headers and pybind11; ``.so``:
    the link) the steps seen and the median and total seconds of one step."""
    steps: dict[str, list[float]] = {}
    for path in paths:
        for folder in build_folders(Candidate.from_path(path), device, cache_dir):
            for log in folder.glob("torch_extensions/*/.ninja_log"):
                last: dict[str, float] = {}
                for line in log.read_text().splitlines()[1:]:
                    parts = line.split("\t")
                    if len(parts) == 5:
                        last[parts[3]] = (int(parts[1]) - int(parts[0])) / 1e3
                for output, seconds in last.items():
                    kind = ".so" if output.endswith(".so") else output
                    steps.setdefault(kind, []).append(seconds)
    return {kind: {"steps": len(v), "median_s": round(statistics.median(v), 2), "total_s": round(sum(v), 1)}
            for kind, v in sorted(steps.items())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--n", type=int, default=32, help="distinct candidates to build")
    ap.add_argument("--workers", type=int, default=0, help="concurrent builds (0: the cores, kbv run's default)")
    ap.add_argument("--pch", choices=("auto", "on", "off"), default="auto",
                    help="the precompiled torch/extension.h: built first (on), never (off), kbv's default (auto)")
    ap.add_argument("--device-header", choices=("on", "off"), default="on",
                    help="where the headers are offered, a CUDA source's torch/extension.h reads torch/types.h (on, "
                         "kbv's default) or itself (off: KBV_DEVICE_HEADER=0)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    device = envinfo.resolve_device(args.device)
    workers = args.workers or envinfo.cpu_count()  # kbv run's default (--build-workers)
    args.out.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="kbv-bench-build-"))
    options = EvalOptions(device=device, build_timeout=600.0, pch=args.pch, device_header=args.device_header == "on")
    paths = candidates(device, args.n, folder)
    headers: dict = {}
    if args.pch == "on":
        t0 = time.monotonic()
        headers = pch.build(options.cache_dir, device)
        headers = {"seconds": round(time.monotonic() - t0, 2), "error": headers.get("error"),
                   "variants": [{k: v.get(k) for k in ("extra", "cuda", "seconds")} for v in headers.get("variants", [])]}
        print(f"precompiled headers: {headers}", flush=True)

    cold_s, cold = build(paths, options, workers)
    failed = [str(r.failure.error.get("message", ""))[:300] if r.failure else "?" for r in cold.values() if not r.ok]
    usage = {k: sum((r.headers or {}).get(k, 0) for r in cold.values()) for k in ("used", "not_used", "device_header")}
    usage["device_header_retries"] = sum(r.device_header_retry is not None for r in cold.values())
    print(f"cold: {len(cold)} builds, {len(failed)} failed, {cold_s:.1f} s, "
          f"{60 * len(cold) / cold_s:.1f} builds/min ({workers} at a time)", flush=True)
    steps = ninja_steps(paths, device, options.cache_dir)
    print(f"steps: {steps}", flush=True)

    warm = []
    for path in paths[: min(8, len(paths))]:  # one at a time: the cost of one cached build
        seconds, again = build([path], options, 1)
        warm.append(seconds)
        assert all(r.ok for r in again.values())
    print(f"cached: median {statistics.median(warm):.2f} s, max {max(warm):.2f} s", flush=True)

    fresh = candidates(device, 1, folder, first=args.n)
    both: list[tuple[float, dict]] = []
    threads = [threading.Thread(target=lambda: both.append(build(fresh, options, 1))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    collided = [str(r.failure.error.get("message", ""))[:300] for _, res in both for r in res.values() if not r.ok]
    print(f"concurrent builds of one source: {len(both)} runners, {len(collided)} failed", flush=True)

    summary = {"device": device, "cpus": envinfo.cpu_count(), "workers": workers, "builds": len(cold),
               "failed": failed, "cold_seconds": round(cold_s, 2),
               "builds_per_minute": round(60 * len(cold) / cold_s, 2),
               "pch": args.pch, "device_header": args.device_header, "precompiled_headers": headers, "steps": steps, "extensions_with_headers": usage,
               "cached_median_s": round(statistics.median(warm), 3), "cached_max_s": round(max(warm), 3),
               "concurrent_same_source": {"runners": len(both), "failed": collided,
                                          "seconds": [round(s, 2) for s, _ in both]}}
    (args.out / "build_rate.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return 0 if not failed and not collided else 1


if __name__ == "__main__":
    sys.exit(main())
