"""Running a helper process of kbv's own (a problem screen, a roofline count, a GPU probe) with a time limit: it
starts in a session of its own, and on return or timeout its whole process group is killed, so nothing it started
outlives it. One helper for every such call on the parent side."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Finished:
    returncode: int | None  # None when it was killed at the time limit
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def last_line(self) -> str:
        lines = (self.stdout + self.stderr).strip().splitlines()
        return lines[-1] if lines else f"exit status {self.returncode}"


KBV_ROOT = str(Path(__file__).resolve().parents[1])  # the folder kbv is imported from (src/ in a checkout)


def kbv_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with kbv's import root first on ``PYTHONPATH``, so ``python -m kbv...``
    finds the same kbv in a child whether kbv is installed or run from a checkout."""
    out = dict(os.environ if env is None else env)
    rest = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p and p != KBV_ROOT]
    out["PYTHONPATH"] = os.pathsep.join([KBV_ROOT, *rest])
    return out


def kill_group(pid: int) -> None:
    """SIGKILL a process group (quietly, if it is gone or not ours)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(cmd: list[str], timeout: float, *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
        capture_stdout: bool = True, stdin: bytes | None = None) -> Finished:
    """Run ``cmd`` in a new session (kbv importable: ``kbv_env``), with ``stdin`` as its input if given; kill its
    group at ``timeout`` seconds and after it returns (what it printed until then is kept)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=kbv_env(env), stdout=subprocess.PIPE if capture_stdout else subprocess.DEVNULL,
                            stderr=subprocess.PIPE, stdin=subprocess.PIPE if stdin is not None else None,
                            start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(input=stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc.pid)
        out, err = proc.communicate()
    finally:
        kill_group(proc.pid)  # anything it left running in its session
    return Finished(None if timed_out else proc.returncode, (out or b"").decode(errors="replace"),
                    (err or b"").decode(errors="replace"), timed_out)
