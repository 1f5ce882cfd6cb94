"""The judge's comparisons work chunk by chunk (bounded temporaries on multi-GB outputs) with the same answers as
on whole tensors: a difference anywhere, in any chunk, is seen."""

from __future__ import annotations

import pytest
import torch

from kbv import judge


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(judge, "CHUNK", 7)


def reply(t: torch.Tensor) -> dict:
    return {"outputs": [{"tensor": t}]}


@pytest.mark.parametrize("where", [0, 6, 7, 29, 99])
def test_standard_check_sees_a_difference_in_any_chunk(small_chunks, where):
    ref = torch.rand(100)
    cand = ref.clone()
    assert judge.standard_check(reply(cand), reply(ref), 1e-2)
    cand[where] += 1.0
    assert not judge.standard_check(reply(cand), reply(ref), 1e-2)
    assert judge.standard_check(reply(cand.to(torch.float64)), reply(ref), 1e-2) is False  # cast per chunk


@pytest.mark.parametrize("where", [0, 8, 99])
def test_same_outputs_sees_a_difference_in_any_chunk_and_nan_equals_nan(small_chunks, where):
    a = torch.rand(100)
    a[3] = float("nan")
    b = a.clone()
    assert judge.same_outputs(reply(a), reply(b)) == (True, None)
    b[where] += 0.5
    identical, worst = judge.same_outputs(reply(a), reply(b))
    assert not identical and worst == pytest.approx(0.5)
