#!/usr/bin/env python3
"""What a CUDA-only torch.profiler session records, for the design of recording every timed call (issue 12).

    python docs/results/<folder>/cupti_probe.py --out $OUT/cupti_probe.json

Questions, each answered from this run's own events:
1. Which events come back with only ``ProfilerActivity.CUDA``: kernels, and also the runtime calls that launched
   them (``cudaLaunchKernel``, ``cudaEventRecord``), with the launching thread and a correlation id?
2. What a kernel's ``device_resource_id`` is (the stream), and whether it can be matched to a ``torch.cuda.Stream``.
3. Whether ``torch.autograd._profiler_enabled()`` is true inside such a session (what a candidate can see).
4. Whether ``_toggle_collection_dynamic`` switches the recording on for the forward's window only, and what a pair
   of toggles costs.
5. Which host clock the kernels' ``start_ns`` share (``window_clocks``: each window's on and off on perf_counter,
   monotonic and time), so that a window's kernels could be told apart by time.
6. Whether a CUDA graph's replayed kernels are recorded (``graph_replay``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from typing import Any

import torch
from torch.autograd.profiler import _toggle_collection_dynamic
from torch.profiler import ProfilerActivity, profile


def events_of(prof: Any) -> list[dict[str, Any]]:
    out = []
    for e in prof.profiler.kineto_results.events():
        activity = getattr(e, "activity_type", None)  # not on every torch (2.11: absent)
        out.append({"name": e.name()[:120], "device_type": str(e.device_type()),
                    "activity": str(activity()) if callable(activity) else None,
                    "stream": e.device_resource_id(), "correlation": e.correlation_id(),
                    "linked": e.linked_correlation_id(), "thread": e.start_thread_id(),
                    "start_ns": e.start_ns(), "dur_ns": e.duration_ns()})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    result: dict[str, Any] = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}
    x = torch.randn(1 << 20, device="cuda")
    flush = torch.empty(1 << 24, dtype=torch.int32, device="cuda")
    harness = torch.cuda.Stream()
    side = torch.cuda.Stream()
    result["streams"] = {"default": [torch.cuda.current_stream().stream_id, torch.cuda.current_stream().cuda_stream],
                         "harness": [harness.stream_id, harness.cuda_stream],
                         "side": [side.stream_id, side.cuda_stream]}
    seen: dict[str, Any] = {}
    clocks: list[dict[str, list[int]]] = []  # each window's on/off on perf_counter, monotonic and time: which clock
    # the kernels' start_ns share (a window's kernels could then be told apart by time)

    def forward() -> torch.Tensor:
        seen["enabled_in_forward"] = torch.autograd._profiler_enabled()
        y = torch.relu(x)
        with torch.cuda.stream(side):
            z = torch.sigmoid(x)  # a kernel on a side stream
        t = threading.Thread(target=lambda: torch.tanh(x))  # and one launched by another thread
        t.start()
        t.join()
        torch.cuda.current_stream().wait_stream(side)
        return y + z

    def one(record_window: bool) -> tuple[torch.Tensor, float]:
        with torch.cuda.stream(harness):
            flush.zero_()  # the harness's work, on its own stream
        torch.cuda.current_stream().wait_stream(harness)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if record_window:
            _toggle_collection_dynamic(True, {ProfilerActivity.CUDA})
            clocks.append({"on": [time.perf_counter_ns(), time.monotonic_ns(), time.time_ns()]})
        start.record()
        out = forward()
        torch.cuda.synchronize()
        end.record()
        end.synchronize()
        if record_window:
            clocks[-1]["off"] = [time.perf_counter_ns(), time.monotonic_ns(), time.time_ns()]
            _toggle_collection_dynamic(False, {ProfilerActivity.CUDA})
        with torch.cuda.stream(harness):
            kept = out.clone()  # the harness keeping the output
        harness.synchronize()
        del kept
        return out, start.elapsed_time(end)

    for _ in range(3):
        one(False)
    torch.cuda.synchronize()
    sessions = []  # the wall time of starting and stopping a CUDA-only session, the first and later ones
    for _ in range(5):
        t0 = time.perf_counter_ns()
        with profile(activities=[ProfilerActivity.CUDA]):
            t1 = time.perf_counter_ns()
            one(False)
            t2 = time.perf_counter_ns()
        sessions.append({"start_ms": (t1 - t0) / 1e6, "stop_ms": (time.perf_counter_ns() - t2) / 1e6})
    result["sessions"] = sessions
    # 1-3: the whole loop recorded
    with profile(activities={ProfilerActivity.CUDA}) as prof:
        for _ in range(3):
            one(False)
    result["enabled_in_forward_recorded"] = seen.get("enabled_in_forward")
    result["whole"] = events_of(prof)
    one(False)
    result["enabled_in_forward_plain"] = seen.get("enabled_in_forward")
    result["main_thread"] = threading.get_native_id()
    # 4: the recording toggled on around the forward only
    try:
        with profile(activities={ProfilerActivity.CUDA}) as prof2:
            _toggle_collection_dynamic(False, {ProfilerActivity.CUDA})
            for _ in range(3):
                one(True)
            _toggle_collection_dynamic(True, {ProfilerActivity.CUDA})
        result["windowed"] = events_of(prof2)
        result["window_clocks"] = clocks[:3]
    except Exception as exc:  # noqa: BLE001
        result["windowed_error"] = f"{type(exc).__name__}: {exc}"[:400]
    # the cost of a pair of toggles, and of the forward timed plain, recorded whole, and windowed
    try:
        with profile(activities={ProfilerActivity.CUDA}):
            costs = []
            for _ in range(200):
                t0 = time.perf_counter_ns()
                _toggle_collection_dynamic(False, {ProfilerActivity.CUDA})
                _toggle_collection_dynamic(True, {ProfilerActivity.CUDA})
                costs.append((time.perf_counter_ns() - t0) / 1e3)
        result["toggle_pair_us"] = {"median": statistics.median(costs), "max": max(costs)}
    except Exception as exc:  # noqa: BLE001
        result["toggle_error"] = f"{type(exc).__name__}: {exc}"[:400]
    times: dict[str, list[float]] = {"plain": [], "whole": [], "windowed": []}
    for _ in range(5):
        times["plain"] += [one(False)[1] for _ in range(20)]
        with profile(activities={ProfilerActivity.CUDA}):
            times["whole"] += [one(False)[1] for _ in range(20)]
        try:
            with profile(activities={ProfilerActivity.CUDA}):
                _toggle_collection_dynamic(False, {ProfilerActivity.CUDA})
                times["windowed"] += [one(True)[1] for _ in range(20)]
                _toggle_collection_dynamic(True, {ProfilerActivity.CUDA})
        except Exception:  # noqa: BLE001
            pass
    result["forward_ms_median"] = {k: statistics.median(v) if v else None for k, v in times.items()}
    # 6: a CUDA graph's kernels, replayed under a CUDA-only session (an honest candidate may replay one: if its
    # kernels were not recorded, its recording would be empty)
    try:
        graph, static_out = torch.cuda.CUDAGraph(), None
        capture = torch.cuda.Stream()
        capture.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(capture):
            torch.relu(x)
        torch.cuda.current_stream().wait_stream(capture)
        with torch.cuda.graph(graph):
            static_out = torch.relu(x) * 2
        torch.cuda.synchronize()
        with profile(activities={ProfilerActivity.CUDA}) as prof3:
            _toggle_collection_dynamic(False, {ProfilerActivity.CUDA})
            _toggle_collection_dynamic(True, {ProfilerActivity.CUDA})
            graph.replay()
            torch.cuda.synchronize()
            _toggle_collection_dynamic(False, {ProfilerActivity.CUDA})
        result["graph_replay"] = events_of(prof3)
        del static_out
    except Exception as exc:  # noqa: BLE001
        result["graph_error"] = f"{type(exc).__name__}: {exc}"[:400]
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k not in ("whole", "windowed", "graph_replay")}, indent=1))
    for key in ("whole", "windowed", "graph_replay"):
        for e in result.get(key, []):
            print(key, e["activity"], e["stream"], e["thread"], e["correlation"], e["linked"], e["name"][:70])


if __name__ == "__main__":
    main()
