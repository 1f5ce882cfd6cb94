#!/usr/bin/env python3
"""Where one timed trial's wall time goes, in one process on one device (no sandbox, no parent).

    python benchmarks/trial_overhead.py --device cuda --shape 64,2048 --calls 300

A ReLU over one input of ``--shape`` is timed the way a worker times it (``kbv.worker.timer.time_calls`` with the
session's ``prepare`` and ``keep`` steps), and each step of a trial is also timed alone over ``--calls`` calls,
median of the evaluator's wall clock with a synchronize after each: drawing the inputs (``make_inputs`` under a
distribution), loading them into the timed buffers, the cache flush, the event pair around the call, and the copy
of the output that the ring keeps. Prints one JSON object; figures are what this run measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from kbv.protocol import DISTRIBUTIONS, TIMING_RULES  # noqa: E402
from kbv.worker import timer  # noqa: E402
from kbv.worker.diagnose import median_ms  # noqa: E402
from kbv.worker.inputs import make_inputs  # noqa: E402


_ECHO = """
import socket, sys
from multiprocessing.connection import Connection
from kbv import wire
conn = Connection(int(sys.argv[1]))
while True:
    msg = wire.recv(conn, 0)
    if msg.get("stop"):
        break
    wire.send(conn, {"seed": 12345, "distribution": "D1"})
"""


def round_trips(calls: int, sampled: bool) -> float | None:
    """Median milliseconds of one request for a timed call's inputs and its answer between two processes, as a
    worker and the parent exchange them (kbv.eval.pacing): a ``need`` frame with a commitment, then the answer;
    ``sampled``: with the parent's sampler on the other process (kbv.sandbox.sampler)."""
    import socket
    import subprocess
    from multiprocessing.connection import Connection

    from kbv import wire
    from kbv.sandbox import sampler

    ours, theirs = socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-c", _ECHO, str(theirs.fileno())], pass_fds=[theirs.fileno()],
                            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    theirs.close()
    conn = Connection(ours.detach())
    running = sampler.Sampler(proc.pid, 500) if sampled else None
    try:
        if running is not None and not running.start():
            return None
        times = []
        for i in range(calls + 20):
            t0 = time.perf_counter_ns()
            wire.send(conn, {"need": ["verified", i], "commit": [0, "verified", i, [[1, 2]]]}, time.monotonic() + 5)
            wire.recv(conn, 0, time.monotonic() + 5)
            times.append((time.perf_counter_ns() - t0) / 1e6)
        return round(statistics.median(times[20:]), 4)
    finally:
        if running is not None:
            running.stop()
        wire.send(conn, {"stop": True})
        proc.wait(10)


RUNGS = ("hot", "after_call", "flush", "events", "ring", "ask", "inputs")


def ladder(model: Any, buffers: list[Any], load: Callable[[], None], flush: Any, device: str,
           sync: Callable[[], None], calls: int) -> dict[str, Any]:
    """A timed trial built up one step per rung, each rung adding one of the worker's steps to the one before:
    ``hot`` (a kept output's digest, back to back), ``after_call`` (a forward, a synchronize and the copy the ring
    keeps before each digest), ``flush`` (the cache flush before the forward), ``events`` (a fresh timing event
    pair around it), ``ring`` (every copy kept, as the ring keeps them), ``ask`` (a round trip to another process
    before each trial, as the worker asks the parent for its inputs) and ``inputs`` (the inputs drawn and loaded).
    Per rung: the median digest and the median whole trial, in milliseconds, by this process's clock."""
    import socket
    import subprocess
    from multiprocessing.connection import Connection

    from kbv import wire
    from kbv.worker import commit

    ours, theirs = socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-c", _ECHO, str(theirs.fileno())], pass_fds=[theirs.fileno()],
                            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    theirs.close()
    conn = Connection(ours.detach())
    out: dict[str, Any] = {}
    try:
        for depth, rung in enumerate(RUNGS):
            kept: list[Any] = []
            digests, trials = [], []
            copy = model(*buffers).clone()
            for i in range(calls + 20):
                t_trial = time.perf_counter_ns()
                if depth >= RUNGS.index("ask"):
                    wire.send(conn, {"need": ["verified", i]}, time.monotonic() + 5)
                    wire.recv(conn, 0, time.monotonic() + 5)
                if depth >= RUNGS.index("inputs"):
                    load()
                if depth >= RUNGS.index("after_call"):
                    if depth >= RUNGS.index("flush"):
                        flush.zero_()
                    if depth >= RUNGS.index("events") and device.startswith("cuda"):
                        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        start.record()
                        result = model(*buffers)
                        sync()
                        end.record()
                        end.synchronize()
                        start.elapsed_time(end)
                    else:
                        result = model(*buffers)
                        sync()
                    copy = result.clone()
                    if depth >= RUNGS.index("ring"):
                        kept.append(copy)
                t_digest = time.perf_counter_ns()
                commit.digest([{"tensor": copy}])
                t_end = time.perf_counter_ns()
                if i >= 20:
                    digests.append((t_end - t_digest) / 1e6)
                    trials.append((t_end - t_trial) / 1e6)
            out[rung] = {"digest_ms": round(statistics.median(digests), 4),
                         "trial_ms": round(statistics.median(trials), 4)}
            del kept
    finally:
        wire.send(conn, {"stop": True})
        proc.wait(10)
    return out


def _under_device(problem: Any, device: str) -> list[Any]:
    with torch.device(device):
        return list(problem.get_inputs())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--shape", default="64,2048")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--cprofile", action="store_true", help="also profile the input load's host side (cProfile)")
    ap.add_argument("--ladder", action="store_true",
                    help="also a trial built up step by step (see ladder): where a digest gets slower")
    args = ap.parse_args()
    device, shape = args.device, tuple(int(x) for x in args.shape.split(","))
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    problem = types.ModuleType("relu_problem")
    problem.get_inputs = lambda: [torch.rand(*shape)]  # type: ignore[attr-defined]
    dist = next(d for d in DISTRIBUTIONS if d.name == "D2")
    model = torch.nn.ReLU()
    buffers = [a.clone() for a in make_inputs(problem, 1, device, "fp32", dist)]
    rule = TIMING_RULES["cuda" if device.startswith("cuda") else "cpu"]
    flush = torch.empty(int(rule.flush_l2_factor * timer.cache_bytes(device)) // 4, dtype=torch.int32, device=device)
    out = model(*buffers)

    def events() -> None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        model(*buffers)
        sync()
        end.record()
        end.synchronize()
        start.elapsed_time(end)

    def load() -> None:
        for buf, src in zip(buffers, make_inputs(problem, 2, device, "fp32", dist)):
            buf.copy_(src)

    steps: dict[str, Callable[[], Any]] = {
        "forward": lambda: model(*buffers),
        "make_inputs": lambda: make_inputs(problem, 2, device, "fp32", dist),
        "make_and_load_inputs": load,
        "flush": flush.zero_ if device.startswith("cuda") else (lambda: flush.fill_(1)),
        "copy_output": lambda: out.clone(),
    }
    if device.startswith("cuda"):
        steps["events_around_forward"] = events
    result: dict[str, Any] = {"device": device, "shape": list(shape), "calls": args.calls,
                              "torch": torch.__version__}
    for name, step in steps.items():
        median_ms(step, sync, 20)  # warm
        result[f"{name}_ms"] = round(median_ms(step, sync, args.calls), 4)
    # The host's side alone (no synchronize: what the worker pays before the GPU even runs) and its parts.
    from kbv.worker.loading import seed_everything
    no_sync = lambda: None  # noqa: E731
    host_steps: dict[str, Callable[[], Any]] = {
        "make_inputs": steps["make_inputs"], "make_and_load_inputs": load,
        "seed_everything": lambda: seed_everything(2),
        "get_inputs_under_device": lambda: _under_device(problem, device),
        "scale_shift": lambda: buffers[0] * dist.scale + dist.shift,
        "copy_into_buffer": lambda: buffers[0].copy_(out),
    }
    result["host_only_ms"] = {name: round(median_ms(step, no_sync, args.calls), 4) for name, step in host_steps.items()}
    sync()
    if args.cprofile:
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            load()
        prof.disable()
        sync()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(15)
        result["cprofile_load_tottime"] = text.getvalue().splitlines()[-25:]
    kept: list[Any] = []

    def prepare(index: int) -> None:
        load()

    def keep(index: int, output: Any) -> None:
        kept[:] = [output.clone()]

    from kbv.worker import commit
    from kbv.worker.session import _copied

    result["digest_ms"] = round(median_ms(lambda: commit.tensor_digest(out), sync, args.calls), 4)
    result["keep_and_digest_ms"] = round(median_ms(lambda: commit.digest(_copied(out, buffers)[1]), sync,
                                                   args.calls), 4)
    result["round_trip_ms"] = round_trips(args.calls, sampled=False)
    result["round_trip_sampled_ms"] = round_trips(args.calls, sampled=True)
    if args.ladder:
        result["ladder"] = ladder(model, buffers, load, flush, device, sync, args.calls)
    t0 = time.perf_counter_ns()
    timing = timer.time_calls(lambda: model(*buffers), device, rule, 1.0, args.calls, prepare, keep)
    wall_ms = (time.perf_counter_ns() - t0) / 1e6
    n = 3 + timing["warmup"] + len(timing["times_ms"])
    result["time_calls"] = {"trials": len(timing["times_ms"]), "warmup": timing["warmup"],
                            "timed_median_ms": round(statistics.median(timing["times_ms"]), 4),
                            "wall_ms": round(wall_ms, 1), "wall_per_call_ms": round(wall_ms / n, 4)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
