"""Prompts for single-turn generation: kbv's own one-shot prompt per backend and precision, a user's text template,
or KernelBench's ``prompts.toml`` rendered by KernelBench's own ``prompt_constructor_toml`` from a checkout.

Release contract: a prompt is rendered from the problem file's source alone (`Problem.path`); nothing from the
suite's evaluator side (held-out shapes, weights, provenance, roofline) is read here.
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BACKENDS = ("cuda", "triton", "cpp")
PRECISIONS = ("fp32", "bf16")
KBV_TEMPLATE = "kbv-one-shot/2"  # /2: kbv's own wording (/1 paraphrased KernelBench's)

_BACKEND_DISPLAY = {
    "cuda": "CUDA kernels",
    "triton": "Triton kernels",
    "cpp": "C++ CPU kernels",
}

_BACKEND_HOW = {
    "cuda": ("Write the kernels in CUDA C++ and compile them inline with "
             "`torch.utils.cpp_extension.load_inline(cpp_sources=..., cuda_sources=..., functions=[...])` at import "
             "time. The code runs on an NVIDIA GPU; inputs arrive on the GPU."),
    "triton": ("Write the kernels with Triton (`import triton`, `import triton.language as tl`, `@triton.jit`) and "
               "launch them from `forward`. The code runs on an NVIDIA GPU; inputs arrive on the GPU."),
    "cpp": ("Write the kernels in C++ and compile them inline with "
            "`torch.utils.cpp_extension.load_inline(cpp_sources=..., functions=[...])` at import time (no CUDA). "
            "The code runs on the CPU; inputs arrive on the CPU."),
}

_PRECISION_TEXT = {
    "fp32": ("Precision: FP32 (32-bit floating point). Inputs and parameters are float32 and outputs must be "
             "float32 with the reference's shapes."),
    "bf16": ("Precision: BF16 (bfloat16). Floating inputs and parameters are cast to bfloat16 before the forward "
             "runs; outputs must keep the reference's shapes and dtypes (bfloat16)."),
}

EXAMPLE_MODEL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Adds two tensors elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


size = 4096


def get_inputs():
    return [torch.rand(size, size), torch.rand(size, size)]


def get_init_inputs():
    return []
'''

_EXAMPLE_CUDA = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

template <typename T>
__global__ void add_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    a = a.contiguous();
    b = b.contiguous();
    auto out = torch::empty_like(a);
    const int64_t n = a.numel();
    if (n == 0) return out;
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 65535);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, a.scalar_type(), "add_cuda", [&] {
        add_kernel<scalar_t><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
            a.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n);
    });
    return out;
}
"""

add_ext = load_inline(
    name="add_ext",
    cpp_sources="torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);",
    cuda_sources=cuda_source,
    functions=["add_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return add_ext.add_cuda(a, b)
'''

_EXAMPLE_TRITON = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.contiguous()
        b = b.contiguous()
        out = torch.empty_like(a)
        n = out.numel()
        grid = (triton.cdiv(n, 1024),)
        add_kernel[grid](a, b, out, n, BLOCK=1024)
        return out
'''

_EXAMPLE_CPP = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor add_cpu(torch::Tensor a, torch::Tensor b) {
    a = a.contiguous();
    b = b.contiguous();
    auto out = torch::empty_like(a);
    const int64_t n = a.numel();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, a.scalar_type(), "add_cpu", [&] {
        const scalar_t* pa = a.data_ptr<scalar_t>();
        const scalar_t* pb = b.data_ptr<scalar_t>();
        scalar_t* po = out.data_ptr<scalar_t>();
        for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
    });
    return out;
}
"""

add_ext = load_inline(
    name="add_ext",
    cpp_sources=cpp_source,
    functions=["add_cpu"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return add_ext.add_cpu(a, b)
'''

EXAMPLES = {"cuda": _EXAMPLE_CUDA, "triton": _EXAMPLE_TRITON, "cpp": _EXAMPLE_CPP}

_KBV_PROMPT = """Your task: make a PyTorch program faster by writing custom {backend_display} for it.

What you rewrite is your choice. Swap any subset of its operators for your own kernels and keep the rest as \
PyTorch, fuse neighbouring operators into one kernel (a matmul and the activation after it, say), or compute the \
same result by a better algorithm (an online softmax, say). {backend_how}

{precision_text} Your ModelNew is checked against Model for correctness on freshly drawn random inputs, then timed \
against it.

An example first. This program:
```python
{example_model}```
rewritten with custom {backend_display}:
```python
{example_new}```

Now the program to make faster:
```python
{ref_arch_src}```

Rewrite Model with custom {backend_display} and call the new class ModelNew; keep the constructor and forward \
signatures of Model. Reply with one ```python code block holding the complete program: working code that \
compiles and runs, not a sketch, and nothing besides it (no explanation, no tests).
"""


@dataclass(frozen=True)
class Prompt:
    text: str
    template: str  # a name for the template, recorded with each generation

    @property
    def sha256(self) -> str:
        return prompt_sha256(self.text)


def prompt_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def problem_source(problem_path: str | Path) -> str:
    """The problem file's source: the only problem data a prompt may contain."""
    return Path(problem_path).read_text(encoding="utf-8")


def _with_newline(s: str) -> str:
    return s if s.endswith("\n") else s + "\n"


def render_kbv(ref_arch_src: str, backend: str = "cuda", precision: str = "fp32") -> str:
    """kbv's own one-shot prompt for one problem source, backend and precision."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (choose from {', '.join(PRECISIONS)})")
    # literal substitution (str.format would read the braces of the code)
    text = _KBV_PROMPT
    fields = {
        "backend_display": _BACKEND_DISPLAY[backend], "backend_how": _BACKEND_HOW[backend],
        "precision_text": _PRECISION_TEXT[precision], "example_model": EXAMPLE_MODEL,
        "example_new": EXAMPLES[backend],
    }
    for name, value in fields.items():
        text = text.replace("{" + name + "}", value)
    return text.replace("{ref_arch_src}", _with_newline(ref_arch_src))


# --- user templates -------------------------------------------------------------------------------------------

TEMPLATE_FIELDS = ("backend", "backend_display", "precision", "problem", "ref_arch_src")  # the source last


def render_text_template(template: str, ref_arch_src: str, backend: str, precision: str, problem: str) -> str:
    """A user's text template: ``{ref_arch_src}``, ``{backend}``, ``{backend_display}``, ``{precision}`` and
    ``{problem}`` are replaced literally; no other braces are interpreted."""
    values = {"ref_arch_src": ref_arch_src, "backend": backend, "backend_display": _BACKEND_DISPLAY.get(backend, backend),
              "precision": precision, "problem": problem}
    out = template
    for name in TEMPLATE_FIELDS:
        out = out.replace("{" + name + "}", values[name])
    return out


# --- KernelBench's prompts.toml -------------------------------------------------------------------------------


class TemplateError(ValueError):
    """A --prompt-template that cannot be used (missing checkout, unknown backend, ...)."""


def _tomllib() -> types.ModuleType:
    try:
        import tomllib  # Python >= 3.11
    except ImportError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise TemplateError("reading a .toml template needs Python >= 3.11 (tomllib) or the tomli package") from None
    return tomllib


def _find_constructor(toml_path: Path, checkout: Path | None) -> Path:
    candidates = []
    if checkout is not None:
        candidates += [checkout / "src" / "kernelbench", checkout / "kernelbench", checkout]
    candidates += [p for p in toml_path.resolve().parents][:4]
    for folder in candidates:
        f = folder / "prompt_constructor_toml.py"
        if f.is_file():
            return f
    raise TemplateError(f"{toml_path}: no KernelBench prompt_constructor_toml.py found beside it"
                        + (f" or in {checkout}" if checkout else "") + " (give --kernelbench CHECKOUT)")


def load_kernelbench_constructor(constructor: Path) -> types.ModuleType:
    """Import KernelBench's ``prompt_constructor_toml`` from a checkout, at run time.

    Its module-level imports are satisfied by stand-ins inserted for the import only: ``tomli`` by the standard
    library's ``tomllib``, and ``kernelbench.utils`` (which loads ``.env`` files, API clients and patches torch at
    import) by a small module giving the four path helpers the constructor uses, resolved against the checkout."""
    package_dir = constructor.parent.resolve()
    repo_top = package_dir.parent.parent

    def read_file(path: str) -> str:
        return Path(path).read_text(encoding="utf-8")

    def get_package_resource_path(relative: str) -> str:
        path = package_dir / relative
        if not path.exists():
            raise FileNotFoundError(f"Could not find resource: {relative}")
        return str(path)

    def resolve_path(rel: str) -> str:
        if Path(rel).is_absolute():
            return rel
        if rel.startswith("src/kernelbench/"):
            return get_package_resource_path(rel[len("src/kernelbench/"):])
        path = repo_top / rel
        if path.exists():
            return str(path)
        raise FileNotFoundError(f"Could not resolve path: {rel}")

    utils = types.ModuleType("kernelbench.utils")
    utils.read_file = read_file  # type: ignore[attr-defined]
    utils.get_package_resource_path = get_package_resource_path  # type: ignore[attr-defined]
    utils.resolve_path = resolve_path  # type: ignore[attr-defined]
    utils.REPO_TOP_PATH = str(repo_top)  # type: ignore[attr-defined]
    package = types.ModuleType("kernelbench")
    package.__path__ = [str(package_dir)]
    package.utils = utils  # type: ignore[attr-defined]
    stand_ins = {"tomli": _tomllib(), "kernelbench": package, "kernelbench.utils": utils}
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    try:
        spec = importlib.util.spec_from_file_location("kernelbench.prompt_constructor_toml", constructor)
        if spec is None or spec.loader is None:
            raise TemplateError(f"cannot import {constructor}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    return module


def _is_kernelbench_toml(path: Path) -> bool:
    tomllib = _tomllib()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False
    return isinstance(data.get("backends"), dict) and isinstance(data.get("options"), dict)


def make_renderer(template: Path | None, backend: str, precision: str, *, option: str = "one_shot",
                  kernelbench: Path | None = None) -> tuple[str, Callable[[str, str], str]]:
    """(template name, render(ref_arch_src, problem key) -> prompt text) for the chosen template.

    No template: kbv's own. A KernelBench ``prompts.toml`` (``[backends]`` and ``[options]`` tables): KernelBench's
    ``render_prompt_by_option`` with ``option`` (``--prompt-option``). Anything else: a text template."""
    if template is None:
        render_kbv("", backend, precision)  # validates the backend and precision now
        return f"{KBV_TEMPLATE}/{backend}/{precision}", lambda src, key: render_kbv(src, backend, precision)
    template = Path(template)
    if not template.is_file():
        raise TemplateError(f"{template}: no such template file")
    if template.suffix == ".toml" and _is_kernelbench_toml(template):
        constructor_path = _find_constructor(template, kernelbench)
        try:
            constructor = load_kernelbench_constructor(constructor_path)
        except TemplateError:
            raise
        except Exception as exc:  # noqa: BLE001 - another KernelBench version: say so in one line
            raise TemplateError(f"{constructor_path}: cannot import it ({type(exc).__name__}: {exc})") from None
        data = _tomllib().loads(template.read_text(encoding="utf-8"))
        if backend not in data["backends"]:
            raise TemplateError(f"{template}: KernelBench's prompts have no backend {backend!r} "
                                f"(it has {', '.join(sorted(data['backends']))})")
        if option not in data["options"]:
            raise TemplateError(f"{template}: no prompt option {option!r} (it has {', '.join(sorted(data['options']))})")
        digest = hashlib.sha256(template.read_bytes()).hexdigest()[:12]

        def render(src: str, key: str) -> str:
            return constructor.render_prompt_by_option(prompts_toml=str(template), backend=backend, option=option,
                                                       context={"ref_arch_src": src}, precision=precision)

        try:
            render("", "")  # fail now, not per problem, on a template that cannot render
        except Exception as exc:  # noqa: BLE001 - KernelBench's own errors (KeyError, FileNotFoundError, ...)
            raise TemplateError(f"{template}: KernelBench's constructor cannot render it "
                                f"({type(exc).__name__}: {exc})") from None
        return f"kernelbench:{template.name}@{digest}/{option}/{backend}/{precision}", render
    text = template.read_text(encoding="utf-8")
    if "{ref_arch_src}" not in text:
        raise TemplateError(f"{template}: a text template must contain {{ref_arch_src}} (the problem's source)")
    digest = hashlib.sha256(template.read_bytes()).hexdigest()[:12]
    return (f"file:{template.name}@{digest}/{backend}/{precision}",
            lambda src, key: render_text_template(text, src, backend, precision, key))
