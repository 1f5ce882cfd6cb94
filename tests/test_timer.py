"""The worker's timer (``kbv.worker.timer.time_calls``): which input set each call reads."""

from __future__ import annotations

import math
import time
import weakref

import pytest
import torch

from kbv.protocol import ESTIMATE_CALLS, FIRST_TIMED_CALL, TIMING_RULES
from kbv.worker import timer


def test_the_estimate_and_warm_up_calls_share_one_input_set_and_each_timed_call_has_its_own() -> None:
    """Input sets are loaded by ``prepare``: once for the three estimate calls and the warm-up together (on the CPU a
    redraw per estimate call cost more than the calls: a 256 MiB input, 27 of a pair's 156 s), then once per timed
    trial, FIRST_TIMED_CALL onwards in turn; each timed trial's output is the one its own set gives."""
    loaded: list[int] = []
    buffer = torch.zeros(8)
    seen: list[tuple[int | None, float]] = []

    def prepare(index: int) -> None:
        loaded.append(index)
        buffer.fill_(float(index))

    def call() -> torch.Tensor:
        seen.append((loaded[-1] if loaded else None, float(buffer[0])))
        return buffer * 2

    kept: dict[int, float] = {}
    result = timer.time_calls(call, "cpu", TIMING_RULES["cpu"], share=1.0, max_trials=6, prepare=prepare,
                              keep=lambda i, out: kept.__setitem__(i, float(out[0])))
    trials = len(result["times_ms"])
    assert loaded == [FIRST_TIMED_CALL - 1, *range(FIRST_TIMED_CALL, FIRST_TIMED_CALL + trials)]
    untimed = ESTIMATE_CALLS + result["warmup"]
    assert [s for s, _ in seen[:untimed]] == [FIRST_TIMED_CALL - 1] * untimed  # estimates and warm-up: one set
    assert kept == {i: 2.0 * i for i in range(FIRST_TIMED_CALL, FIRST_TIMED_CALL + trials)}
    assert result["split_ms"]["prepare"] >= 0.0


def test_a_recording_sees_every_forward_and_none_of_the_harnesss_own_work() -> None:
    """``time_calls(record=...)`` switches the recording on around each forward only (``kbv.worker.kernel_record``;
    on the CPU it records operators, the stand-in for a GPU's kernels): every estimate, warm-up and timed call's
    operators are in it, and none of the work between calls (the cache flush's ``fill_``, a ``prepare`` that draws
    inputs, a ``keep`` that copies outputs)."""
    from kbv.worker.kernel_record import Recording

    x = torch.randn(64)

    def prepare(index: int) -> None:
        torch.tanh(x)  # the harness's input draw

    recording = Recording("cpu")
    recording.start()
    result = timer.time_calls(lambda: torch.relu(x), "cpu", TIMING_RULES["cpu"], max_trials=5, prepare=prepare,
                              keep=lambda i, out: out.clone(), record=recording)
    recorded = recording.stop()
    calls = ESTIMATE_CALLS + result["warmup"] + len(result["times_ms"])
    assert recorded["status"] == "ok", recorded
    assert recorded["kernels"]["aten::relu"][0] == calls, recorded
    assert not {"aten::tanh", "aten::fill_", "aten::clone"} & set(recorded["kernels"]), recorded
    assert recorded["outside_windows"] > 0, recorded  # recorded, and left out by time
    assert recorded["windows"] == ESTIMATE_CALLS + 1 + len(result["times_ms"])  # the warm-up's calls share one window
    assert 0 < recorded["window_us"] / 1e3 <= result["split_ms"]["before_trials"] + result["split_ms"]["trials"]
    # the timed trials' windows, told apart by time: their operators' time, not the estimate's or warm-up's
    timed = recorded["timed"]
    assert timed["windows"] == len(result["times_ms"]) and 0 < timed["window_us"] < recorded["window_us"], recorded
    relu_us = recorded["kernels"]["aten::relu"][1]
    assert 0 < timed["device_us"] < relu_us, recorded


def test_a_forward_that_stops_the_recording_is_reported() -> None:
    """A forward that stops the session loses the rest of the command's recording: ``stopped`` (the parent's
    ``fallback``, kbv.eval.timed_record)."""
    from torch._C import _autograd

    from kbv.worker.kernel_record import Recording

    x = torch.randn(64)

    def forward() -> torch.Tensor:
        if _autograd._profiler_enabled():
            _autograd._disable_profiler()
        return torch.relu(x)

    recording = Recording("cpu")
    recording.start()
    timer.time_calls(forward, "cpu", TIMING_RULES["cpu"], max_trials=3, record=recording)
    assert recording.stop()["status"] == "stopped"


def test_a_forward_that_switches_collection_off_records_nothing() -> None:
    """A forward can switch the session's collection off around its work (``_toggle_collection_dynamic``): the
    session still reads ``ok`` but holds none of it. On a GPU, where every computing forward launches something,
    an empty recording is the parent's ``fallback`` (``empty_for_candidate``, kbv.eval.timed_record)."""
    from torch._C import _autograd
    from torch.autograd import ProfilerActivity

    from kbv.worker.kernel_record import Recording

    x = torch.randn(64)

    def forward() -> torch.Tensor:
        _autograd._toggle_collection_dynamic(False, {ProfilerActivity.CPU})
        out = torch.relu(x)
        _autograd._toggle_collection_dynamic(True, {ProfilerActivity.CPU})
        return out

    recording = Recording("cpu")
    recording.start()
    timer.time_calls(forward, "cpu", TIMING_RULES["cpu"], max_trials=3, record=recording)
    recorded = recording.stop()
    assert recorded["status"] == "ok" and recorded["windows"] >= 5, recorded
    assert "aten::relu" not in recorded["kernels"], recorded
    assert recorded["timed"]["device_us"] == 0 and recorded["timed"]["window_us"] > 0, recorded


def test_a_gpu_trials_spin_and_flush_open_its_window_and_are_left_out_of_the_recording(monkeypatch) -> None:
    """On a GPU a recorded trial's window opens on an idle GPU with the timer's spin kernel and the harness's cache
    flush, so the forward is launched while they run, as unrecorded, where the input draws keep the GPU busy (opened
    after the flush, the window added about 90 us a call, h100-2026-12-06-f; with the flush alone, 8-240 us,
    h100-2026-12-06-g). The recording then leaves out each such window's first event where it is the spin, and the
    next where it is a fill, and nothing else: a spin or a fill later in a window is the forward's, a window whose
    first event is neither keeps it, and the warm-up's window (no flush) keeps its fill. Events from a scripted
    session (no GPU here)."""
    from kbv.worker import kernel_record

    class Event:
        def __init__(self, name: str, start: int, duration: int = 10, cuda: bool = True):
            self._name, self._start, self._duration, self._cuda = name, start, duration, cuda

        def device_type(self):
            return torch.autograd.DeviceType.CUDA if self._cuda else torch.autograd.DeviceType.CPU

        def is_user_annotation(self) -> bool:
            return False

        def name(self) -> str:
            return self._name

        def start_ns(self) -> int:
            return self._start

        def duration_ns(self) -> int:
            return self._duration

    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, ...>"
    spin = "at::cuda::(anonymous namespace)::spin_kernel(long)"
    events = [Event(spin, 101, 4), Event(fill, 105), Event("own_kernel", 130, 40),  # spin, flush, the forward
              Event("own_kernel", 210, 40), Event(fill, 260),  # a timed trial whose flush was not seen first
              Event(fill, 305), Event("own_kernel", 320),  # the warm-up (no flush): its fill is the forward's
              Event(fill, 50),  # a flush outside every window
              Event(fill, 405), Event("own_kernel", 420, 40), Event(spin, 470, 4)]  # no spin first: the
    # flush is left out, the forward's own spin kept
    clock = iter([100, 200, 200, 300, 300, 400, 400, 500])
    monkeypatch.setattr(kernel_record, "_unix_ns", lambda: next(clock))
    monkeypatch.setattr(kernel_record, "_ENTRY", {"enabled": lambda: True,
                                                  "disable": lambda: type("R", (), {"events": lambda self: events})()})
    recording = kernel_record.Recording("cuda")
    recording.running = True
    for timed, flushed in ((True, True), (True, True), (False, False), (True, True)):
        recording.on(timed, flushed)
        recording.off()
    recorded = recording.stop()
    assert recorded["kernels"] == {"own_kernel": [4, 0.13], fill: [2, 0.02], spin: [1, 0.004]}, recorded
    assert recorded["flushes_left_out"] == 2 and recorded["flushes_unseen"] == 1, recorded
    assert recorded["leads_left_out"] == 1, recorded
    assert recorded["outside_windows"] == 1 and recorded["timed"]["device_us"] == 0.134, recorded


def test_no_call_starts_while_an_earlier_calls_output_is_alive() -> None:
    """Each call's output is dropped before the next call starts (a kept trial's goes to ``keep``, which owns it):
    the three estimate calls once held their outputs together, so a 6 GiB output's timing worker held four of them
    and ran out of memory on an 80 GB H100 (h100-2026-12-06-c)."""
    alive: weakref.WeakSet[torch.Tensor] = weakref.WeakSet()
    held_at_start: list[int] = []

    def call() -> torch.Tensor:
        held_at_start.append(len(alive))
        out = torch.zeros(8)
        alive.add(out)
        return out

    result = timer.time_calls(call, "cpu", TIMING_RULES["cpu"], share=1.0, max_trials=4)
    assert len(held_at_start) == ESTIMATE_CALLS + result["warmup"] + len(result["times_ms"])
    assert max(held_at_start) == 0, held_at_start


@pytest.mark.parametrize("rule", [TIMING_RULES["cuda"], TIMING_RULES["cpu"]])
def test_a_worker_warmed_up_before_re_warms_for_rewarm_ms_from_one_call_to_min_warmup_calls(rule) -> None:
    """A worker's first command under a baseline warms up for ``warmup_ms`` (at least ``min_warmup_calls``); its
    later ones (``warmed``) for ``rewarm_ms`` by the estimate: one call of a slow kernel, ``min_warmup_calls`` of a
    fast one; the trials are the same either way."""
    for ms in (0.01, rule.rewarm_ms / 2, rule.rewarm_ms * 3):
        first, trials, _ = timer._trial_count(ms, rule, 0.25)
        again, trials_again, _ = timer._trial_count(ms, rule, 0.25, warmed=True)
        assert trials == trials_again
        assert first == max(rule.min_warmup_calls, math.ceil(rule.warmup_ms / ms))
        assert again == max(1, min(rule.min_warmup_calls, math.ceil(rule.rewarm_ms / ms)))
    assert timer._trial_count(rule.rewarm_ms * 3, rule, 0.25, warmed=True)[0] == 1
    assert timer._trial_count(0.01, rule, 0.25, warmed=True)[0] == rule.min_warmup_calls


@pytest.mark.parametrize("estimate_ms", [None, 1000.0])
def test_an_estimate_from_the_parent_replaces_the_estimate_calls_and_the_ring_still_bounds_the_trials(
        estimate_ms: float | None) -> None:
    """Sent an estimate (``estimate_ms``: the median of the worker's previous command), a command makes no
    estimate calls: its calls are its warm-up and its trials, and the estimate sets the trial count (a call of a
    second over a 300 ms budget: the rule's fewest trials). Without the estimate calls no output has shown its size
    before the trials: the first trial's bounds them to the ring (here two outputs) as the estimates' would have.
    Control: without an estimate, ``ESTIMATE_CALLS`` more calls and many more trials."""
    calls: list[int] = []

    def call() -> torch.Tensor:
        calls.append(1)
        time.sleep(0.0005)
        return torch.zeros(256)  # 1 KiB

    rule = TIMING_RULES["cpu"]
    result = timer.time_calls(call, "cpu", rule, share=1.0, warmed=True, estimate_ms=estimate_ms)
    ringed = timer.time_calls(call, "cpu", rule, share=1.0, warmed=True, estimate_ms=estimate_ms,
                              ring_bytes=2048, keep=lambda i, out: None)
    estimates = 0 if estimate_ms is not None else ESTIMATE_CALLS
    assert result["estimates"] == ringed["estimates"] == estimates
    warmup = 1 if estimate_ms is not None else rule.min_warmup_calls  # a call of a second re-warms in one
    assert result["warmup"] == warmup
    assert len(calls) == 2 * (estimates + warmup) + len(result["times_ms"]) + len(ringed["times_ms"])
    assert len(result["times_ms"]) == (rule.min_trials if estimate_ms is not None else rule.max_trials)
    assert len(ringed["times_ms"]) == 2
    # the worker's split counts every timed call, none of the estimates (it once skipped three calls either way)
    split = result["split_ms"]
    assert split["timed_calls"] == pytest.approx(sum(result["times_ms"]))  # on the CPU the same clock readings
    assert split["before_trials"] >= split["first_inputs"] + split["estimate_calls"] + split["warmup_calls"]
    assert (split["estimate_calls"] >= ESTIMATE_CALLS * 0.5) is (estimate_ms is None)  # each call sleeps 0.5 ms
