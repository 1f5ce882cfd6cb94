"""Drawing a problem's inputs (``kbv.worker.inputs``): each distribution's mapping in place where nothing else holds
the tensor, on a copy where ``get_inputs`` keeps it, the same bits either way."""

from __future__ import annotations

import types

import torch

from kbv.protocol import DISTRIBUTIONS
from kbv.worker import inputs
from kbv.worker.loading import seed_everything

SHIFTED = next(d for d in DISTRIBUTIONS if d.shift)


def _problem(get_inputs) -> types.ModuleType:
    module = types.ModuleType("kbv_problem_under_test")
    module.get_inputs = get_inputs
    return module


def test_every_distribution_maps_to_the_same_bits_as_scale_then_shift() -> None:
    problem = _problem(lambda: [torch.randn(1000), torch.rand(7, 9), torch.randint(0, 5, (4,))])
    for dist in DISTRIBUTIONS:
        drawn = inputs.make_inputs(problem, 7, "cpu", "fp32", dist)
        seed_everything(7)
        raw = problem.get_inputs()
        expected = [x * dist.scale + dist.shift if dist.shift else x * dist.scale for x in raw[:2]] + raw[2:]
        assert all(torch.equal(a, b) for a, b in zip(drawn, expected)), dist.name


def test_a_fresh_input_is_mapped_in_place() -> None:
    """One input's memory at the peak: the tensor ``get_inputs`` returned is the one mapped."""
    made: list[int] = []

    def get_inputs() -> list[torch.Tensor]:
        x = torch.randn(1000)
        made.append(x.data_ptr())  # the address only: no reference kept
        return [x]

    (drawn,) = inputs.make_inputs(_problem(get_inputs), 3, "cpu", "fp32", SHIFTED)
    assert drawn.data_ptr() == made[0]


def test_a_tensor_get_inputs_keeps_is_never_changed() -> None:
    """A module global, a view of it, and one tensor returned twice: each mapped on a copy, the global intact."""
    kept = torch.ones(8)
    fresh = torch.full((3,), 2.0)
    problem = _problem(lambda: [kept, kept[:4], fresh, fresh])
    drawn = inputs.make_inputs(problem, 3, "cpu", "fp32", SHIFTED)
    assert torch.equal(kept, torch.ones(8)) and torch.equal(fresh, torch.full((3,), 2.0))
    assert torch.equal(drawn[0], torch.ones(8) * SHIFTED.scale + SHIFTED.shift)
    assert torch.equal(drawn[2], drawn[3]) and drawn[2].data_ptr() != drawn[3].data_ptr()


def test_the_gpus_poison_blocks_are_placed_as_far_as_the_device_has_room(monkeypatch) -> None:
    """kbv's own poison blocks in a candidate's worker: on an 80 GB card two 6 GiB blocks beside a shared GPU's
    other pairs ran out of device memory, and the candidate was blamed (docs/results/h100-2026-12-05-c). They are
    best effort: as many as fit are placed, and the shortfall is the record's (``correctness.poison_short``)."""
    import types as _types

    from kbv.eval.correctness import CorrectnessStage
    from kbv.worker import memory

    room = [3]
    real_empty = torch.empty

    def empty(*size: int, device: str = "cpu", **kwargs: object) -> torch.Tensor:
        if device == "cuda":
            if not room[0]:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")
            room[0] -= 1
        return real_empty(*size, **kwargs)

    monkeypatch.setattr(memory.torch, "empty", empty)
    monkeypatch.setattr(memory.torch.cuda, "synchronize", lambda: None)
    placed = memory.poison_freed("cuda", 0xA5, [100, 40])
    assert placed == 100 + 100 + 40  # two copies of each size asked, room for three blocks
    stage = _types.SimpleNamespace(ctx=_types.SimpleNamespace(device="cuda"), notes={})
    CorrectnessStage._note_poison(stage, {"poisoned_bytes": [placed, 280]})
    CorrectnessStage._note_poison(stage, {"poisoned_bytes": [280, 280]})
    assert stage.notes["poison_short"] == [{"placed": 240, "asked": 280}]
