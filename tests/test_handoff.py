"""Large outputs handed to the judge as descriptors (kbv.worker.handoff, kbv.wire): the parent relays them unread,
the judge imports only sealed buffers of the declared size, and whatever else a candidate sends is a wrong output,
never an evaluator failure. In-process: both ends of real socketpairs, no worker."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from multiprocessing.connection import Connection
from typing import Any, Iterator

import pytest
import torch

from kbv import judge, wire
from kbv.protocol import HANDOFF_MIN_BYTES
from kbv.worker import handoff
from kbv.worker.session import _on_device


@pytest.fixture
def codec() -> Iterator[handoff.Codec]:
    yield handoff.Codec("cpu")
    wire.use_codec(None)


def pair() -> tuple[Connection, Connection]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return Connection(a.detach()), Connection(b.detach())


def high_pair() -> tuple[Connection, Connection]:
    """A socket pair on descriptors above 1023, which ``select()`` refuses (a parent with many pairs in flight)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    high = [fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD_CLOEXEC, 1500) for sock in (a, b)]
    a.close()
    b.close()
    return Connection(high[0]), Connection(high[1])


def relay(reply: dict[str, Any], codec: handoff.Codec, deadline: float | None = None,
          make_pair: Any = pair) -> tuple[Any, Any]:
    """Candidate worker -> parent -> judge, as kbv does it: what the parent holds and what the judge gets."""
    cand_end, parent_from_cand = make_pair()
    parent_to_judge, judge_end = make_pair()
    wire.use_codec(codec)  # the candidate worker
    wire.send_parts(cand_end, *wire.split(reply, handoff=True), deadline=deadline)
    wire.use_codec(None)  # the parent
    held = wire.recv(parent_from_cand, deadline=deadline, relay=True)
    wire.send(parent_to_judge, {"cmd": "judge", "candidate": held}, deadline)
    wire.use_codec(codec)  # the judge
    got = wire.recv(judge_end, deadline=deadline)
    for c in (cand_end, parent_from_cand, parent_to_judge, judge_end):
        c.close()
    return held, got["candidate"]


def big(seed: int = 0) -> torch.Tensor:
    return torch.randn(HANDOFF_MIN_BYTES // 4 + 17, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("with_deadline", [False, True])
def test_a_large_output_reaches_the_judge_as_a_descriptor_the_parent_never_reads(codec, with_deadline):
    deadline = time.monotonic() + 60 if with_deadline else None
    out, small = big(), torch.arange(5.0)
    held, got = relay({"outputs": [{"tensor": out}, {"tensor": small}, {"tensor": out}]}, codec, deadline)
    handles = wire.handles_in(held)
    assert len(handles) == 1 and handles[0].kind == "host" and handles[0].nbytes == out.numel() * 4
    assert isinstance(held["outputs"][1]["tensor"], torch.Tensor)  # small outputs still travel through the pipe
    assert held["outputs"][0]["tensor"] is held["outputs"][2]["tensor"]  # one view sent once
    assert not hasattr(handles[0], "numpy") and not isinstance(handles[0], torch.Tensor)
    assert torch.equal(got["outputs"][0]["tensor"], out) and torch.equal(got["outputs"][1]["tensor"], small)
    assert got["outputs"][0]["tensor"].data_ptr() != out.data_ptr()


def test_descriptors_above_1023_are_waited_on_too(codec):
    """On the H200 (2026-12-04) timing stages failed with "filedescriptor out of range in select()" once a parent
    with eight pairs in flight held more than 1024 descriptors: waits use poll."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip("the hard open-file limit is below 2048")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    try:
        out = big()
        _, got = relay({"outputs": [{"tensor": out}]}, codec, time.monotonic() + 60, make_pair=high_pair)
        assert torch.equal(got["outputs"][0]["tensor"], out)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_without_handoff_the_same_output_travels_through_the_pipe(codec):
    wire.use_codec(codec)
    header, tensors = wire.split({"outputs": [{"tensor": big()}]}, handoff=False)
    assert not any(isinstance(t, wire.Handle) for t in tensors)


def test_the_judge_refuses_an_unsealed_buffer_a_candidate_could_still_change(codec):
    """A memfd written but never sealed: the sender could rewrite it after the judge's checks."""
    t = big()
    fd = os.memfd_create("x", os.MFD_ALLOW_SEALING)
    os.write(fd, t.numpy().tobytes())
    with pytest.raises(handoff.HandoffError, match="not sealed"):
        handoff.import_host(fd, torch.float32, list(t.shape), t.numel() * 4)


def test_the_judge_refuses_a_buffer_of_another_size_or_no_memfd_at_all(codec, tmp_path):
    t = big()
    fd = handoff.export_host(t[:-1])
    with pytest.raises(handoff.HandoffError, match="declared"):
        handoff.import_host(fd, torch.float32, list(t.shape), t.numel() * 4)
    path = tmp_path / "f"
    path.write_bytes(t.numpy().tobytes())
    with pytest.raises(handoff.HandoffError, match="not a sealed"):
        handoff.import_host(os.open(path, os.O_RDONLY), torch.float32, list(t.shape), t.numel() * 4)


def test_sealed_means_the_sender_cannot_write_it_afterwards():
    fd = handoff.export_host(big())
    assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & handoff.SEALS == handoff.SEALS
    with pytest.raises(PermissionError):
        os.pwrite(fd, b"\0" * 8, 0)
    os.close(fd)


def test_an_imported_buffer_is_mapped_copy_on_write_and_holds_the_sealed_bytes():
    """The importer maps a sealed memfd instead of reading it into memory of its own: it gets the sender's bytes,
    a write on its side changes nothing another importer (the next timing worker, given the same state) sees, and
    an empty tensor needs no mapping."""
    t = big()
    fd = handoff.export_host(t)
    again = os.dup(fd)
    first = handoff.import_host(fd, t.dtype, list(t.shape), t.numel() * t.element_size())
    assert torch.equal(first, t)
    first.zero_()
    second = handoff.import_host(again, t.dtype, list(t.shape), t.numel() * t.element_size())
    assert torch.equal(second, t) and not torch.equal(first, t)
    empty = handoff.export_host(torch.empty(0, 3))
    assert handoff.import_host(empty, torch.float32, [0, 3], 0).shape == (0, 3)


class ForgingCodec(handoff.Codec):
    """A candidate's own exporter: hands over a descriptor that is not a sealed copy of its output."""

    def __init__(self, make_fd):
        super().__init__("cpu")
        self.make_fd = make_fd

    def export(self, t):
        return "host", self.make_fd(t)


def unsealed(t: torch.Tensor) -> int:
    fd = os.memfd_create("forged", os.MFD_ALLOW_SEALING)
    os.write(fd, t.numpy().tobytes())
    return fd


def test_a_forged_descriptor_is_a_wrong_output_not_an_evaluator_failure(codec):
    t = big()
    cand_end, parent_from_cand = pair()
    parent_to_judge, judge_end = pair()
    wire.use_codec(ForgingCodec(unsealed))
    wire.send_parts(cand_end, *wire.split({"structure": "single", "outputs": [{"tensor": t}]}, handoff=True))
    wire.use_codec(None)
    held = wire.recv(parent_from_cand)
    wire.send(parent_to_judge, {"candidate": held})
    wire.use_codec(codec)
    got = _on_device(wire.recv(judge_end)["candidate"], "cpu")
    assert "output handoff failed" in got["outputs"][0]["not_a_tensor"]
    reference = {"structure": "single", "outputs": [{"tensor": t}]}
    comparison = judge.compare_outputs(got, reference, "fp32")
    assert not comparison.passed and "handoff failed" in comparison.reason


def test_a_message_whose_descriptors_do_not_match_its_header_is_refused():
    cand_end, parent_end = pair()
    header = wire.json.dumps({"body": {"__tensor__": 0}, "__tensors__": [
        {"dtype": "float32", "shape": [4], "nbytes": 16, "handle": "host"},
        {"dtype": "float32", "shape": [4], "nbytes": 16, "handle": "host"}]}).encode()
    fd = handoff.export_host(torch.zeros(4))
    wire.send_parts(cand_end, header, [wire.Handle(fd, "host", "float32", [4], 16, close_after_send=True)])
    with pytest.raises(wire.WireError, match="handles frame"):
        wire.recv(parent_end)


def test_an_unknown_handle_kind_is_refused_before_any_descriptor_is_read():
    cand_end, parent_end = pair()
    header = wire.json.dumps({"body": 0, "__tensors__": [
        {"dtype": "float32", "shape": [4], "nbytes": 16, "handle": "dmabuf"}]}).encode()
    cand_end.send_bytes(header)
    with pytest.raises(wire.WireError, match="unknown handle kind"):
        wire.recv(parent_end)


def test_handles_count_against_the_reply_budget(codec):
    cand_end, parent_end = pair()
    wire.use_codec(codec)
    wire.send_parts(cand_end, *wire.split({"outputs": [{"tensor": big()}]}, handoff=True))
    wire.use_codec(None)
    with pytest.raises(wire.WireError, match="budget"):
        wire.recv(parent_end, max_bytes=HANDOFF_MIN_BYTES // 2)


def test_same_outputs_is_decided_by_the_judge_on_relayed_outputs(codec):
    a = big(1)
    b = a.clone()
    b[3] += 1.0
    _, first = relay({"outputs": [{"tensor": a}]}, codec)
    _, again = relay({"outputs": [{"tensor": a.clone()}]}, codec)
    _, other = relay({"outputs": [{"tensor": b}]}, codec)
    assert judge.same_outputs(first, again) == (True, None)
    identical, worst = judge.same_outputs(first, other)
    assert not identical and worst == pytest.approx(1.0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_output_is_handed_over_as_a_vmm_descriptor_and_snapshotted():
    gpu = handoff.Codec("cuda:0", ("host", "cuda"))
    out = torch.randn(HANDOFF_MIN_BYTES // 4 * 3 + 5, device="cuda")
    try:
        held, got = relay({"outputs": [{"tensor": out}]}, gpu)
    finally:
        wire.use_codec(None)  # this (parent) process registers no codec of its own for the tests after this one
    assert [h.kind for h in wire.handles_in(held)] == ["cuda"]
    snap = got["outputs"][0]["tensor"]
    assert snap.is_cuda and torch.equal(snap, out) and snap.data_ptr() != out.data_ptr()
    fd = handoff.export_cuda(out[: out.numel() // 2])  # a buffer smaller than declared does not map
    with pytest.raises(handoff.HandoffError):
        handoff.import_cuda(fd, torch.float32, list(out.shape), out.numel() * 4, 0)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")])])
@pytest.mark.slow
def test_an_evaluation_judges_large_outputs_through_handoff(tmp_path, device):
    """Whole pairs, the sandbox on: an honest kernel with a 2 MiB output is correct with every judged output
    handed over (the record says how many, by kind: sealed memfds on the CPU, VMM descriptors on CUDA), and a
    wrong one is still caught through the same route."""
    from conftest import ROOT
    from kbv.eval.pair import EvalOptions
    from kbv.eval.runner import run_pairs
    from kbv.problems import load_problem
    from kbv.problems.candidates import Candidate, Pair
    from kbv.records import read_records

    problem = load_problem(ROOT / "tests/problems/handoff/level1/1_ReLU_2MiB.py")
    wrong = tmp_path / "wrong.py"
    wrong.write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n"
                     "    def forward(self, x):\n        return torch.relu(x) + (x < 0).float() * 1e-2\n")
    pairs = [Pair(problem, Candidate.from_path(ROOT / "tests/candidates/fallback_torch_relu.py", sample=0)),
             Pair(problem, Candidate.from_path(wrong, sample=1))]
    out = tmp_path / "r.jsonl"
    kind = "host" if device == "cpu" else "cuda"
    run_pairs(pairs, EvalOptions(device=device, timeout=60.0 if device == "cpu" else 180.0, build_timeout=20.0,
                                 cuda_handoff=device == "cuda"), out)
    records = {r["sample"]: r for r in read_records(out)}
    honest, caught = records[0], records[1]
    assert honest["verdict"] == "correct", (honest["error"], honest["flags"], {  # h100-2026-12-07-g: rejected, why?
        k: (honest.get("timing_ms") or {}).get(k) for k in ("reference_clean", "reference_after_candidate", "untimed")})
    handed = honest["env"].get("output_handoff")
    assert handed, {k: honest["env"].get(k) for k in ("device", "isolation", "output_handoff")}
    assert handed["correctness"][kind]["outputs"] >= 6 and handed["performance"][kind]["outputs"] >= 1
    assert honest["correctness"]["poison"]["identical"] is True
    assert caught["verdict"] == "incorrect" and caught["env"]["output_handoff"]["correctness"][kind]["outputs"]


def test_the_reference_state_is_handed_once_and_relayed_to_every_later_worker(codec):
    """The reference's parameters leave its worker as sealed host memfds (``wire.split(host=True)``, even from a
    GPU: a device buffer an importer maps could be written by it); the parent keeps the descriptors and sends the
    same ones to each later worker, every one of which reads the same values into memory of its own."""
    from kbv.worker.session import STATE_COMMANDS

    assert {"setup", "perturb"} <= STATE_COMMANDS
    weight, bias = big(3), torch.arange(4.0)
    ref_end, parent_from_ref = pair()
    wire.use_codec(codec)  # the reference worker
    wire.send_parts(ref_end, *wire.split({"state": {"w": weight, "b": bias}}, handoff=True, host=True))
    wire.use_codec(None)  # the parent
    held = wire.recv(parent_from_ref, relay=True)["state"]
    assert isinstance(held["w"], wire.Handle) and held["w"].kind == "host" and isinstance(held["b"], torch.Tensor)
    for _ in range(3):  # correctness' candidate, then a timing pair's reference and candidate
        parent_end, worker_end = pair()
        wire.send(parent_end, {"cmd": "load", "state": held})
        wire.use_codec(codec)  # a later worker
        got = wire.recv(worker_end)["state"]
        wire.use_codec(None)
        assert torch.equal(got["w"], weight) and got["w"].data_ptr() != weight.data_ptr()
        got["w"].zero_()  # the worker's copy is its own: the next worker still gets the reference's values
        parent_end.close()
        worker_end.close()
    assert held["w"].fd >= 0
    for c in (ref_end, parent_from_ref):
        c.close()


@pytest.mark.slow
def test_a_pair_whose_weights_travel_as_descriptors_is_judged_on_the_perturbed_weights(tmp_path):
    """Whole pair on the CPU, sandbox on: the reference's 2.3 MiB weight reaches the candidate as a descriptor, in
    correctness (seeded, then perturbed) and in every timing worker; the honest candidate is correct only if it got
    the perturbed values, and one that keeps the seeded weight it built instead is caught."""
    from conftest import ROOT
    from kbv.eval.pair import EvalOptions
    from kbv.eval.runner import run_pairs
    from kbv.problems import load_problem
    from kbv.problems.candidates import Candidate, Pair
    from kbv.records import read_records

    problem = load_problem(ROOT / "tests/problems/handoff/level1/2_Linear_2MiB_weights.py")
    honest, own = tmp_path / "honest.py", tmp_path / "own.py"
    honest.write_text("import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def __init__(self, n):\n"
                      "        super().__init__()\n        self.fc = nn.Linear(n, n)\n\n"
                      "    def forward(self, x):\n        return self.fc(x)\n")
    own.write_text("import torch.nn as nn\nimport torch.nn.functional as F\n\nclass ModelNew(nn.Module):\n"
                   "    def __init__(self, n):\n        super().__init__()\n        self.fc = nn.Linear(n, n)\n"
                   "        self.kept = self.fc.weight.detach().clone()  # the seeded weight, never the loaded one\n\n"
                   "    def forward(self, x):\n        return F.linear(x, self.kept.to(x.device), self.fc.bias)\n")
    out = tmp_path / "r.jsonl"
    run_pairs([Pair(problem, Candidate.from_path(honest, sample=0)), Pair(problem, Candidate.from_path(own, sample=1))],
              EvalOptions(device="cpu", timeout=60.0, build_timeout=20.0, timing_pairs=1), out)
    records = {r["sample"]: r for r in read_records(out)}
    assert records[0]["verdict"] == "correct", records[0]["error"]
    assert "fc.weight" in records[0]["correctness"]["parameters_perturbed"]
    assert records[1]["verdict"] == "incorrect"


def test_a_failed_device_export_is_remembered_with_its_reason(monkeypatch):
    """A worker whose device export fails sends its outputs through the pipe from then on; the reason is kept
    (the session reports it once, the record carries it as env.output_handoff.<stage>.export_failed)."""
    from types import SimpleNamespace

    def broken(t):
        raise handoff.HandoffError("cuMemCreate: CUDA error 801 (operation not supported)")

    monkeypatch.setattr(handoff, "export_cuda", broken)
    codec = handoff.Codec("cpu", ("host", "cuda"))
    fake = SimpleNamespace(device=SimpleNamespace(type="cuda"))
    assert codec.export(fake) is None and not codec.cuda_ok
    assert codec.failure == "HandoffError: cuMemCreate: CUDA error 801 (operation not supported)"
    assert codec.export(fake) is None  # not tried again


def test_a_dropped_message_frees_its_descriptors_at_once_without_the_cycle_collector(codec):
    """A relayed output's buffer lives as long as the parent holds its descriptor: once the parent drops the
    message, the descriptor is closed then, not at the next garbage collection (on a GPU each one pins a copy of
    the output: a 6 GB output per trial ran the H200 out of memory before this)."""
    import gc

    gc.disable()
    try:
        held, _ = relay({"outputs": [{"tensor": big()}]}, codec)
        (handle,) = wire.handles_in(held)
        fd = handle.fd
        os.fstat(fd)  # open while held
        del held, handle
        with pytest.raises(OSError):
            os.fstat(fd)
    finally:
        gc.enable()


def test_the_parent_relays_descriptors_even_with_a_codec_registered_in_its_process(codec):
    """The parent never imports a candidate's output: ``relay`` keeps descriptors as handles whatever codec the
    process holds (a GPU test once left one registered in the test process: the next evaluation's parent imported
    every output itself and relayed the bytes through pipes, handing over nothing)."""
    cand_end, parent_end = pair()
    wire.use_codec(codec)
    wire.send_parts(cand_end, *wire.split({"outputs": [{"tensor": big()}]}, handoff=True))
    held = wire.recv(parent_end, relay=True)  # the codec is still registered here
    assert [h.kind for h in wire.handles_in(held)] == ["host"]
    for c in (cand_end, parent_end):
        c.close()


def test_an_export_out_of_device_memory_empties_the_cache_and_tries_once_more(monkeypatch) -> None:
    """On the H200 the 20th 6 GiB output of a pair failed ``cuMemCreate`` (out of memory) while PyTorch's caches
    held the memory; every later output then went through the pipe (seconds per GiB). An out-of-memory export now
    empties the cache and tries once more; only a second failure turns CUDA exports off."""
    import types

    from kbv.worker import handoff

    calls: list[str] = []
    outcomes = iter([handoff.HandoffError("cuMemCreate: CUDA error 2 (out of memory)"), 7,
                     handoff.HandoffError("cuMemCreate: CUDA error 2 (out of memory)"),
                     handoff.HandoffError("cuMemCreate: CUDA error 2 (out of memory)")])

    def export_cuda(t: object) -> int:
        calls.append("export")
        result = next(outcomes)
        if isinstance(result, Exception):
            raise result
        return result

    monkeypatch.setattr(handoff, "export_cuda", export_cuda)
    monkeypatch.setattr(handoff.torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    codec = handoff.Codec("cuda", ("cuda",))
    fake = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"))
    assert codec.export(fake) == ("cuda", 7) and codec.cuda_ok and codec.failure is None  # type: ignore[arg-type]
    assert calls == ["export", "empty_cache", "export"]
    assert codec.export(fake) is None and not codec.cuda_ok  # type: ignore[arg-type]
    assert "out of memory" in (codec.failure or "")


def test_the_judge_gives_large_candidate_outputs_back_after_judging() -> None:
    from kbv.worker import session

    big = torch.empty(0)
    msg = {"cmd": "judge", "candidate": {"outputs": [{"tensor": torch.empty(4, dtype=torch.float64)}]}, "n": big}
    assert session._tensor_bytes(msg) == 32
    assert session.RELEASE_AFTER == {"judge", "same", "precision"} and session.RELEASE_BYTES >= 2**20


def test_a_lent_buffer_in_a_candidates_reply_is_a_protocol_failure(codec) -> None:
    """Every worker maps ``lent-*`` buffers live (a lender lends either role its timed inputs): were a candidate's
    output to arrive as one, the judge would compare memory the candidate can still write. The parent refuses such a
    reply from any worker but a reference's (the control: the judge's codec maps it live, and a write after the
    import shows through)."""
    from kbv.sandbox import launch
    from kbv.worker import lending

    codec.borrow = lending.borrow
    t = big()
    fd = os.memfd_create("forged-lent", os.MFD_ALLOW_SEALING)
    os.write(fd, t.numpy().tobytes())
    cand_end, parent_from_cand = pair()
    wire.send_parts(cand_end, *wire.split({"ok": True, "outputs": [wire.Handle(os.dup(fd), "lent-host", "uint8",
                                                                                [t.nbytes], t.nbytes, close_after_send=True)]}))
    held = wire.recv(parent_from_cand, relay=True)

    class Spec:
        role = "candidate"
    worker = object.__new__(launch.Worker)
    worker.spec, worker.handoffs, worker.tamper, worker.handoff_failure = Spec(), {}, set(), None
    killed: list[bool] = []
    worker.kill = lambda: killed.append(True)  # type: ignore[method-assign]
    worker.log_tail = lambda: ""  # type: ignore[method-assign]
    with pytest.raises(launch.WorkerFailure, match="lent buffer"):
        worker._reply(held)
    assert killed
    Spec.role = "reference"
    assert worker._reply(held)["ok"] is True  # a lender's reply: its slot's descriptor

    parent_to_judge, judge_end = pair()
    wire.send(parent_to_judge, {"candidate": held})
    wire.use_codec(codec)
    mapped = wire.recv(judge_end)["candidate"]["outputs"][0]
    os.pwrite(fd, b"\xff" * 8, 0)  # the sender writes after the judge imported it
    assert bytes(mapped[:8].tolist()) == b"\xff" * 8
