"""The worker's timer (``kbv.worker.timer.time_calls``): which input set each call reads."""

from __future__ import annotations

import torch

from kbv.protocol import FIRST_TIMED_CALL, TIMING_RULES
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
    untimed = 3 + result["warmup"]
    assert [s for s, _ in seen[:untimed]] == [FIRST_TIMED_CALL - 1] * untimed  # estimates and warm-up: one set
    assert kept == {i: 2.0 * i for i in range(FIRST_TIMED_CALL, FIRST_TIMED_CALL + trials)}
    assert result["split_ms"]["prepare"] >= 0.0
