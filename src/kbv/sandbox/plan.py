"""Parent side of the sandbox plan: what confinement to ask of candidate workers (``plan``: cached per run and
device kind, probed on CUDA by ``kbv.sandbox.probe``, forgotten after a failed GPU health check), the code they must
see read-only (``protected_code``), the evaluator-side data they must not see (``hidden_paths``), the environment
every worker gets (``worker_environment``), the sandbox user, and handing folders to it. The steps themselves run
in the worker (``kbv.worker.confine``).

``KBV_SANDBOX_DISABLE`` (a comma-separated list of ``network``, ``pid``, ``read_only``, ``ids``, ``seccomp``,
``hide``, ``env``) switches single defences off; it exists for the adversarial tests that show each defence
matters, and every record says what was switched off (``env.isolation.reason``).
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import os
import platform
import pwd
import shutil
import subprocess
from pathlib import Path
from typing import Any

SANDBOX_USER = "kbv-sandbox"
DISABLE_ENV = "KBV_SANDBOX_DISABLE"
SWITCHES = ("network", "pid", "read_only", "ids", "seccomp", "hide", "env")

#: The parent's environment variables a worker inherits (exact names and shell patterns); everything else, and
#: every name that looks like a credential (``SECRET_NAMES``), is left out. kbv then sets its own per worker.
WORKER_ENV_ALLOW = ("PATH", "HOME", "LANG", "LANGUAGE", "LC_*", "TZ", "TERM", "TMPDIR", "USER", "LOGNAME", "SHELL",
                    "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "CUDA_MODULE_LOADING", "CUDA_DEVICE_ORDER",
                    "NVIDIA_*", "TORCH_EXTENSIONS_DIR", "TORCH_CUDA_ARCH_LIST", "TRITON_*", "MAX_JOBS", "CC", "CXX",
                    "CFLAGS", "CXXFLAGS", "LDFLAGS", "NVCC_*", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH",
                    "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV", "OMP_*", "MKL_*", "OPENBLAS_*", "KMP_*",
                    "KBV_CACHE_DIR", "KBV_PROFILE_TIMING", "KBV_ASK_SPIN")
SECRET_NAMES = ("*KEY*", "*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*", "*_AUTH*", "*COOKIE*")


def disabled() -> set[str]:
    """The defences ``KBV_SANDBOX_DISABLE`` switches off (tests only)."""
    return {w.strip() for w in os.environ.get(DISABLE_ENV, "").split(",") if w.strip() in SWITCHES}


def allowed_variable(name: str) -> bool:
    upper = name.upper()
    if any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_NAMES):
        return False
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in WORKER_ENV_ALLOW)


def worker_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment kbv's launcher (and so every worker) starts from: the parent's variables on the allow-list
    (``WORKER_ENV_ALLOW``), never a credential (``SECRET_NAMES``: API keys, tokens, secrets, passwords)."""
    environ = dict(os.environ if environ is None else environ)
    if "env" in disabled():
        return environ
    out = {k: v for k, v in environ.items() if allowed_variable(k)}
    out["PYTHONDONTWRITEBYTECODE"] = "1"
    return out


def hidden_paths(problem_path: str | Path | None = None, cache: str | Path | None = None) -> list[str]:
    """What candidate workers must not read: the evaluator side of every shipped suite and of the problem's own
    suite (held-out shapes, weights, provenance, traces), kbv's cache (every build, the reference timings, roofline
    counts and measured ceilings), and the record key with its private folder (``kbv.attest.key_path``)."""
    from kbv import attest

    package = Path(__file__).resolve().parents[1]
    out = [str(p) for p in sorted((package / "suites").glob("*/evaluator")) if p.is_dir()]
    if problem_path is not None:
        for folder in list(Path(problem_path).resolve().parents)[:3]:
            if (folder / "evaluator").is_dir():
                out.append(str(folder / "evaluator"))
    if cache is not None and os.path.realpath(cache) != "/":
        out.append(str(cache))
    key = attest.key_path()
    out.append(str(key))
    try:
        if key.parent.is_dir() and not key.parent.stat().st_mode & 0o077:
            out.append(str(key.parent))
    except OSError:
        pass
    return list(dict.fromkeys(out))


def runtime_paths() -> list[str]:
    """The Python installation(s) a worker runs from (bound back read-only where a covered folder holds them)."""
    import sys

    return list(dict.fromkeys(str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                                 sys.base_exec_prefix) if os.path.isdir(p)))


def sandbox_ids() -> tuple[int, int, str] | None:
    """The uid and gid candidate workers run as, creating the dedicated user if we may; None if not root."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        if shutil.which("useradd"):
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SANDBOX_USER],
                           capture_output=True, timeout=30)
        try:
            entry = pwd.getpwnam(SANDBOX_USER)
        except KeyError:
            entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid, entry.pw_name


def runtime_readable() -> bool:
    """Whether other users can reach this Python's standard library and packages: a worker that drops to the
    sandbox user still imports modules lazily (a pyenv under a private /root, say, would break that)."""
    import site
    import sysconfig

    paths = {Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["platstdlib"]),
             *(Path(p) for p in site.getsitepackages())}
    return all(traversable(p) for p in paths if p.exists())


_PLANS: dict[tuple[str, str, str], dict[str, Any]] = {}
_PLAN_LOCK = __import__("threading").Lock()


def plan(mode: str, device: str = "cpu") -> dict[str, Any]:
    """What confinement to ask of candidate workers: ``mode`` is ``auto`` (all that is possible) or ``off``. On a
    CUDA device each layer is probed first (``kbv.sandbox.probe``); layers under which CUDA fails are dropped, loudly:
    the reason is in the plan and so in every record's ``env.isolation``. Cached per device kind (and mode): the
    probe runs once per run, again only after ``forget`` (a failed GPU health check)."""
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    key = (mode, kind, os.environ.get(DISABLE_ENV, ""))
    with _PLAN_LOCK:
        if key not in _PLANS:
            _PLANS[key] = _plan(mode, kind)
        return copy.deepcopy(_PLANS[key])


def forget(device: str = "cuda") -> None:
    """Drop the cached plans of a device kind: the next ``plan`` probes again (after a GPU failed its health check)."""
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    with _PLAN_LOCK:
        for key in [k for k in _PLANS if k[1] == kind]:
            del _PLANS[key]


@functools.lru_cache(maxsize=None)
def protected_code() -> list[str]:
    """Code every later run trusts, read-only to candidate workers: kbv itself, and the Python runtime with its
    installed packages (torch, triton: a root worker could otherwise rewrite what later runs' references import)."""
    import sysconfig



    paths = [str(Path(__file__).resolve().parents[1])]  # the kbv package
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path and os.path.isdir(path):
            paths.append(str(Path(path).resolve()))
    return list(dict.fromkeys(paths))


def probe_spec(layers: dict[str, Any]) -> dict[str, Any]:
    """The confine spec the CUDA probe tries: the layers asked for, with what they act on as in a worker (the
    runtime to keep, the evaluator data to hide)."""
    from kbv.sandbox.probe import LAYERS

    full = {k: layers[k] for k in LAYERS if layers.get(k)}
    if full.get("read_only"):
        full["read_only"] = protected_code()
    full["keep"] = runtime_paths()
    full["hide"] = hidden_paths() if layers.get("hide", True) else []
    return full


def _plan(mode: str, device: str) -> dict[str, Any]:
    if mode == "off":
        return {"requested": False, "reason": "sandbox turned off (KBV_SANDBOX=off)"}
    if os.geteuid() != 0:
        return {"requested": False, "reason": "not root: namespaces and a user switch need root"}
    out: dict[str, Any] = {"requested": True, "network": True, "pid": True, "read_only": True,
                           "ids": sandbox_ids(), "seccomp": True, "hide": "hide" not in disabled()}
    reasons: list[str] = []
    off = disabled()
    for layer in off & {"network", "pid", "read_only", "ids", "seccomp"}:
        out[layer] = None if layer == "ids" else False
    if off:
        reasons.append(f"switched off by {DISABLE_ENV} (tests only): {', '.join(sorted(off))}")
    if out["seccomp"] and platform.machine() != "x86_64":  # kbv.worker.seccomp's filter is for x86_64 only
        out["seccomp"] = False
        reasons.append(f"seccomp filter not installed: kbv's filter is for x86_64, this is {platform.machine()}")
    if device == "cuda":
        from kbv.sandbox import probe

        kept, notes = probe.usable_layers(probe_spec(out), worker_environment())
        for layer in probe.LAYERS:
            if layer not in kept and out.get(layer):
                out[layer] = None if layer == "ids" else False
        reasons.extend(notes)
        out["requested"] = any(out[k] for k in probe.LAYERS)
    if reasons:
        out["reason"] = "; ".join(reasons)
    return out


def traversable(path: Path) -> bool:
    """Whether every folder above ``path`` lets other users through (o+x)."""
    for parent in [path, *path.parents]:
        try:
            if parent.exists() and not parent.stat().st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def hand_over(path: Path, ids: tuple[int, int, str] | None) -> None:
    """Give a folder (recursively) to the sandbox user."""
    if ids is None:
        return
    uid, gid, _ = ids
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)]:
            try:
                os.chown(name, uid, gid, follow_symlinks=False)
            except OSError:
                pass


def main() -> int:
    """``python -m kbv.sandbox.plan``: on the GPU machine (as root), CUDA under every layer kbv would ask for, each
    alone and all together (``kbv.worker.probe``), then the plan the runner would use."""
    import json

    from kbv.sandbox import probe

    full = probe_spec({"network": True, "pid": True, "read_only": True, "ids": sandbox_ids(), "seccomp": True})
    env = worker_environment()
    extras = {k: v for k, v in full.items() if k not in probe.LAYERS}
    for layer in [layer for layer in probe.LAYERS if full.get(layer)]:
        print(f"{layer:10s}", *probe._run({**extras, layer: full[layer]}, env))
    ok, why = probe._run(full, env)
    print(f"{'all':10s}", ok, why)
    print(json.dumps(plan("auto", "cuda"), indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    import sys

    sys.exit(main())
