"""kbv's seeding in a worker: the same draws as ``torch.manual_seed``, without its per-call cost.

``torch.manual_seed`` also queues a seed for every backend not initialised (XPU, MTIA, CUDA before first use) and
formats a stack trace for each: about 0.2 ms per call on the CPU, once per timed trial. ``seed_everything`` seeds
the CPU generator and, once CUDA is initialised, every CUDA generator directly.
"""

from __future__ import annotations

import traceback

import torch

from kbv.worker.loading import seed_everything


def test_seed_everything_draws_what_torch_manual_seed_draws():
    for seed in (0, 1, 2**40 + 7):
        seed_everything(seed)
        ours = (torch.rand(5), torch.randn(3, 2), torch.randint(0, 100, (4,)))
        torch.manual_seed(seed)
        theirs = (torch.rand(5), torch.randn(3, 2), torch.randint(0, 100, (4,)))
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs))


def test_seed_everything_formats_no_stack_trace_when_cuda_is_absent_or_initialised(monkeypatch):
    calls = []
    monkeypatch.setattr(traceback, "format_stack", lambda *a, **k: calls.append(1) or [])
    if torch.cuda.is_available() and not torch.cuda.is_initialized():
        torch.cuda.init()
    for seed in range(20):
        seed_everything(seed)
    assert calls == []
    torch.manual_seed(3)  # the function it replaces does format them (the cost this avoids)
    assert calls
