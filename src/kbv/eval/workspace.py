"""Workspaces of one pair's workers: build folders, environments and the ``WorkerSpec`` of each role and stage
(the candidate's files copied into a private folder handed to the sandbox user when there is one)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from kbv import envinfo
from kbv.eval import pch
from kbv.eval.options import EvalOptions
from kbv.judge_fused import FUSED_MIN_BYTES
from kbv.problems import Problem
from kbv.problems.candidates import Candidate
from kbv.protocol import STALE_BUILD_LOCK_S
from kbv.sandbox import plan as sandbox_plan
from kbv.sandbox.launch import WorkerSpec

SANDBOX_BUILD_ROOT = Path("/var/tmp/kbv-sandbox-build")


def build_dir(candidate: Candidate, device: str, cache_dir: Path) -> Path:
    """Per-candidate extension folder, named by a hash of the source and the toolchain: concurrent builds of
    different sources never collide, and a rebuild of the same source is a cache hit."""
    key = hashlib.sha256(f"{candidate.sha256}|{envinfo.toolchain_id(device)}".encode()).hexdigest()[:24]
    return cache_dir / "build" / key


def _candidate_env(candidate: Candidate, device: str, gpu: int | None, options: EvalOptions, work: Path) -> dict[str, str]:
    build = build_dir(candidate, device, options.cache_dir)
    env = {
        "TORCH_EXTENSIONS_DIR": str(build / "torch_extensions"),
        "TRITON_CACHE_DIR": str(build / "triton"),
        "TMPDIR": str(work),
        "MAX_JOBS": str(options.build_jobs or envinfo.cpu_count()),
    }
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        cap = envinfo.gpu_identity(gpu).get("compute_capability")
        if cap and "TORCH_CUDA_ARCH_LIST" not in os.environ:
            env["TORCH_CUDA_ARCH_LIST"] = cap
    headers = pch.offered(options, device)
    if headers is not None:  # searched before torch's own headers: its precompiled torch/extension.h
        env["CPATH"] = str(headers)
        if device != "cpu" and not options.device_header:  # the CUDA source reads torch/extension.h itself
            env |= pch.full_header_env(dict(os.environ))
    return env


BUILD_COMPLETE = ".kbv-build-complete"  # a build folder counts only once this marker exists (written by rename)


def build_folders(candidate: Candidate, device: str, cache_dir: Path) -> list[Path]:
    """Where a candidate's build may live: its hash-named folder in the cache, or under the sandbox build root."""
    build = build_dir(candidate, device, cache_dir)
    return [build, SANDBOX_BUILD_ROOT / build.name]


def discard_torn_builds(candidate: Candidate, device: str, cache_dir: Path) -> list[Path]:
    """Remove a build folder of this candidate that an earlier, interrupted compile left without its completion
    marker (a torn build is never reused); returns what was removed."""
    removed = []
    for folder in build_folders(candidate, device, cache_dir):
        if folder.is_dir() and not (folder / BUILD_COMPLETE).exists():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def built_already(candidate: Candidate, device: str, cache_dir: Path) -> bool:
    """Whether a complete build of this candidate is in the cache (its compile stage only imports it)."""
    return any((folder / BUILD_COMPLETE).exists() for folder in build_folders(candidate, device, cache_dir))


BUILD_GUARDS = Path("/var/tmp/kbv-build-guards")  # one flock file per build key, shared by every kbv on the machine


@contextmanager
def build_guard(candidate: Candidate, device: str, cache_dir: Path) -> Iterator[None]:
    """Hold this candidate's build key exclusively (``flock``, released by the kernel even when kbv is killed) for
    a compile stage: a second kbv process compiling the same source waits, then finds the build done."""
    try:
        BUILD_GUARDS.mkdir(parents=True, exist_ok=True)
        guard = BUILD_GUARDS / build_dir(candidate, device, cache_dir).name
        fd = os.open(guard, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:  # not ours to create (another user's kbv): no guard, as before
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def clear_stale_build_locks(candidate: Candidate, device: str, cache_dir: Path,
                            sleep: Callable[[float], None] = time.sleep) -> list[Path]:
    """Remove torch's extension lock files (``<ext>/lock``) that no build holds, from this candidate's build folders,
    complete ones included: a process killed while torch held one (even for the quick check of a cached build)
    leaves it, and every later import of that extension waits on it for ever. Run under ``build_guard``, so no
    compile of this source runs elsewhere; a later stage's import elsewhere holds one for a second or so, so a lock
    younger than ``STALE_BUILD_LOCK_S`` is waited on until it is gone or that old. Returns what was removed."""
    removed = []
    for folder in build_folders(candidate, device, cache_dir):
        for lock in sorted(folder.glob("torch_extensions/*/lock")):
            try:
                age = time.time() - lock.stat().st_mtime
                while age < STALE_BUILD_LOCK_S:
                    sleep(min(1.0, STALE_BUILD_LOCK_S - age))
                    age = time.time() - lock.stat().st_mtime
                lock.unlink()
                removed.append(lock)
            except FileNotFoundError:  # released meanwhile
                continue
    return removed


def publish_build(spec: WorkerSpec) -> None:
    """Mark a candidate's build folder complete (the marker is written whole, by rename)."""
    from kbv.files import write_atomic

    ext = (spec.env or {}).get("TORCH_EXTENSIONS_DIR")
    if ext and Path(ext).parent.is_dir():
        write_atomic(Path(ext).parent / BUILD_COMPLETE, "complete\n")


def own_roots(spec: WorkerSpec) -> list[Path]:
    """A candidate worker's build folders (its extensions and its Triton cache): its own code, for kbv.fallback."""
    env = spec.env or {}
    return [Path(env[k]) for k in ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR") if env.get(k)]


def handoff_kinds(options: EvalOptions) -> tuple[str, ...]:
    """The output descriptors workers use: sealed memfds always, CUDA VMM allocations when ``cuda_handoff``."""
    return ("host", "cuda") if options.cuda_handoff else ("host",)


def _headers_kept(options: EvalOptions, device: str) -> list[str]:
    """The precompiled headers' folder, bound back read-only into the covered cache wherever it exists, offered or
    not: a build made with it lists its wrapper among its dependencies, and ninja would rebuild one that is gone."""
    where = pch.folder(options.cache_dir, device)
    return [str(where)] if pch.ready(options.cache_dir, device) is not None else []


def candidate_spec(problem: Problem, candidate: Candidate, options: EvalOptions, device: str, gpu: int | None,
                   scratch: Path, stage: str, shape: dict[str, Any] | None = None) -> WorkerSpec:
    """A candidate worker's spec. When sandboxing, the candidate and problem files are copied into a private work
    folder owned by the sandbox user, and the build folder is handed to that user too."""
    work = scratch / f"{stage}-candidate"
    work.mkdir(parents=True, exist_ok=True)
    env = _candidate_env(candidate, device, gpu, options, work)
    candidate_path, problem_path, confine_spec = str(candidate.path), str(problem.path), None
    sandbox = sandbox_plan.plan(options.sandbox, device)
    ids = sandbox.get("ids")
    if sandbox["requested"]:
        protected = [*sandbox_plan.protected_code(), *options.protect]
        confine_spec = {"network": sandbox["network"], "pid": sandbox["pid"],
                        "ids": [ids[0], ids[1]] if ids else None,
                        "read_only": protected if sandbox["read_only"] else None,
                        "seccomp": bool(sandbox.get("seccomp")),
                        "keep": [*sandbox_plan.runtime_paths(), *_headers_kept(options, device)],
                        "hide": sandbox_plan.hidden_paths(problem.path, options.cache_dir)
                        if sandbox.get("hide", True) else []}
    if ids is not None:
        src = work / "src"
        src.mkdir(exist_ok=True)
        candidate_path = str(shutil.copy2(candidate.path, src / candidate.path.name))
        build = Path(env["TORCH_EXTENSIONS_DIR"]).parent
        if not sandbox_plan.traversable(build.parent):  # e.g. a cache under /root: build somewhere the user can reach
            build = SANDBOX_BUILD_ROOT / build.name
            env["TORCH_EXTENSIONS_DIR"], env["TRITON_CACHE_DIR"] = str(build / "torch_extensions"), str(build / "triton")
        build.mkdir(parents=True, exist_ok=True)
        scratch.chmod(scratch.stat().st_mode | 0o001)  # the user may pass through the scratch folder, not list it
        sandbox_plan.hand_over(work, ids)
        sandbox_plan.hand_over(build, ids)
        env["HOME"] = str(work)
    return WorkerSpec(
        role="candidate", device=device, problem_path=problem_path, profile=options.resolved_profile(device, problem),
        precision=options.precision, mode=problem.mode, work_dir=work, log_path=scratch / f"{stage}-candidate.log",
        candidate_path=candidate_path, unscaled=problem.unscaled_inputs, env=env,
        threads=options.resolved_threads(device), confine=confine_spec, stage=stage, shape=shape,
        problem_sha256=problem.source_sha256, handoff=handoff_kinds(options),
    )


def _reference_env(device: str, gpu: int | None, work: Path, cache_dir: Path) -> dict[str, str]:
    # the judge's own Triton kernels (kbv.judge_fused) compile into kbv's cache, which no candidate can write
    env = {"TMPDIR": str(work), "TRITON_CACHE_DIR": str(cache_dir / "judge-triton")}
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    return env


def large_outputs(problem: Problem, options: EvalOptions, device: str, shape: dict[str, Any] | None = None) -> bool:
    """Whether a problem's outputs are large enough for the judge's fused kernels on a GPU (``FUSED_MIN_BYTES``),
    by its roofline counts where they are cached (False where they are not)."""
    if device != "cuda":
        return False
    from kbv import roofline

    counts = roofline.cached_counts(problem.path, options.resolved_profile(device, problem), options.precision,
                                    options.cache_dir, shape=shape)
    return counts is not None and counts.bytes_breakdown.get("outputs", 0) >= FUSED_MIN_BYTES


def reference_spec(problem: Problem, options: EvalOptions, device: str, gpu: int | None, scratch: Path, stage: str,
                   shape: dict[str, Any] | None = None) -> WorkerSpec:
    """A reference worker's spec (trusted: it never imports the candidate)."""
    work = scratch / f"{stage}-reference"
    work.mkdir(parents=True, exist_ok=True)
    return WorkerSpec(
        role="reference", device=device, problem_path=str(problem.path), profile=options.resolved_profile(device, problem),
        precision=options.precision, mode=problem.mode, work_dir=work, log_path=scratch / f"{stage}-reference.log",
        unscaled=problem.unscaled_inputs, env=_reference_env(device, gpu, work, options.cache_dir),
        threads=options.resolved_threads(device), stage=stage, shape=shape, problem_sha256=problem.source_sha256,
        handoff=handoff_kinds(options), judge_kernels=large_outputs(problem, options, device, shape),
    )
