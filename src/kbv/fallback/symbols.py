"""Parent side: the library entry points imported by a candidate's built binaries (``nm``/``readelf`` on its
build folders; files cannot be dodged from Python)."""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path
from typing import Any, Iterable

from kbv.fallback.ops import _is_elf, is_compute, op_kind, shared_objects

# ---------------------------------------------------------------------------------------------------------------
# Symbol route. A symbol is the demangled, qualified name of an import, without its parameter list
# ("at::_ops::relu::call", "at::cpu::mm", "cublasSgemm_v2").

#: C-level vendor libraries, by symbol prefix (undecorated C names). Anything imported with one of these prefixes
#: is library compute (their service calls, e.g. ``cublasCreate_v2``, come with compute calls in practice and are
#: ambiguous at worst).
LIBRARY_PREFIXES: dict[str, tuple[str, ...]] = {
    "cublas": ("cublas",),  # cuBLAS and cuBLASLt
    "cudnn": ("cudnn",),
    "cufft": ("cufft",),
    "cusparse": ("cusparse",),
    "cusolver": ("cusolver",),
    "curand": ("curandGenerate",),
    "blas": ("cblas_", "LAPACKE_", "openblas_"),
    "mkl": ("mkl_", "MKL_"),
    "onednn": ("dnnl_", "dnnl::", "mkldnn_", "mkldnn::", "ideep::"),
    "fbgemm": ("fbgemm::",),
    "aten-blas": ("at::native::cpublas::", "at::cuda::blas::", "at::blas::"),
    "aten-solver": ("at::cuda::solver::", "at::native::lapack"),
    "aten-jit": ("at::cuda::jit::",),
}
#: Fortran BLAS/LAPACK names (``sgemm_``, ``dgemv_``, ...).
BLAS_SYMBOL = re.compile(r"^[sdczh](gemm|gemv|gemm3m|symm|symv|syrk|syr2k|trsm|trmm|trsv|trmv|axpy|dot|dotu|dotc|"
                         r"scal|ger|geru|nrm2|asum|getrf|getrs|potrf|potrs|gesv|gesdd|geqrf|syevd)_?$")

#: ATen namespaces of per-backend and composite entry points: ``at::cpu::mm`` calls the CPU kernel directly,
#: bypassing the dispatcher (so the dispatch route never sees it). Names in them are operator names, classified
#: with the operator tables (unknown counts as compute).
ATEN_DIRECT_NAMESPACES: frozenset[str] = frozenset({
    "native", "cpu", "cuda", "mps", "xpu", "compositeexplicitautograd", "compositeimplicitautograd",
    "compositeexplicitautogradnonfunctional", "compositeimplicitautogradnestedtensor",
})
#: Names in those namespaces that are runtime services, not operators (devices, streams, threads, allocator).
#: Besides these, any camelCase name (``getCurrentCUDAStream``, ``getDeviceProperties``) and any nested namespace
#: other than the compute ones above (``at::cuda::detail::``, ``at::cuda::CUDAStream::``) is not compute.
ATEN_RUNTIME_NAMES: frozenset[str] = frozenset({
    "device_count", "current_device", "set_device", "device_synchronize", "stream_synchronize", "warning_state",
    "is_available", "getNumGPUs", "check_device", "get_device", "exchange_device", "maybe_exchange_device",
    "get_num_threads", "set_num_threads", "init_num_threads", "get_thread_num", "in_parallel_region",
    "empty_cpu", "empty_cuda", "empty_strided_cpu", "empty_strided_cuda", "empty_meta", "resize_output",
    "is_pinned", "_pin_memory",
})


#: Evidence that an object carries device code of its own (kernels compiled from the candidate's source): imports of
#: the CUDA/HIP launch and registration entry points that ``<<<...>>>`` launches and fatbinary registration compile
#: to, or a fatbinary section in the object itself (``readelf -S``). A CPU extension has no such evidence: its own
#: loops cannot be told apart from its library calls by what it imports.
OWN_CODE_IMPORTS: frozenset[str] = frozenset({
    "__cudaRegisterFunction", "__cudaRegisterFatBinary", "__cudaPushCallConfiguration", "cudaLaunchKernel",
    "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cuLaunchKernel", "cuLaunchKernelEx",
    "__hipRegisterFunction", "__hipRegisterFatBinary", "__hipPushCallConfiguration", "hipLaunchKernel",
    "hipModuleLaunchKernel",
})
DEVICE_CODE_SECTIONS: tuple[str, ...] = (".nv_fatbin", "__nv_relfatbin", ".nvFatBinSegment", ".hip_fatbin")


def _qualified_name(demangled: str) -> str:
    """``float* at::TensorBase::data_ptr<float>() const`` -> ``at::TensorBase::data_ptr<float>``."""
    name = demangled.split("@", 1)[0].strip()
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and not name.startswith("(anonymous"):
            cut = i
            break
    head = name[:cut]
    # drop a return type: the last space-separated token at template depth 0
    depth, start = 0, 0
    for i, ch in enumerate(head):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == " " and depth == 0:
            start = i + 1
    return head[start:]


def _strip_templates(name: str) -> str:
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


@functools.lru_cache(maxsize=65536)
def symbol_library(qualified: str) -> str | None:
    """The library a (qualified, demangled) imported symbol is a compute entry point of, or None."""
    for library, prefixes in LIBRARY_PREFIXES.items():
        if qualified.startswith(prefixes):
            return library
    if BLAS_SYMBOL.match(qualified):
        return "blas"
    parts = _strip_templates(qualified).split("::")
    if len(parts) < 2 or parts[0] not in ("at", "torch"):
        return None
    if parts[0] == "at" and parts[1] == "_ops" and len(parts) >= 4:
        # at::_ops::<op>_<overload>::call / ::redispatch: the dispatcher entry of an operator
        return "aten" if parts[-1] in ("call", "redispatch") and is_compute(parts[2]) else None
    if parts[0] == "at" and parts[1] in ATEN_DIRECT_NAMESPACES and len(parts) >= 3:
        if parts[1] == "meta":
            return None
        if len(parts) > 3:  # a nested namespace or class: compute only for structured kernels' impl
            if parts[2].startswith("structured_") and is_compute(parts[2]):
                return "aten-direct"
            return None
        name = parts[2]
        if name in ATEN_RUNTIME_NAMES or name != name.lower():  # runtime services, camelCase helpers
            return None
        return "aten-direct" if is_compute(name) else None
    if parts[0] == "at" and (len(parts) == 2 or parts[1] in ("Tensor", "TensorBase")):
        # at::X and Tensor methods: these namespaces also hold helpers, so only listed compute ops count
        return "aten" if op_kind(parts[-1]) == "compute" else None
    if parts[0] == "torch" and len(parts) >= 3 and parts[1] == "nn":
        # the C++ frontend's modules (torch::nn::LinearImpl::forward) and functionals run ATen compute
        if parts[-1] in ("forward", "forward_with_indices"):
            return "torch-nn"
        return "torch-nn" if parts[2] == "functional" and op_kind(parts[-1]) == "compute" else None
    if parts[0] == "torch" and len(parts) == 2:
        return "aten" if op_kind(parts[1]) == "compute" else None
    return None


def _undefined_symbols(path: str, nm: str = "nm") -> list[str]:
    out = subprocess.run([nm, "-D", "--undefined-only", "-C", path], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    names = []
    for line in out.splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and len(parts[0]) == 1:
            names.append(parts[1])
    return names


def _device_sections(path: str, readelf: str = "readelf") -> list[str]:
    out = subprocess.run([readelf, "-S", "-W", path], capture_output=True, text=True, timeout=120, check=True).stdout
    return sorted({name for name in DEVICE_CODE_SECTIONS if re.search(r"\s" + re.escape(name) + r"\s", out)})


def extension_symbols(build_root: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
                      objects: Iterable[str] = ()) -> dict[str, Any]:
    """The library compute entry points the candidate's compiled objects import.

    ``build_root``: a folder or several (the candidate's ``TORCH_EXTENSIONS_DIR`` and ``TRITON_CACHE_DIR``), every
    shared object below is read; ``objects``: more object files (e.g. what the worker saw loaded from outside the
    Python installation). Returns ``{"libraries": [...], "symbols": [qualified names], "objects": [paths],
    "per_object": {path: [library compute symbols]}, "own_code": {path: [evidence of own device code]},
    "errors": [...]}``.
    """
    paths = shared_objects(build_root)
    # a /proc/<pid>/map_files entry opens the mapped file itself (a deleted or renamed one too): keep it as is
    paths = sorted(set(paths) | {o if o.startswith("/proc/") else os.path.realpath(o) for o in objects
                                 if _is_elf(Path(o))})
    libraries: set[str] = set()
    symbols: set[str] = set()
    per_object: dict[str, list[str]] = {}
    own_code: dict[str, list[str]] = {}
    errors: list[str] = []
    for path in paths:
        try:
            names = _undefined_symbols(path)
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"{path}: {type(exc).__name__}: {exc}"[:500])
            continue
        hits, evidence = set(), set()
        for raw in names:
            qualified = _qualified_name(raw)
            library = symbol_library(qualified)
            if library:
                libraries.add(library)
                hits.add(qualified)
            elif qualified in OWN_CODE_IMPORTS:
                evidence.add(qualified)
        try:
            evidence |= {f"section {name}" for name in _device_sections(path)}
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"{path}: readelf: {type(exc).__name__}: {exc}"[:500])
        per_object[path] = sorted(hits)
        own_code[path] = sorted(evidence)
        symbols |= hits
    return {"libraries": sorted(libraries), "symbols": sorted(symbols), "objects": paths,
            "per_object": per_object, "own_code": own_code, "errors": errors}


