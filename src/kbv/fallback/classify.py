"""Parent side: the fallback verdict from the worker's raw counts and the binaries' symbols (``classify``), and
from device time per kernel on a GPU (``classify_gpu``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Iterable

from kbv.fallback.ops import _DATA_MOVEMENT, FORWARD_RANGE, PROFILER_STOPPED, is_compute, shared_objects
from kbv.fallback.symbols import _qualified_name, symbol_library

# ---------------------------------------------------------------------------------------------------------------
# The verdict.

#: Thresholds on the library share (library units / all units, see ``classify``): at or above "fallback" the
#: forward is a fallback (its work is library code); above "partial_fallback" and below "fallback" it is a partial
#: fallback (own kernels and library compute both). 0.9 leaves room for one library op beside nine own launches
#: before "partial" becomes "fallback"; "partial_fallback" at 0 means any library compute beside own kernels is
#: reported.
FALLBACK_THRESHOLDS: dict[str, float] = {"fallback": 0.9, "partial_fallback": 0.0}


def share_flags(share: float | None, thresholds: dict[str, float]) -> list[str]:
    """``fallback`` at or above the fallback threshold, ``partial_fallback`` above the partial one, else none."""
    if share is None:
        return []
    if share >= thresholds["fallback"]:
        return ["fallback"]
    return ["partial_fallback"] if share > thresholds["partial_fallback"] else []


def classify(profile: dict[str, Any], symbols: dict[str, Any] | None = None,
             thresholds: dict[str, float] | None = None) -> dict[str, Any]:
    """A fallback verdict from both routes (trusted side: recomputes every classification from raw names).

    Units of work, counted over one forward:

    - library units: each compute (or unknown) operator the dispatcher saw, and each the CPU profiler saw that the
      dispatch mode did not (``hidden_ops``, listed in ``compute_ops`` as ``hidden:aten::relu``; a call that
      stopped the profiler counts as one); each call into an extension module
      whose object imports library compute symbols and that dispatched no compute op while running (opaque
      library work: ``at::cpu::mm``, cuBLAS); and one unit per object that imports library compute symbols but
      whose module was never seen called (an entry point the dispatch route could not attribute, e.g. a
      ``TORCH_LIBRARY`` op calling ``at::cpu::mm``, or a fallback branch);
    - own units: Triton launches, opaque calls of the candidate's registered ops (inside which no library compute
      and no other own call ran), and calls into extension modules whose object imports no library compute
      symbol. A call into an extension that imports library compute counts as library, and also as own only when
      its object shows device code of its own (``OWN_CODE_IMPORTS`` / ``DEVICE_CODE_SECTIONS``: a CUDA extension
      with its own kernels beside cuBLAS is partial); a CPU extension's own loops cannot be told apart from its
      library calls, and ambiguous counts as library.

    ``library_share`` = library / (library + own), ``None`` when neither ran (``no_work_observed`` is then true
    unless some object imports library compute: a forward of views only, or one whose work hid from both routes).
    Flags: ``fallback`` when the share is at least ``thresholds["fallback"]`` (a forward with library compute and no
    own kernel has share 1), ``partial_fallback`` when above ``thresholds["partial_fallback"]`` and below that.
    """
    thresholds = {**FALLBACK_THRESHOLDS, **(thresholds or {})}
    symbols = symbols or {}
    aten_ops = {str(k): int(v) for k, v in (profile.get("aten_ops") or {}).items()}
    hidden = {str(k): int(v) for k, v in (profile.get("hidden_ops") or {}).items() if is_compute(str(k))}
    if (profile.get("profiler") or {}).get("status") == "stopped":
        hidden[PROFILER_STOPPED] = 1  # the call stopped the profiler: what it hid is unknown, counted as one op
    compute_ops = {k: v for k, v in aten_ops.items() if is_compute(k)} | {f"hidden:{k}": v for k, v in hidden.items()}
    per_object: dict[str, list[str]] = {}
    for path, names in (symbols.get("per_object") or {}).items():
        hits = sorted({n for n in names if symbol_library(_qualified_name(n))})
        if hits:
            per_object[os.path.realpath(path)] = hits
    library_objects = set(per_object)
    own_code_objects = {os.path.realpath(p) for p, evidence in (symbols.get("own_code") or {}).items() if evidence}

    own_units = 0
    library_units = sum(compute_ops.values())
    opaque_calls = 0
    backed_modules, mixed_modules, called_objects = [], [], set()
    for key, count in (profile.get("own_calls") or {}).items():
        if key.startswith("triton:"):
            own_units += int(count)
    for entry in (profile.get("custom_ops") or {}).values():
        own_units += int(entry.get("opaque", 0))
    for module, entry in (profile.get("extension_calls") or {}).items():
        file = os.path.realpath(entry.get("file") or "") if entry.get("file") else ""
        calls, with_compute = int(entry.get("calls", 0)), int(entry.get("with_compute_ops", 0))
        called_objects.add(file)
        if file in library_objects:
            backed_modules.append(module)
            opaque_calls += max(0, calls - with_compute)
            if file in own_code_objects:  # its own device kernels beside library compute
                mixed_modules.append(module)
                own_units += calls
        else:
            own_units += calls
    unattributed = sorted(library_objects - called_objects)
    library_units += opaque_calls + len(unattributed)

    total = library_units + own_units
    share = library_units / total if total else None
    flags = share_flags(share, thresholds)
    libraries = sorted(set(symbols.get("libraries") or []) | ({"aten"} if compute_ops else set()))
    return {
        "library_share": share,
        "library_units": library_units,
        "own_units": own_units,
        "compute_ops": compute_ops,
        "hidden_ops": hidden,
        "opaque_library_calls": opaque_calls,
        "library_backed_modules": sorted(backed_modules),
        "mixed_modules": sorted(mixed_modules),
        "unattributed_objects": unattributed,
        "library_symbols": sorted({s for names in per_object.values() for s in names}),
        "libraries": libraries,
        "own_calls": dict(profile.get("own_calls") or {}),
        "no_work_observed": total == 0 and not per_object,
        "thresholds": thresholds,
        "flags": flags,
    }



def kernel_key(name: str) -> str:
    """A kernel or symbol name reduced to its qualified name with template arguments (no return type, no
    parameters), so a profiler kernel name and ``nm -C`` output compare equal."""
    return _qualified_name(name.strip())


def own_kernel_names(build_roots: Iterable[str | os.PathLike[str]]) -> dict[str, Any]:
    """Parent side: names the candidate itself compiled: symbols defined in its shared objects (``nm -C
    --defined-only``, falling back to the dynamic table) and kernel names in its Triton cache's metadata."""
    import json

    roots = [Path(r) for r in build_roots if r and Path(r).is_dir()]
    defined: set[str] = set()
    triton: set[str] = set()
    errors: list[str] = []
    for path in shared_objects([str(r) for r in roots]):
        for args in (["nm", "-C", "--defined-only", path], ["nm", "-D", "-C", "--defined-only", path]):
            try:
                text = subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout
            except (OSError, subprocess.SubprocessError) as exc:
                errors.append(f"{path}: {type(exc).__name__}"[:300])
                continue
            for line in text.splitlines():
                parts = line.strip().split(None, 2)
                if len(parts) == 3 and parts[1] in "TtWw":
                    defined.add(kernel_key(parts[2]))
            if defined:
                break
    for root in roots:
        for meta in root.rglob("*.json"):
            try:
                data = json.loads(meta.read_text())
            except (OSError, ValueError):
                continue
            name = data.get("name") if isinstance(data, dict) else None
            if isinstance(name, str) and name:
                triton.add(name)
    return {"defined": sorted(defined), "triton": sorted(triton), "errors": errors}


#: PyTorch's own copy and fill kernels, known by name where no launcher is recorded (a recording of every timed call
#: has no CPU-side events: ``kbv.eval.timed_record``): data movement, as ``aten::copy_`` and ``aten::fill_`` are.
_ATEN_DATA_KERNELS = ("copy_kernel", "FillFunctor", "CatArrayBatchedCopy")


def classify_gpu(kernels: list[dict[str, Any]], own: dict[str, Any],
                 thresholds: dict[str, float] | None = None) -> dict[str, Any]:
    """Trusted side: each kernel as own, library or data movement; shares by device time; flags as ``classify``.
    ``kernels``: ``{"name", "us", "launcher"}`` each (the ATen operator that launched it, or None), with ``calls``
    where one entry stands for several launches (``us`` then their total)."""
    thresholds = {**FALLBACK_THRESHOLDS, **(thresholds or {})}
    defined = set(own.get("defined") or [])
    triton = {n for n in own.get("triton") or [] if not n.startswith("triton_")}  # triton_*: Inductor's naming
    totals = {"own": 0.0, "library": 0.0, "data": 0.0}
    per_kernel: dict[tuple[str, str], dict[str, Any]] = {}
    for k in kernels:
        name, us, launcher = str(k.get("name", "")), float(k.get("us", 0.0)), k.get("launcher")
        if name == FORWARD_RANGE:
            continue  # a range, not a kernel
        launcher_name = launcher if isinstance(launcher, str) else ""
        aten = launcher_name.startswith("aten::")
        if name.startswith(_DATA_MOVEMENT) or (aten and not is_compute(launcher_name.replace("::", ".", 1))) or (
                launcher is None and "at::native::" in name and any(m in name for m in _ATEN_DATA_KERNELS)):
            kind = "data"
        elif aten:
            kind = "library"
        elif kernel_key(name) in defined or name in triton or kernel_key(name) in triton:
            kind = "own"
        else:
            kind = "library"  # a vendor kernel called without ATen, Inductor's, or a name we cannot place
        totals[kind] += us
        entry = per_kernel.setdefault((name, kind), {"name": name[:200], "class": kind, "launcher": launcher,
                                                     "calls": 0, "us": 0.0})
        entry["calls"] += int(k.get("calls", 1))
        entry["us"] += us
    compute = totals["own"] + totals["library"]
    share = totals["library"] / compute if compute > 0 else None
    flags = share_flags(share, thresholds)
    ranked = sorted(per_kernel.values(), key=lambda e: -e["us"])
    return {"library_share_time": share, "own_us": totals["own"], "library_us": totals["library"],
            "data_movement_us": totals["data"], "kernels": ranked[:40],
            "library_kernels": sorted({e["name"] for e in ranked if e["class"] == "library"})[:40],
            "thresholds": thresholds, "flags": flags}
