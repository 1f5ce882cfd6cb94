"""What issue 11's sandbox costs on the CPU: worker start (kbv's launcher against multiprocessing's fork server) and
an honest pair (level1/5_ReLU with tests/candidates/correct_torch.py) with every defence against the layers the
sandbox had before (no user namespace, no seccomp, no hiding).

    python benchmarks/sandbox_overhead.py [--starts 10] [--pairs 3]

Prints milliseconds per worker start (median, min) and seconds per honest pair (median, min) for each setting.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RELU = ROOT / "src" / "kbv" / "suites" / "builtin" / "level1" / "5_ReLU.py"
HONEST = ROOT / "tests" / "candidates" / "correct_torch.py"


def _noop() -> None:
    pass


def forkserver_starts(n: int) -> list[float]:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["kbv.worker.session"])
    ctx.Process(target=_noop).start()  # start the fork server (imports torch) outside the timing
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        p = ctx.Process(target=_noop)
        p.start()
        p.join()
        out.append(time.perf_counter() - t0)
    return out


def launcher_starts(n: int, confined: bool) -> list[float]:
    """Worker() to its hello (problem loaded from the sent bytes, confinement done when asked) and close."""
    from kbv.sandbox import plan
    from kbv.sandbox.launch import Worker, WorkerSpec

    sandbox = plan.plan("auto")
    out = []
    for k in range(n + 1):
        work = Path(tempfile.mkdtemp(prefix="kbv-bench-"))
        confine = None
        if confined and sandbox["requested"]:
            ids = sandbox.get("ids")
            confine = {"network": sandbox["network"], "pid": sandbox["pid"], "ids": list(ids[:2]) if ids else None,
                       "read_only": plan.protected_code() if sandbox["read_only"] else None,
                       "seccomp": sandbox.get("seccomp"), "keep": plan.runtime_paths(),
                       "hide": plan.hidden_paths(RELU) if sandbox.get("hide") else []}
            if ids:
                plan.hand_over(work, ids)
        spec = WorkerSpec(role="candidate" if confined else "reference", device="cpu", problem_path=str(RELU),
                          profile=None, precision="fp32", mode="train", work_dir=work, log_path=work / "log",
                          env={"TMPDIR": str(work), "HOME": str(work)}, confine=confine)
        t0 = time.perf_counter()
        worker = Worker(spec, time.monotonic() + 120)
        worker.close()
        if k:  # the first start also starts the launcher (imports torch)
            out.append(time.perf_counter() - t0)
    return out


def pair_seconds(n: int, disable: str) -> list[float]:
    code = ("import time, sys; from pathlib import Path; from kbv.eval import EvalOptions, evaluate;"
            f"t0 = time.perf_counter(); r = evaluate(Path({str(RELU)!r}), Path({str(HONEST)!r}),"
            " EvalOptions(device='cpu', timeout=60.0)); assert r.verdict == 'correct', r.error;"
            "print(time.perf_counter() - t0)")
    env = dict(os.environ, KBV_SANDBOX_DISABLE=disable)
    out = []
    for _ in range(n + 1):
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        out.append(float(done.stdout.strip().splitlines()[-1]))
    return out[1:]  # the first run also builds caches


def _row(name: str, values: list[float], scale: float, unit: str) -> None:
    print(f"{name:62s} median {statistics.median(values) * scale:8.1f} {unit}   min {min(values) * scale:8.1f} {unit}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    _row("worker start: multiprocessing fork server (bare process)", forkserver_starts(args.starts), 1e3, "ms")
    _row("worker start: kbv launcher, reference (hello)", launcher_starts(args.starts, False), 1e3, "ms")
    _row("worker start: kbv launcher, candidate, fully confined (hello)", launcher_starts(args.starts, True), 1e3,
         "ms")
    _row("honest pair: every defence", pair_seconds(args.pairs, ""), 1, "s")
    _row("honest pair: the layers of before (no ids, seccomp, hiding)", pair_seconds(args.pairs, "ids,seccomp,hide"),
         1, "s")


if __name__ == "__main__":
    main()
