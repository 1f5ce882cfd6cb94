"""Parent side of the sandbox plan: what confinement to ask of candidate workers (``plan``, probed on CUDA by
``kbv.sandbox.probe``), the code they must see read-only (``protected_code``), the sandbox user, and handing
folders to it. The steps themselves run in the worker (``kbv.worker.confine``)."""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import subprocess
from pathlib import Path
from typing import Any

SANDBOX_USER = "kbv-sandbox"


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


def plan(mode: str, device: str = "cpu") -> dict[str, Any]:
    """What confinement to ask of candidate workers: ``mode`` is ``auto`` (all that is possible) or ``off``. On a
    CUDA device each layer is probed first (``kbv.sandbox.probe``); layers under which CUDA fails are dropped, loudly:
    the reason is in the plan and so in every record's ``env.isolation``."""
    return dict(_plan(mode, "cuda" if str(device).startswith("cuda") else "cpu"))


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


def _plan(mode: str, device: str) -> dict[str, Any]:
    if mode == "off":
        return {"requested": False, "reason": "sandbox turned off (--sandbox off / KBV_SANDBOX=off)"}
    if os.geteuid() != 0:
        return {"requested": False, "reason": "not root: namespaces and a user switch need root"}
    out: dict[str, Any] = {"requested": True, "network": True, "pid": True, "read_only": True, "ids": None}
    reasons: list[str] = []
    # Also for a worker that drops to the sandbox user: kbv's own code stays read-only either way.
    if runtime_readable():
        out["ids"] = sandbox_ids()
    else:
        reasons.append("this Python's library is not readable by other users: workers stay root (in namespaces)")
    if device == "cuda":
        from kbv.sandbox import probe

        full = {k: out[k] for k in probe.LAYERS if out[k]}
        full["read_only"] = protected_code() if full.get("read_only") else None
        kept, notes = probe.usable_layers({k: v for k, v in full.items() if v})
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


