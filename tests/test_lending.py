"""Inputs the judge lends (kbv.worker.lending), in one process: the reference's side writes them between bands into a
shared buffer, the candidate's side maps the same memory through the descriptor, and the judge's read-back sees
every write the candidate's side made, whatever that side's own checks say."""

from __future__ import annotations

import fcntl
import os

import pytest
import torch

from kbv.worker import lending
from kbv.worker.session import _shares_storage


def _args() -> list:
    return [torch.rand(4, 33), 7, torch.arange(10, dtype=torch.int64), None]


def _borrowed(lent: lending.Lent) -> list:
    """The candidate's side: the descriptor the judge sends, mapped here, and the inputs as views of it."""
    msg = lent.message()
    handle = msg["buffer"]
    buffer = lending.borrow(handle.kind, os.dup(handle.fd), handle.nbytes, "cpu")
    handle.close()
    return lending.views(buffer, msg["layout"])


def test_lent_inputs_are_the_references_and_an_untouched_buffer_checks_clean() -> None:
    args = _args()
    lent = lending.Lent(args, 4096, seed=5, device="cpu", kinds=("host",))
    views = _borrowed(lent)
    assert torch.equal(views[0], args[0]) and torch.equal(views[2], args[2])
    assert views[1] == 7 and views[3] is None
    assert views[0].data_ptr() % lending.ALIGN == 0 and views[2].data_ptr() % lending.ALIGN == 0
    assert lent.check(set()) == {"guard_violations": [], "mutated_inputs": []}


def test_writes_by_the_borrower_are_seen_by_the_lender() -> None:
    """A write past input 0 lands in its band, a write into input 2 changes it: the lender sees both, and does not
    compare an input its own call wrote into."""
    args = _args()
    lent = lending.Lent(args, 4096, seed=5, device="cpu", kinds=("host",))
    views = _borrowed(lent)
    flat = views[0].view(-1)
    past = torch.as_strided(flat, (flat.numel() + 3,), (1,))  # three floats past the end, as an overrun does
    past[-3:] = 1.0
    views[2][4] = -1
    check = lent.check(set())
    assert check["guard_violations"] == [{"input": 0, "bytes_before": 0, "bytes_after": 12}]
    assert check["mutated_inputs"] == [2]
    assert lent.check({2})["mutated_inputs"] == []


def test_a_write_before_an_input_is_its_band_before() -> None:
    args = _args()
    lent = lending.Lent(args, 4096, seed=1, device="cpu", kinds=("host",))
    views = _borrowed(lent)
    before = torch.as_strided(views[2].view(-1), (2,), (1,), views[2].storage_offset() - 2)
    before.fill_(123)
    assert lent.check(set())["guard_violations"] == [{"input": 2, "bytes_before": 16, "bytes_after": 0}]


def test_the_lent_buffer_cannot_be_resized_by_the_borrower() -> None:
    """Sealed against shrinking and growing (a shrunk memfd would fault the judge's read-back), not against
    writing (the candidate may write, and is seen)."""
    lent = lending.Lent(_args(), 4096, seed=2, device="cpu", kinds=("host",))
    handle = lent.message()["buffer"]
    seals = fcntl.fcntl(handle.fd, fcntl.F_GET_SEALS)
    assert seals & lending.LENT_SEALS == lending.LENT_SEALS and not seals & fcntl.F_SEAL_WRITE
    with pytest.raises(OSError):
        os.ftruncate(handle.fd, 16)
    with pytest.raises(OSError):
        os.ftruncate(handle.fd, handle.nbytes * 2)
    os.pwrite(handle.fd, b"x", 0)  # writes are allowed
    handle.close()
    assert lent.check(set())["guard_violations"][0]["bytes_before"] == 1


@pytest.mark.parametrize("arg", [[torch.rand(3)], torch.rand(4, 4).t(), {"x": 1}])
def test_inputs_that_cannot_be_lent(arg) -> None:
    with pytest.raises(lending.LendError):
        lending.Lent([arg], 4096, seed=1, device="cpu", kinds=("host",))


def test_views_of_one_lent_buffer_do_not_alias_each_other() -> None:
    """Every lent input is a view of one buffer: aliasing is judged by the bytes a tensor spans, not by its storage,
    so two inputs never alias, and an output that is an input (or part of one) does."""
    lent = lending.Lent([torch.rand(8), torch.rand(8)], 4096, seed=3, device="cpu", kinds=("host",))
    a, b = _borrowed(lent)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert not _shares_storage(a, b)
    assert _shares_storage(a, a[2:5]) and _shares_storage(a[::2], a) and not _shares_storage(a[:0], a)


def test_the_blinded_guard_check_is_blind_only_inside_the_worker() -> None:
    """blind_integrity_changes patches kbv.worker.guard.violations to report nothing and writes into the band after
    its input: the worker's own check (the defence off) sees nothing; the judge's read-back of the buffer it lent
    (the defence on) sees the 64 bytes."""
    import importlib.util

    from conftest import CANDIDATES
    from kbv.worker import guard, integrity

    saved_violations, saved_changes = guard.violations, integrity.Integrity.changes
    try:
        spec = importlib.util.spec_from_file_location("kbv_lend_blind", CANDIDATES / "blind_integrity_changes.py")
        fixture = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fixture)
        x = torch.rand(64, 1024)
        args, guards = guard.surround([x], 4096, 9)
        fixture.ModelNew()(args[0])
        assert guard.violations(guards) == []  # blinded in the worker
        lent = lending.Lent([x], 4096, seed=9, device="cpu", kinds=("host",))
        (view,) = _borrowed(lent)
        fixture.ModelNew()(view)
        assert lent.check(set())["guard_violations"] == [{"input": 0, "bytes_before": 0, "bytes_after": 64}]
    finally:
        guard.violations, integrity.Integrity.changes = saved_violations, saved_changes


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_lent_inputs_on_the_gpu_are_shared_device_memory() -> None:
    """On CUDA the buffer is a VMM allocation shared as a descriptor: the borrower's views are device memory of the
    lender's allocation (no host copy), a kernel's write past an input is seen by the lender, and the borrower's
    mapping goes away with its last tensor."""
    args = [torch.rand(1024, 257, device="cuda"), 3, torch.arange(100, device="cuda")]
    lent = lending.Lent(args, 65536, seed=4, device="cuda", kinds=("host", "cuda"))
    assert lent.kind == "lent-cuda"
    msg = lent.message()
    handle = msg["buffer"]
    buffer = lending.borrow(handle.kind, os.dup(handle.fd), handle.nbytes, "cuda")
    handle.close()
    views = lending.views(buffer, msg["layout"])
    assert views[0].is_cuda and torch.equal(views[0], args[0]) and views[1] == 3
    assert lent.check(set()) == {"guard_violations": [], "mutated_inputs": []}
    flat = views[0].view(-1)
    torch.as_strided(flat, (flat.numel() + 5,), (1,))[-5:].fill_(2.0)  # a kernel writing past its input
    views[2].mul_(2)
    torch.cuda.synchronize()
    check = lent.check(set())
    (violation,) = check["guard_violations"]  # 20 bytes written; a written byte may equal the pattern's by chance
    assert violation["input"] == 0 and violation["bytes_before"] == 0 and 16 <= violation["bytes_after"] <= 20
    assert check["mutated_inputs"] == [2]
    del views, flat, buffer
    lent.close()


def test_a_refilled_slot_is_compared_with_its_latest_contents() -> None:
    """The timed inputs' slot (kbv.eval.lent_timing): ``refill`` puts the next call's draw in the same layout and
    ``check`` compares against it, a band written before stays seen; inputs of another layout are refused."""
    lent = lending.Lent([torch.rand(64, 33), 5], 65536, seed=1, device="cpu", kinds=("host",))
    msg = lent.message()
    handle = msg["buffer"]
    views = lending.views(lending.borrow(handle.kind, os.dup(handle.fd), handle.nbytes, "cpu"), msg["layout"])
    handle.close()
    nxt = [torch.rand(64, 33), 5]
    lent.refill(nxt)
    assert torch.equal(views[0], nxt[0]) and lent.check(set()) == {"guard_violations": [], "mutated_inputs": []}
    views[0][3, 4] += 1.0  # the candidate's call writes into its input
    assert lent.check(set())["mutated_inputs"] == [0]
    lent.refill([torch.rand(64, 33), 5])
    assert lent.check(set())["mutated_inputs"] == []  # the next call's contents
    with pytest.raises(lending.LendError):
        lent.refill([torch.rand(64, 34), 5])
    with pytest.raises(lending.LendError):
        lent.refill([torch.rand(64, 33), 6])  # a value the candidate was sent once, with the layout
    lent.close()


@pytest.mark.parametrize("chunk", [None, 16])
@pytest.mark.parametrize("write", ["none", "band_after", "band_before", "input", "input_excused", "all"])
def test_the_gpus_one_read_check_finds_what_the_check_finds(write, chunk, monkeypatch) -> None:
    """On a GPU the read-back keeps every figure on the device and reads them once (each read waits for a time slice
    on a shared GPU): the same bands and inputs found changed as the CPU's check, band by band and input by input;
    also where inputs are compared in many chunks (``EQUAL_CHUNK_BYTES``)."""
    if chunk:
        monkeypatch.setattr(lending, "EQUAL_CHUNK_BYTES", chunk)
    args = [torch.rand(4, 33), 7, torch.arange(10, dtype=torch.int64), torch.rand(3, dtype=torch.float64), None]
    lent = lending.Lent(args, 4096, seed=3, device="cpu", kinds=("host",))
    views = _borrowed(lent)
    excused: set[int] = set()
    if write in ("band_after", "all"):
        flat = views[0].view(-1)
        torch.as_strided(flat, (flat.numel() + 2,), (1,))[-2:] = 5.0
    if write in ("band_before", "all"):
        torch.as_strided(views[3].view(-1), (1,), (1,), views[3].storage_offset() - 1).fill_(9.0)
    if write in ("input", "input_excused", "all"):
        views[2][7] = -3
    if write == "input_excused":
        excused = {2}
    expected = lent.check(excused)
    reads = {"n": 0}
    original = torch.Tensor.tolist

    def tolist(self, *a, **k):
        reads["n"] += 1
        return original(self, *a, **k)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.Tensor, "tolist", tolist)
        for name in ("item", "__bool__", "__int__", "__float__"):
            mp.setattr(torch.Tensor, name, lambda self, *a, **k: pytest.fail("read back one figure at a time"))
        assert lent.check_in_one_read(excused) == expected
    assert reads["n"] == 1
    assert bool(expected["guard_violations"] or expected["mutated_inputs"]) is (write not in ("none", "input_excused"))


def _lender():
    """A reference-role worker Session for the ReLU problem, in this process: the lender of the timed inputs."""
    from conftest import problem_path
    from kbv.problems import load_problem
    from kbv.worker.session import Session

    relu = problem_path("level1/5_ReLU")
    return Session({"device": "cpu", "precision": "fp32", "problem_path": str(relu), "profile": "small",
                    "role": "reference", "mode": load_problem(relu).mode, "handoff": ["host"]})


def test_the_lender_draws_the_next_calls_inputs_ahead_but_only_into_its_own_memory(monkeypatch) -> None:
    """LEND_PREDRAW: with a fill's ``next`` the lender draws that call's inputs once its answer has gone
    (``after_reply``), and the next fill for that seed copies them in instead of drawing; until then the slot holds
    this call's inputs only (nothing of the next call reaches the borrower before its fill), and a fill for another
    seed than the one drawn ahead draws its own."""
    session = _lender()
    lent = session.cmd_lend_timed({"slot": "candidate", "seed": 1, "guard_bytes": 4096})["lent"]
    slot = lending.views(lending.borrow(lent["buffer"].kind, os.dup(lent["buffer"].fd), lent["buffer"].nbytes, "cpu"),
                         lent["layout"])
    lent["buffer"].close()
    draws: list[tuple[int, str]] = []
    original = session._inputs
    monkeypatch.setattr(session, "_inputs", lambda seed, dist: draws.append((seed, dist)) or original(seed, dist))
    assert session.cmd_fill({"slot": "candidate", "seed": 11, "distribution": "D1", "next": [12, "D3"]}) == {
        "check": None}
    assert draws == [(11, "D1")] and session.after_reply is not None
    session.after_reply()
    assert draws[-1] == (12, "D3") and torch.equal(slot[0], original(11, "D1")[0])  # the slot: this call's only
    reply = session.cmd_fill({"slot": "candidate", "seed": 12, "distribution": "D3", "check": True})
    assert reply["check"] == {"guard_violations": [], "mutated_inputs": []}
    assert draws == [(11, "D1"), (12, "D3")] and torch.equal(slot[0], original(12, "D3")[0])  # drawn ahead, used
    session.cmd_fill({"slot": "candidate", "seed": 13, "distribution": "D1", "next": [14, "D2"]})
    session.after_reply()
    slot[0][0, 0] += 1.0  # the borrower's call writes into its input: seen, whatever was drawn ahead
    reply = session.cmd_fill({"slot": "candidate", "seed": 15, "distribution": "D5", "check": True})
    assert reply["check"]["mutated_inputs"] == [0]
    assert draws[-1] == (15, "D5") and torch.equal(slot[0], original(15, "D5")[0])  # not the one drawn ahead


def test_the_slots_one_comparison_finds_what_the_comparison_by_parts_finds() -> None:
    """A refilled host slot is compared with an image of every byte it should hold first (one ``memcmp``); where
    that differs the comparison by parts runs, so a band written stays seen on every later read-back, a write into
    an input is seen, and an input its reference wrote into is not compared."""
    lent = lending.Lent([torch.rand(64, 33), 5, torch.arange(7)], 4096, seed=2, device="cpu", kinds=("host",))
    views = _borrowed(lent)
    lent.refill([torch.rand(64, 33), 5, torch.arange(7)])
    assert lent.image is not None and lent.check(set()) == {"guard_violations": [], "mutated_inputs": []}
    flat = views[0].view(-1)
    torch.as_strided(flat, (flat.numel() + 1,), (1,))[-1:] = 3.0  # one float past input 0: its band after
    views[2][0] = 9
    check = lent.check(set())
    band = check["guard_violations"]  # up to 4 bytes (a byte of 3.0 may match the band's random pattern)
    assert len(band) == 1 and band[0]["input"] == 0 and band[0]["bytes_before"] == 0 and band[0]["bytes_after"] >= 2
    assert check["mutated_inputs"] == [2] and lent.check({2})["mutated_inputs"] == []
    lent.refill([torch.rand(64, 33), 5, torch.arange(7)])  # the next call's inputs; the band is left as it is
    assert lent.check(set()) == {"guard_violations": band, "mutated_inputs": []}
    lent.close()


@pytest.mark.parametrize("where", [0, 1, 4095, 4096, 8191])
def test_host_bytes_compare_equal_exactly_when_every_byte_does(where) -> None:
    a = torch.randint(0, 256, (8192,), dtype=torch.uint8)
    b = a.clone()
    assert lending._equal_bytes(a, b) and lending._equal_bytes(a[:0], b[:0])
    b[where] ^= 0x10
    assert not lending._equal_bytes(a, b) and not lending._equal_bytes(b, a)
    assert lending._equal_bytes(a[where + 1:], b[where + 1:])  # views at any offset
    assert not lending._equal_bytes(a[:4096], a[4096:]) or torch.equal(a[:4096], a[4096:])


@pytest.mark.parametrize("where", [0, 255, 256, 4095, 4096, 8191])
def test_device_bytes_compare_chunk_by_chunk(monkeypatch, where) -> None:
    """The comparison a GPU takes (no memcmp: here int8 views on the CPU) goes EQUAL_CHUNK_BYTES at a time and still
    finds a byte changed anywhere, in any chunk."""
    monkeypatch.setattr(lending, "EQUAL_CHUNK_BYTES", 256)
    a = torch.randint(-128, 128, (8192,), dtype=torch.int8)
    b = a.clone()
    assert lending._equal_bytes(a, b) and not lending._equal_bytes(a, b[:-1])
    b[where] ^= 0x10
    assert not lending._equal_bytes(a, b)


def test_the_lenders_own_writes_are_read_against_the_copy_it_lends() -> None:
    """The reference's ``mutated_inputs`` where it lends: its inputs against the copy it made before its call."""
    x, y = torch.rand(64, 32), torch.rand(16)
    lent = lending.Lent([x, 3, y], 4096, 7, "cpu", ("host",))
    assert lent.written_since_copied() == []
    torch.relu_(x)  # no bit changes: [0, 1) stays as it is
    assert lent.written_since_copied() == []
    y[5] = -1.0
    assert lent.written_since_copied() == [2]
    lent.close()
