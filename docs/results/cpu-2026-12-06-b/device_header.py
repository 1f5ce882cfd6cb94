#!/usr/bin/env python3
"""The CUDA half of load_inline builds with the CUDA source reading torch/extension.h itself (``full``) and with
kbv's wrapper (``kbv.eval.pch.wrapper_text``: torch/types.h in a CUDA source, ``device``), on this machine's nvcc.

    TORCH_CUDA_ARCH_LIST=9.0 python docs/results/cpu-2026-12-06-b/device_header.py --out DIR \
        --stubs docs/results/cpu-2026-12-06-b/cudastub [files...]

Each candidate file's ``load_inline(cuda_sources=...)`` is captured by running the file with ``load_inline``
replaced, and written as ``cuda.cu`` the way torch writes it (its three implicit includes first). Both versions are
compiled by nvcc with the flags torch gives a CUDA source (read from the build file torch writes), the wrapper's
folder in CPATH, ``-DKBV_FULL_TORCH_HEADER`` for ``full``. Compile only: CPU torch cannot link a CUDA extension.
Prints one JSON line per file and writes ``<out>/device_header.json``. ``--stubs``: a folder searched after the
wrapper's, for headers a CPU machine lacks (this one's CUDA 13.0 has no cuBLAS, cuSPARSE or cuSOLVER headers, and
CPU torch no ``c10/cuda/impl/cuda_cmake_macros.h``, which ``ATen/cuda/CUDAContext.h`` includes): a few typedefs
each, in place of headers of thousands of lines, read alike by both versions.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch.utils.cpp_extension as cpp

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "src"))
from kbv.eval import pch  # noqa: E402


class Captured(Exception):
    pass


def cuda_source(path: Path) -> str | None:
    """The file's CUDA source as torch's load_inline writes cuda.cu (None: no cuda_sources)."""
    found: dict = {}

    def fake(*args, **kwargs):
        found.update(kwargs)
        raise Captured

    original = cpp.load_inline
    cpp.load_inline = fake
    try:
        runpy.run_path(str(path), run_name="kbv_capture")
    except Captured:
        pass
    except Exception as exc:  # noqa: BLE001 - a file that fails before load_inline: reported
        return f"//error {type(exc).__name__}: {exc}"
    finally:
        cpp.load_inline = original
    sources = found.get("cuda_sources")
    if not sources:
        return None
    sources = [sources] if isinstance(sources, str) else list(sources)
    return "\n".join(["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>", *sources])


def cuda_flags(tmp: Path) -> list[str]:
    if cpp.CUDA_HOME is None:
        cpp.CUDA_HOME = "/usr/local/cuda"
    (tmp / "x.cu").write_text("")
    cpp._write_ninja_file_to_build_library(path=str(tmp / "build.ninja"), name="kbv_probe", sources=[str(tmp / "x.cu")],
                                           extra_cflags=[], extra_cuda_cflags=["-O3"], extra_ldflags=[],
                                           extra_include_paths=[], with_cuda=True, with_sycl=False,
                                           extra_sycl_cflags=[], is_standalone=False)
    lines = dict(line.split(" = ", 1) for line in (tmp / "build.ninja").read_text().splitlines()
                 if " = " in line and not line.startswith(" "))
    return shlex.split(lines["cuda_cflags"]) + shlex.split(lines.get("cuda_post_cflags", ""))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="*")
    ap.add_argument("--out", required=True)
    ap.add_argument("--stubs", default=None)
    args = ap.parse_args()
    files = [Path(f) for f in args.files] or sorted((ROOT / "src/kbv/examples/cuda").glob("*.py"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="kbv-devhdr-"))
    wrapper = tmp / "headers"
    (wrapper / pch.WRAPPER).parent.mkdir(parents=True)
    (wrapper / pch.WRAPPER).write_text(pch.wrapper_text(pch._torch_include()))
    flags = cuda_flags(tmp)
    results = []
    for path in files:
        source = cuda_source(path)
        if source is None or source.startswith("//error"):
            results.append({"file": str(path), "skipped": source or "no cuda_sources"})
            print(json.dumps(results[-1]), flush=True)
            continue
        cu = tmp / f"{path.stem}.cu"
        cu.write_text(source)
        row = {"file": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
               "includes_extension_h": "torch/extension.h" in source}
        for mode in ("device", "full"):
            extra = [f"-D{pch.FULL_HEADER_MACRO}"] if mode == "full" else []
            cmd = ["nvcc", *flags, *extra, "-c", str(cu), "-o", str(tmp / f"{path.stem}.{mode}.o")]
            t0 = time.monotonic()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ | {"CPATH": ":".join([str(wrapper)] + ([args.stubs] if args.stubs else []))})
            row[mode] = {"ok": proc.returncode == 0, "seconds": round(time.monotonic() - t0, 2),
                         "error": None if proc.returncode == 0 else proc.stderr.strip().splitlines()[-3:]}
            if mode == "device" and proc.returncode == 0:
                row[mode]["marker"] = pch.DEVICE_TAG.encode() in (tmp / f"{path.stem}.{mode}.o").read_bytes()
        results.append(row)
        print(json.dumps(row), flush=True)
    (out / "device_header.json").write_text(json.dumps({"flags": flags, "results": results}, indent=1))


if __name__ == "__main__":
    main()
