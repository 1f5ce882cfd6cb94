"""A precompiled ``torch/extension.h`` for the C++ half of ``load_inline`` builds.

torch compiles every ``load_inline`` extension's ``main.cpp`` (``#include <torch/extension.h>``, the candidate's
``cpp_sources``, its pybind11 module) from scratch: most of a C++ candidate's build, and much of a CUDA build's CPU.
kbv compiles that header once per toolchain, in the trusted parent, with the flags torch gives ``main.cpp`` (less
the extension's name) for each flag set of ``PCH_VARIANTS``, into ``<cache>/pch/<key>/``:

    torch/extension.h        a one-line wrapper that includes torch's own
    torch/extension.h.gch/   one precompiled header per flag set (GCC uses the first that is valid)
    complete.json            written last: what was built, with which flags, in how long

A candidate's build finds it through ``CPATH`` (searched like ``-I``, before torch's ``-isystem`` folders). GCC
uses a precompiled header only where every option and macro it depends on is the same, and otherwise reads the
wrapper, the same text: a candidate with other flags builds as before, never differently (the wrapper adds one
string, ``MARKER``, by which ``used`` tells the two apart afterwards). It is offered only to
workers that run as the sandbox user, who can read it (bound back read-only into the covered cache,
``kbv.worker.confine.hide``) but not write it: a worker that could would change what later candidates' builds
include.

The same wrapper serves the extension's CUDA source, which nvcc cannot precompile: there (``__CUDACC__``) it
includes ``torch/types.h`` instead, the tensor and factory API a kernel's host function uses, without torch's C++
frontend and Python bindings, which make most of the 75 CPU-seconds nvcc spends on a CUDA source that includes
``torch/extension.h`` (docs/results/cpu-2026-12-06-b: 77.5 against 33.2 s for one ReLU kernel). ``torch/types.h``
is what ``torch/extension.h`` itself includes for every name in ``torch::`` that a kernel's host code calls (the
rest adds namespaces of its own: ``torch::nn``, ``torch::cuda``, ``torch::autograd``, pybind11), so a source that
compiles with it calls the same functions. A source that needs more fails to compile; its build is made again with
``FULL_HEADER_MACRO`` defined for nvcc alone (``NVCC_APPEND_FLAGS``; ``kbv.eval.pair.compile_candidate``), where the
wrapper includes ``torch/extension.h`` as before. ``DEVICE_MARKER`` tells afterwards which builds used it.
"""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable

from kbv import envinfo
from kbv.eval.options import EvalOptions
from kbv.protocol import PCH_BUILD_TIMEOUT_S, PCH_MIN_BUILDS, PCH_VARIANTS
from kbv.sandbox import plan as sandbox_plan

WRAPPER = Path("torch") / "extension.h"
COMPLETE = "complete.json"
# in every object compiled from the wrapper: ``__FILE__`` is where the header was compiled from, a folder of its own,
# where the precompiled header was used, and the wrapper's own path where GCC read it as text (``used``)
MARKER = "static const char kbv_precompiled_header_[] __attribute__((used)) = __FILE__;"
BUILD_MEMORY = 3 * 2**30  # what one variant's compile may hold (2.1 GB measured on the CPU)
DEVICE_HEADER = Path("torch/csrc/api/include/torch/types.h")  # what a CUDA source reads for torch/extension.h
FULL_HEADER_MACRO = "KBV_FULL_TORCH_HEADER"  # defined for nvcc: the CUDA source reads torch/extension.h itself
# in every CUDA object compiled from the wrapper's CUDA branch (``used``)
DEVICE_TAG = "kbv-device-header:torch/types.h"
DEVICE_MARKER = f'static const char kbv_device_header_[] __attribute__((used)) = "{DEVICE_TAG}";'
WRAPPER_VERSION = 2  # part of the folder's key: a wrapper written by an older kbv is not reused


def wrapper_text(include: Path) -> str:
    """The wrapper ``torch/extension.h``: torch's own (``include`` is torch's header folder), or in a CUDA source
    (unless ``FULL_HEADER_MACRO`` is defined) ``torch/types.h``, each with its marker."""
    return (f"#ifndef KBV_PRECOMPILED_HEADER_\n#define KBV_PRECOMPILED_HEADER_\n"
            f"#if defined(__CUDACC__) && !defined({FULL_HEADER_MACRO})\n"
            f'#include "{include / DEVICE_HEADER}"\n{DEVICE_MARKER}\n'
            f"#else\n"
            f'#include "{include / WRAPPER}"\n{MARKER}\n'
            f"#endif\n#endif\n")


def _torch_include() -> Path:
    """torch's header folder (as ``torch.utils.cpp_extension.include_paths()[0]``, without importing it)."""
    import torch

    return Path(torch.__file__).resolve().parent / "include"


def folder(cache_dir: Path, device: str) -> Path:
    """Where this toolchain's headers live: keyed by the toolchain and by torch's headers as installed."""
    header = _torch_include() / "torch" / "extension.h"
    stamp = header.stat().st_mtime_ns if header.exists() else 0
    key = hashlib.sha256(f"{envinfo.toolchain_id(device)}|{header}|{stamp}|{WRAPPER_VERSION}".encode()).hexdigest()[:24]
    return Path(cache_dir) / "pch" / key


def ready(cache_dir: Path, device: str) -> dict[str, Any] | None:
    """What ``complete.json`` says of this toolchain's headers (None until they are built)."""
    try:
        done = json.loads((folder(cache_dir, device) / COMPLETE).read_text())
    except (OSError, ValueError):
        return None
    return done if isinstance(done, dict) and done.get("variants") else None


def _kinds(device: str) -> tuple[bool, ...]:
    return (False, True) if device.startswith("cuda") else (False,)


def flag_sets(device: str) -> list[dict[str, Any]]:
    """Per variant: the compiler and the flags torch compiles an extension's ``main.cpp`` with (for a C++ and, on a
    GPU, a CUDA extension), its name left out; variants with the same flags once. Read from the build file torch
    itself writes, so they follow the installed torch."""
    import torch.utils.cpp_extension as cpp

    writer = cpp._write_ninja_file_to_build_library
    takes = set(inspect.signature(writer).parameters)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kbv-pch-flags-") as tmp:
        source = Path(tmp) / "main.cpp"
        source.write_text("")
        for with_cuda in _kinds(device):
            for extra in PCH_VARIANTS:
                args = {"path": str(Path(tmp) / "build.ninja"), "name": "kbv_pch_flags", "sources": [str(source)],
                        "extra_cflags": list(extra), "extra_cuda_cflags": [], "extra_sycl_cflags": [],
                        "extra_ldflags": [], "extra_include_paths": [], "with_cuda": with_cuda,
                        "with_sycl": False, "is_standalone": False}
                try:
                    writer(**{k: v for k, v in args.items() if k in takes})
                    text = (Path(tmp) / "build.ninja").read_text()
                except Exception:  # noqa: BLE001 - no CUDA toolkit for the CUDA kind, a torch that changed: no variant
                    continue
                lines = dict(line.split(" = ", 1) for line in text.splitlines() if " = " in line
                             and not line.startswith(" "))
                flags = [f for f in shlex.split(lines.get("cflags", "")) + shlex.split(lines.get("post_cflags", ""))
                         if not f.startswith("-DTORCH_EXTENSION_NAME=")]
                entry = {"cxx": lines.get("cxx", "c++").strip(), "flags": flags, "extra": list(extra),
                         "cuda": with_cuda}
                if all(e["flags"] != flags or e["cxx"] != entry["cxx"] for e in out):
                    out.append(entry)
    return out


def _available_memory() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return BUILD_MEMORY


def build(cache_dir: Path, device: str) -> dict[str, Any]:
    """Compile this toolchain's headers unless they are there (one kbv at a time: a lock beside the folder);
    returns ``complete.json``'s content, or ``{"error": ...}`` where no variant could be built."""
    final = folder(cache_dir, device)
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = ready(cache_dir, device)
        if done is not None:
            return done
        shutil.rmtree(final, ignore_errors=True)  # an interrupted build is never reused
        work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            return _build_into(work, final, device)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _build_into(work: Path, final: Path, device: str) -> dict[str, Any]:
    t0 = time.monotonic()
    sets = flag_sets(device)
    if not sets:
        return {"error": "torch wrote no build file to read the flags from"}
    (work / WRAPPER).parent.mkdir(parents=True)
    (work / WRAPPER).write_text(wrapper_text(_torch_include()))
    (work / f"{WRAPPER}.gch").mkdir()

    def compile_one(i: int) -> dict[str, Any]:
        entry = sets[i]
        target = work / f"{WRAPPER}.gch" / f"{i}.gch"
        cmd = [entry["cxx"], "-x", "c++-header", str(work / WRAPPER), "-o", str(target), *entry["flags"]]
        t = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PCH_BUILD_TIMEOUT_S)
            error = None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["failed"])[-1][:300]
        except (OSError, subprocess.TimeoutExpired) as exc:
            error = f"{type(exc).__name__}: {str(exc)[:300]}"
        if error is not None:
            target.unlink(missing_ok=True)
        return {"file": target.name, "extra": entry["extra"], "cuda": entry["cuda"], "flags": entry["flags"],
                "seconds": round(time.monotonic() - t, 2), "error": error}

    jobs = max(1, min(len(sets), envinfo.cpu_count(), _available_memory() // BUILD_MEMORY))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(compile_one, range(len(sets))))
    built = [r for r in results if r["error"] is None]
    if not built:
        return {"error": results[0]["error"] if results else "no variant"}
    done = {"variants": built, "failed": [r for r in results if r["error"] is not None],
            "built_from": f"{work.name}/{WRAPPER}", "wrapper": f"{final.name}/{WRAPPER}",  # what MARKER holds
            "seconds": round(time.monotonic() - t0, 2), "jobs": jobs, "device": device}
    for path in [work, *work.rglob("*")]:  # the evaluating user's, readable by every worker, writable by none
        path.chmod(0o755 if path.is_dir() else 0o644)
    (work / COMPLETE).write_text(json.dumps(done, indent=1))
    os.rename(work, final)
    return done


def offered(options: EvalOptions, device: str) -> Path | None:
    """The headers' folder for a candidate worker's ``CPATH``: where ``KBV_PCH`` is not ``off``, they are built, and
    candidate workers run as the sandbox user (who cannot write them) and reach them (bound back into the covered
    cache, or a folder every user may pass through)."""
    if options.pch == "off" or ready(options.cache_dir, device) is None:
        return None
    sandbox = sandbox_plan.plan(options.sandbox, device)
    if not (sandbox.get("requested") and sandbox.get("ids")):
        return None
    where = folder(options.cache_dir, device)
    if not (sandbox.get("hide", True) or sandbox_plan.traversable(where)):
        return None
    return where


def wanted(sources: Iterable[str], options: EvalOptions, device: str) -> bool:
    """Whether to build the headers before these builds (``KBV_PCH``): ``on`` for one ``load_inline`` source,
    ``auto`` for ``PCH_MIN_BUILDS`` of them; never where they are there already or would not be offered."""
    if options.pch == "off" or ready(options.cache_dir, device) is not None:
        return False
    sandbox = sandbox_plan.plan(options.sandbox, device)
    if not (sandbox.get("requested") and sandbox.get("ids")):
        return False
    count = sum(1 for text in sources if "load_inline" in text)
    return count >= (1 if options.pch == "on" else PCH_MIN_BUILDS)


def used(extensions_dir: Path, where: Path) -> dict[str, int]:
    """For a build made with the headers offered: how many of its extensions compiled ``main.cpp`` with the
    precompiled header (``used``) and how many read the wrapper as text instead (their flags matched no variant),
    told apart by the path ``MARKER`` left in each ``main.o`` (or, where torch kept no objects, the library); and how
    many compiled their CUDA source with ``torch/types.h`` (``device_header``: ``DEVICE_MARKER`` in the library)."""
    try:
        done = json.loads((where / COMPLETE).read_text())
        built_from, wrapper = os.fsencode(done["built_from"]), os.fsencode(done["wrapper"])
    except (OSError, ValueError, KeyError, TypeError):
        return {"used": 0, "not_used": 0, "device_header": 0}
    counts = {"used": 0, "not_used": 0, "device_header": 0}
    device = DEVICE_TAG.encode()
    for ext in sorted(p for p in Path(extensions_dir).glob("*") if p.is_dir()):
        libraries = [_read(obj) for obj in sorted(ext.glob("*.so"))]  # each read once
        if any(device in data for data in libraries):
            counts["device_header"] += 1
        for data in [_read(ext / "main.o"), *libraries]:
            if built_from in data or wrapper in data:
                counts["used" if built_from in data else "not_used"] += 1
                break
    return counts


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def full_header_env(environ: dict[str, str]) -> dict[str, str]:
    """What a build's environment adds so that its CUDA source reads ``torch/extension.h`` itself
    (``FULL_HEADER_MACRO`` appended to whatever ``NVCC_APPEND_FLAGS`` the worker inherits)."""
    flags = " ".join(f for f in (environ.get("NVCC_APPEND_FLAGS", ""), f"-D{FULL_HEADER_MACRO}") if f)
    return {"NVCC_APPEND_FLAGS": flags}
