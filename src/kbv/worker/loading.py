"""Loading problem and candidate modules and building their models, inside a worker process."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def import_file(path: str | Path, module_name: str) -> ModuleType:
    """Import a file as a real module (Triton's ``@jit`` needs real source files)."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def exec_source(source: bytes, path: str | Path, module_name: str) -> ModuleType:
    """A module made by compiling and executing ``source`` itself (named ``path`` in tracebacks): no import system,
    so no ``__pycache__`` is read or written."""
    module = ModuleType(module_name)
    module.__file__ = str(path)
    code = compile(source, str(path), "exec", dont_inherit=True)
    sys.modules[module_name] = module
    exec(code, module.__dict__)
    return module


def load_problem_module(path: str | Path, profile: str | None, shape: dict[str, Any] | None = None,
                        source: bytes | None = None) -> ModuleType:
    """Load a problem from ``source`` (the bytes the parent hashed; else the file's bytes, read once), never through
    a ``__pycache__`` a worker could have written; then apply its size profile and one shape's overrides (a
    KBV_SHAPES entry or a held-out shape), both as module-constant assignments."""
    if source is None:
        source = Path(path).read_bytes()
    return apply_sizes(exec_source(source, path, "kbv_problem"), profile, shape)


def apply_sizes(module: ModuleType, profile: str | None, shape: dict[str, Any] | None = None) -> ModuleType:
    """Assign a problem module's size profile (``KBV_PROFILES[profile]``), then one shape's overrides."""
    if profile:
        overrides = getattr(module, "KBV_PROFILES", {}).get(profile)
        if overrides is None:
            raise KeyError(f"problem {Path(module.__file__ or '?').name} has no size profile {profile!r}")
        for name, value in overrides.items():
            setattr(module, name, value)
    for name, value in (shape or {}).items():
        setattr(module, name, value)
    return module


def shapes_of(module: ModuleType) -> dict[str, Any]:
    """The module-level int/float/tuple constants a problem's shapes come from (recorded in results)."""
    out: dict[str, Any] = {}
    for name, value in vars(module).items():
        if name.startswith("_") or name.isupper():
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float, tuple, list)):
            continue
        if isinstance(value, (tuple, list)) and not all(isinstance(v, (int, float)) for v in value):
            continue
        out[name] = list(value) if isinstance(value, tuple) else value
    return out


def init_inputs(problem: ModuleType) -> list[Any]:
    return list(problem.get_init_inputs())


# captured when kbv's worker modules load, before any candidate import
_manual_seed = torch.manual_seed
_seed_cpu = torch.default_generator.manual_seed
_cuda_initialized = torch.cuda.is_initialized
_cuda_available = torch.cuda.is_available


def seed_everything(seed: int) -> None:
    """Seed torch's generators (CPU and every CUDA device) through functions captured before candidate code ran:
    a candidate that replaces ``torch.manual_seed`` learns nothing from kbv's seeding.

    The generators are seeded directly, as ``torch.manual_seed`` does for these two backends: that function also
    queues a seed for every backend that is not initialised (XPU, MTIA, CUDA before its first use), formatting a
    stack trace each time, which cost about 0.2 ms per call here, once per timed trial. Only CUDA present but not yet
    initialised takes ``torch.manual_seed`` itself (its queued seed applies when CUDA starts)."""
    _seed_cpu(seed)
    if _cuda_initialized():
        for generator in torch.cuda.default_generators:
            generator.manual_seed(seed)
    elif _cuda_available():
        _manual_seed(seed)


def build_model(cls: type, init_args: list[Any], seed: int, device: str, precision: str, mode: str) -> nn.Module:
    """Construct ``cls(*init_args)`` under a seed, move it to the device and precision, and set its mode."""
    seed_everything(seed)
    with torch.device(device):
        model = cls(*init_args)
    if not isinstance(model, nn.Module):
        raise TypeError(f"{cls.__name__}(...) is not an nn.Module")
    model = model.to(device=device)
    if precision != "fp32":
        model = model.to(dtype=DTYPES[precision])
    model.train(mode == "train")
    return model


def state_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and buffers by name (host copies are made when the state is sent)."""
    state = {name: p.detach() for name, p in model.named_parameters()}
    state.update({name: b.detach() for name, b in model.named_buffers() if b is not None})
    return state


def load_matching_state(model: nn.Module, state: dict[str, torch.Tensor]) -> tuple[list[str], list[str], list[str]]:
    """Copy same-name, same-shape tensors into the model. Returns (matched, candidate-only, reference-only) names."""
    own = state_of(model)
    matched: list[str] = []
    with torch.no_grad():
        for name, tensor in own.items():
            ref = state.get(name)
            if ref is not None and tuple(ref.shape) == tuple(tensor.shape):
                tensor.copy_(ref.to(device=tensor.device, dtype=tensor.dtype))
                matched.append(name)
    candidate_only = sorted(set(own) - set(matched))
    reference_only = sorted(set(state) - set(matched))
    return sorted(matched), candidate_only, reference_only


PERTURB_ZERO_SCALE = 0.1  # noise scale for a parameter that is all zeros (a bias as constructed)
PERTURB_RELATIVE_SCALE = 0.5  # noise scale relative to a parameter's own RMS


def perturb_parameters(model: nn.Module, seed: int) -> list[str]:
    """Add fresh noise to every floating parameter (not buffers): ``p += s * randn`` with ``s`` half the
    parameter's RMS, or 0.1 where it is all zeros. Identity defaults (LayerNorm weight 1 and bias 0, a zero bias)
    then matter, so a kernel that ignores them fails. Returns the names perturbed."""
    generators: dict[torch.device, torch.Generator] = {}  # one per device, seeded alike: the noise is drawn where
    names = []  # the parameter lives (a 1 GiB weight's noise drawn on the CPU took seconds)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not param.is_floating_point() or param.numel() == 0:
                continue
            if param.device not in generators:
                generators[param.device] = torch.Generator(device=param.device).manual_seed(seed % 2**63)
            rms = float(param.detach().double().pow(2).mean().sqrt())
            scale = PERTURB_RELATIVE_SCALE * rms if rms > 0 else PERTURB_ZERO_SCALE
            noise = torch.randn(param.shape, generator=generators[param.device], dtype=torch.float32,
                                device=param.device).to(dtype=param.dtype)
            param.add_(noise * scale)
            names.append(name)
    return names
