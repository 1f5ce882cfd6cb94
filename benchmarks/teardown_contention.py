#!/usr/bin/env python3
"""Does another process's device memory, made or given back, slow a memory-bound kernel timed beside it?

    python benchmarks/teardown_contention.py [--gib 2] [--other-gib 24] [--seconds 6] [--out FILE]

The question behind it: on the H100 (docs/results/h100-2026-12-06-c) the reference's clean command, which follows
the candidate's kill, and some pairs' first timing command read up to 2.3x slower than the reference's other commands
(level1/29 Softplus 10.0 ms against 4.3, a 6 GiB input), and not because the timed trials allocated. A driver that
scrubs a dead context's memory, or maps a new one's, on the device could take bandwidth from the kernel timed then.

This process times ``x * sigmoid(x)`` on ``--gib`` GiB with CUDA events, back to back, for ``--seconds``. Once a
second has passed, a child process allocates ``--other-gib`` GiB, writes it, and exits; the parent notes when the
child said it was allocating, when it had written, and when it was reaped. The kernel's times are summarised in
windows: before the child, while it allocated and wrote, while it held, the first 0.25 s and 0.25-1 s after it was
reaped, and later. A window's median well above ``before`` is the contention. CUDA only: on the CPU it says so and
exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

_CHILD = r"""
import sys, time, torch
gib = float(sys.argv[1])
print("alloc", time.monotonic(), flush=True)
x = torch.empty(int(gib * 2**30) // 4, dtype=torch.float32, device="cuda")
x.fill_(1.0)
torch.cuda.synchronize()
print("written", time.monotonic(), flush=True)
time.sleep(float(sys.argv[2]))
print("exit", time.monotonic(), flush=True)
"""

WINDOWS = ("before", "allocating", "holding", "reaped_0_250ms", "reaped_250ms_1s", "later")


def window(t: float, marks: dict[str, float]) -> str:
    """Which window a kernel that started at ``t`` (monotonic) falls in, given the child's marks."""
    if "alloc" not in marks or t < marks["alloc"]:
        return "before"
    if "written" not in marks or t < marks["written"]:
        return "allocating"
    if "reaped" not in marks or t < marks["reaped"]:
        return "holding"
    after = t - marks["reaped"]
    return "reaped_0_250ms" if after < 0.25 else "reaped_250ms_1s" if after < 1.0 else "later"


def summary(times: list[tuple[float, float]], marks: dict[str, float]) -> dict[str, dict[str, float | int] | None]:
    """Per window: the kernels' count, median and maximum milliseconds (None where none fell in it)."""
    by: dict[str, list[float]] = {w: [] for w in WINDOWS}
    for t, ms in times:
        by[window(t, marks)].append(ms)
    return {w: ({"n": len(v), "median_ms": round(statistics.median(v), 4), "max_ms": round(max(v), 4)} if v else None)
            for w, v in by.items()}


def _read_marks(child: subprocess.Popen[str], marks: dict[str, float]) -> None:
    """The child's lines (``<mark> <monotonic time>``) into ``marks`` as they come."""
    assert child.stdout is not None
    for line in child.stdout:
        parts = line.split()
        if len(parts) == 2:
            marks[parts[0]] = float(parts[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=2.0, help="the timed kernel's input, GiB (float32)")
    parser.add_argument("--other-gib", type=float, default=24.0, help="what the other process allocates, GiB")
    parser.add_argument("--hold", type=float, default=1.0, help="seconds the other process holds it")
    parser.add_argument("--seconds", type=float, default=6.0, help="how long the kernel is timed")
    parser.add_argument("--out", type=Path, default=None, help="write the summary here as JSON too")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("teardown_contention: needs CUDA (nothing measured)")
        return 0
    x = torch.randn(int(args.gib * 2**30) // 4, device="cuda")
    for _ in range(3):  # warm-up, and the allocator's cache holds the output's block from here on
        x * torch.sigmoid(x)
    torch.cuda.synchronize()
    times: list[tuple[float, float]] = []
    marks: dict[str, float] = {}
    child: subprocess.Popen[str] | None = None
    reader: threading.Thread | None = None
    start = time.monotonic()
    while time.monotonic() - start < args.seconds:
        if child is None and time.monotonic() - start > 1.0:
            child = subprocess.Popen([sys.executable, "-c", _CHILD, str(args.other_gib), str(args.hold)],
                                     stdout=subprocess.PIPE, text=True)
            reader = threading.Thread(target=_read_marks, args=(child, marks), daemon=True)
            reader.start()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t = time.monotonic()
        a.record()
        x * torch.sigmoid(x)
        b.record()
        b.synchronize()
        times.append((t, a.elapsed_time(b)))
        if child is not None and "reaped" not in marks and child.poll() is not None:
            marks["reaped"] = time.monotonic()
    if child is not None:
        child.wait()
        marks.setdefault("reaped", time.monotonic())
    if reader is not None:
        reader.join(timeout=5)
    result = {"device": torch.cuda.get_device_name(), "gib": args.gib, "other_gib": args.other_gib,
              "marks_s": {k: round(v - start, 3) for k, v in marks.items()}, "windows": summary(times, marks)}
    print(json.dumps(result, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
