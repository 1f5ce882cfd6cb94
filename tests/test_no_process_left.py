"""Issue 13: kbv leaves no process behind when it exits. A real ``kbv eval`` runs under a wrapper that is a child
subreaper (``PR_SET_CHILD_SUBREAPER``): every process kbv started and did not wait for (a worker still exiting, a
launcher, a child of a candidate) is re-parented to the wrapper when kbv exits, and the wrapper lists them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RELU = ROOT / "src" / "kbv" / "suites" / "builtin" / "level1" / "5_ReLU.py"
CORRECT = ROOT / "tests" / "candidates" / "correct_torch.py"

WRAPPER = r'''
import ctypes, json, os, signal, subprocess, sys, time
PR_SET_CHILD_SUBREAPER = 36
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    print(json.dumps({"error": "prctl refused"})); sys.exit(0)
rc = subprocess.run([sys.executable, "-m", "kbv", *sys.argv[1:]], stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL).returncode
time.sleep(0.2)  # a process kbv left is re-parented here as kbv exits
me, left = os.getpid(), []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        continue
    state, ppid = stat.rsplit(")", 1)[1].split()[:2]
    if int(ppid) == me:
        left.append({"pid": int(pid), "state": state, "name": stat.split("(", 1)[1].rsplit(")", 1)[0], "cmd": cmd})
for p in left:  # tidy up before reporting
    try:
        os.kill(p["pid"], signal.SIGKILL)
    except OSError:
        pass
print(json.dumps({"rc": rc, "left": left}))
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper is Linux's")
def test_kbv_eval_leaves_no_process_behind(tmp_path) -> None:
    """Two timing pairs (the last pair's workers are retired: they exit while kbv finishes the record, and the run
    waits for them before it returns): once ``kbv eval`` has exited, nothing it started is still there."""
    env = dict(os.environ, KBV_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT / "src"))
    out = tmp_path / "results.jsonl"
    args = ["eval", "--problem", str(RELU), "--candidate", str(CORRECT), "--out", str(out), "--device", "cpu",
            "--trials", "1", "--timing-pairs", "2"]
    done = subprocess.run([sys.executable, "-c", WRAPPER, *args], capture_output=True, text=True, env=env,
                          timeout=300)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    if "error" in seen:
        pytest.skip(seen["error"])
    assert seen["rc"] == 0, done.stderr[-2000:]
    assert json.loads(out.read_text().splitlines()[-1])["verdict"] == "correct"
    assert seen["left"] == []
