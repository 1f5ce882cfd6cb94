#!/usr/bin/env python3
"""Check the hand-written custom Triton kernels in benchmarks/kernels/kernelbench against their KernelBench problems.

    python benchmarks/kernels/check_kernels.py
    python benchmarks/kernels/check_kernels.py --only 23_Softmax,level_2_problem_12

For each candidate ``level_<L>_problem_<ID>_sample_<S>_kernel.py`` the matching problem ``level<L>/<ID>_*.py`` is
loaded with its size constants shrunk (the module's source is parsed and its top-level integer constants are
rewritten before it runs, so derived constants such as ``bias_shape = (out_features,)`` follow): names with
"batch" become at most 16, other integers above 64 become 1003 (odd, so kernels' masked tails are exercised), and
these shrink further (257, 67, 19, then the batch) until get_inputs() holds at most --budget elements. Some
problems add variants that exercise other code paths (long softmax rows, many RMSNorm features). Model and
ModelNew are built from get_init_inputs() under the same torch.manual_seed (ModelNew then loads Model's
state_dict when there is one) and compared on six input distributions built from D1 = get_inputs():
x, 3x, 0.01x, -x, 2x-1 and 200x-100, with torch.allclose(atol=1e-4, rtol=1e-4) and equal NaN placement.

Without CUDA the kernels run in Triton's interpreter (TRITON_INTERPRET=1, CPU tensors); with CUDA they run on the
GPU (TF32 is switched off there so the fp32 reference is exact). One line per kernel; exit status 1 on any
failure.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import re
import sys
import time
import types
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (by the candidates)

import triton  # noqa: E402,F401  (imported here so the interpreter setting is in force)

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
ATOL = RTOL = 1e-4
SEED = 1234
LARGE_STEPS = (1003, 257, 67, 19)
BATCH_STEPS = (16, 4, 2)

#: Extra size variants per problem (constant overrides on top of the shrunk defaults) that reach other code paths.
EXTRA_VARIANTS: dict[str, list[dict[str, int]]] = {
    "23_Softmax": [{"batch_size": 3, "dim": 40003}, {"batch_size": 5, "dim": 1}],  # online path; 1-wide rows
    "24_LogSoftmax": [{"batch_size": 3, "dim": 40003}, {"batch_size": 5, "dim": 1}],
    "36_RMSNorm_": [{"batch_size": 2, "features": 1003, "dim1": 5, "dim2": 7},  # chunked path over C
                    {"batch_size": 3, "features": 203, "dim1": 3, "dim2": 11}],
    "19_ReLU": [{"batch_size": 1, "dim": 5}],
    "1_Conv2D_ReLU_BiasAdd": [{"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 40, "width": 40}],
}


def distributions(x: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"x": x, "3x": 3 * x, "0.01x": 0.01 * x, "-x": -x, "2x-1": 2 * x - 1, "200x-100": 200 * x - 100}


def _int_constants(tree: ast.Module) -> dict[str, int]:
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and type(node.value.value) is int:
            for t in node.targets:
                if isinstance(t, ast.Name):
                    found[t.id] = node.value.value
    return found


def load_problem(path: Path, sizes: dict[str, int]) -> types.ModuleType:
    """Run the problem's source with its top-level integer constants replaced by ``sizes``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and type(node.value.value) is int:
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            for n in names:
                if n in sizes:
                    node.value = ast.copy_location(ast.Constant(sizes[n]), node.value)
                    break
    module = types.ModuleType(f"kb_problem_{path.stem}")
    module.__file__ = str(path)
    exec(compile(tree, str(path), "exec"), module.__dict__)
    return module


def shrunk_sizes(path: Path, budget: int) -> dict[str, int]:
    consts = _int_constants(ast.parse(path.read_text()))
    for batch in BATCH_STEPS:
        for large in LARGE_STEPS:
            sizes = {}
            for n, v in consts.items():
                if "batch" in n.lower():
                    sizes[n] = min(v, batch)
                elif v > 64:
                    sizes[n] = large
                else:
                    sizes[n] = v
            mod = load_problem(path, sizes)
            torch.manual_seed(SEED)
            numel = sum(t.numel() for t in mod.get_inputs() if isinstance(t, torch.Tensor))
            if numel <= budget:
                return sizes
    return sizes


def load_candidate(path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"kb_candidate_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # triton's jit inspects the source through the module
    spec.loader.exec_module(module)
    return module


def check_variant(problem: Path, cand: types.ModuleType, sizes: dict[str, int], device: str) -> tuple[bool, str, float]:
    mod = load_problem(problem, sizes)
    init = mod.get_init_inputs()
    torch.manual_seed(SEED)
    ref = mod.Model(*init)
    torch.manual_seed(SEED)
    new = cand.ModelNew(*init)
    state = ref.state_dict()
    if state:
        new.load_state_dict(state)
    ref = ref.to(device).eval()
    new = new.to(device).eval()
    torch.manual_seed(SEED + 1)
    base = mod.get_inputs()
    float_idx = [i for i, t in enumerate(base) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not float_idx:
        return False, "get_inputs() has no float tensor", 0.0
    worst = 0.0
    for name in distributions(base[float_idx[0]]):
        inputs = list(base)
        for i in float_idx:
            inputs[i] = distributions(base[i])[name]
        inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]
        with torch.no_grad():
            want = ref(*inputs)
            got = new(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs])
        if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
            return False, f"{name}: output {getattr(got, 'shape', type(got))} {getattr(got, 'dtype', '')} " \
                          f"!= {tuple(want.shape)} {want.dtype}", worst
        if not torch.equal(torch.isnan(got), torch.isnan(want)):
            return False, f"{name}: NaN placement differs", worst
        finite = ~torch.isnan(want)
        if finite.any():
            err = (got[finite].double() - want[finite].double()).abs().max().item()
            worst = max(worst, err if err == err else float("inf"))
        if not torch.allclose(got, want, atol=ATOL, rtol=RTOL, equal_nan=True):
            bad = (~torch.isclose(got, want, atol=ATOL, rtol=RTOL, equal_nan=True)).sum().item()
            return False, f"{name}: {bad} elements off (max abs err {worst:.3g})", worst
    return True, "", worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=Path, default=ROOT / ".kb/kernelbench", help="KernelBench problems folder")
    ap.add_argument("--kernels", type=Path, default=ROOT / "benchmarks/kernels/kernelbench",
                    help="candidates folder (KernelBench generation layout)")
    ap.add_argument("--only", help="comma-separated substrings of kernel file names or problem stems")
    ap.add_argument("--budget", type=int, default=1 << 20, help="most input elements per shrunk problem")
    args = ap.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    print(f"device {device}{' (Triton interpreter)' if device == 'cpu' else ''}; atol=rtol={ATOL}; "
          f"distributions {', '.join(distributions(torch.zeros(1)))}", flush=True)

    files = sorted((p for p in args.kernels.glob("*.py") if NAME.match(p.name)),
                   key=lambda p: tuple(int(g) for g in NAME.match(p.name).groups()))
    keys = [k.strip() for k in args.only.split(",") if k.strip()] if args.only else None
    failures = checked = 0
    for path in files:
        level, pid, _ = (int(g) for g in NAME.match(path.name).groups())
        matches = sorted((args.problems / f"level{level}").glob(f"{pid}_*.py"))
        stem = matches[0].stem if matches else "?"
        if keys and not any(k in path.name or k in stem for k in keys):
            continue
        checked += 1
        t0 = time.perf_counter()
        if len(matches) != 1:
            print(f"FAIL {path.name}: {len(matches)} problem files level{level}/{pid}_*.py", flush=True)
            failures += 1
            continue
        problem = matches[0]
        if "@triton.jit" not in path.read_text():
            print(f"FAIL {path.name} ({stem}): no @triton.jit kernel", flush=True)
            failures += 1
            continue
        try:
            cand = load_candidate(path)
            base_sizes = shrunk_sizes(problem, args.budget)
            variants = [base_sizes] + [{**base_sizes, **extra} for extra in EXTRA_VARIANTS.get(stem, [])]
            ok, why, worst, shapes = True, "", 0.0, []
            for sizes in variants:
                changed = {k: v for k, v in sizes.items() if k in _int_constants(ast.parse(problem.read_text()))
                           and v != _int_constants(ast.parse(problem.read_text()))[k]}
                shapes.append(",".join(f"{k}={v}" for k, v in changed.items()) or "as is")
                ok, why, w = check_variant(problem, cand, sizes, device)
                worst = max(worst, w)
                if not ok:
                    why = f"[{shapes[-1]}] {why}"
                    break
        except Exception as exc:  # a crash is a failure of that kernel, not of the script
            ok, why, worst = False, f"{type(exc).__name__}: {exc}", 0.0
        seconds = time.perf_counter() - t0
        if ok:
            print(f"PASS {path.name} ({stem}): {len(variants)} size variant(s) x 6 distributions, "
                  f"max abs err {worst:.2e}, {seconds:.1f} s  [{' | '.join(shapes)}]", flush=True)
        else:
            failures += 1
            print(f"FAIL {path.name} ({stem}): {why} ({seconds:.1f} s)", flush=True)
    if checked == 0:
        print("no kernels selected", flush=True)
        return 1
    print(f"{checked - failures}/{checked} passed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
