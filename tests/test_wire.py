"""kbv.wire: tensors and JSON data over a real multiprocessing connection, and refusal of malformed messages."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import struct
import threading
import time
from typing import Any

import pytest
import torch

from kbv import wire
from kbv.wire import WireError


@pytest.fixture
def pipe():
    a, b = multiprocessing.Pipe()
    yield a, b
    a.close()
    b.close()


def roundtrip(pipe, obj: Any) -> Any:
    a, b = pipe
    wire.send(a, obj)
    return wire.recv(b)


def send_raw(conn, header: Any, frames: list[bytes] = ()) -> None:
    """A hand-made message: a JSON header frame, then the given tensor frames."""
    conn.send_bytes(json.dumps(header).encode() if not isinstance(header, bytes) else header)
    for frame in frames:
        conn.send_bytes(frame)


def spec(dtype: str = "float32", shape: list[Any] | None = None, nbytes: Any = 8) -> dict[str, Any]:
    return {"dtype": dtype, "shape": [2] if shape is None else shape, "nbytes": nbytes}


def assert_same_tensor(got: Any, want: torch.Tensor) -> None:
    assert type(got) is torch.Tensor
    assert got.dtype == want.dtype
    assert tuple(got.shape) == tuple(want.shape)
    assert got.device.type == "cpu"
    assert torch.equal(got, want), (got, want)


# ---------------------------------------------------------------------------------------------------------------
# Round trips


def test_nested_structure_with_many_dtypes_round_trips(pipe):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    tensors = {
        "f32": torch.randn(3, 5),
        "f64": torch.randn(2, 2, dtype=torch.float64),
        "f16": torch.randn(7).half(),
        "bf16": torch.randn(4, 3).to(torch.bfloat16),
        "i64": torch.tensor([-(2**62), -1, 0, 1, 2**62], dtype=torch.int64),
        "i32": torch.tensor([-5, 7], dtype=torch.int32),
        "i8": torch.tensor([-128, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 255], dtype=torch.uint8),
        "bool": torch.tensor([[True, False], [False, True]]),
        "c64": torch.tensor([1 + 2j, -3.5 - 0.25j], dtype=torch.complex64),
        "scalar": torch.tensor(3.25),
        "scalar_int": torch.tensor(-9, dtype=torch.int64),
        "empty": torch.empty(0, 4),
        "empty_bf16": torch.empty(3, 0, dtype=torch.bfloat16),
        "transposed": base.t(),  # non-contiguous
        "strided": base[:, ::2],  # non-contiguous, every other column
        "offset": base[1:3, 2:],  # view with a storage offset
        "expanded": torch.tensor([1.0, 2.0]).expand(3, 2),  # stride 0
        "bf16_transposed": torch.randn(3, 4).to(torch.bfloat16).t(),
    }
    assert not tensors["transposed"].is_contiguous() and not tensors["strided"].is_contiguous()
    obj = {
        "top": tensors["f32"],
        "nested": {"list": [tensors["bf16"], {"deeper": [tensors["i64"], tensors["bool"]]}], "n": 3},
        "tuple": (tensors["scalar"], tensors["empty"]),
        "all": dict(tensors),
        "plain": {"s": "text", "i": 7, "f": 0.5, "none": None, "flag": True, "list": [1, "two", 3.0]},
    }
    got = roundtrip(pipe, obj)

    assert_same_tensor(got["top"], tensors["f32"])
    assert_same_tensor(got["nested"]["list"][0], tensors["bf16"])
    assert_same_tensor(got["nested"]["list"][1]["deeper"][0], tensors["i64"])
    assert_same_tensor(got["nested"]["list"][1]["deeper"][1], tensors["bool"])
    assert got["nested"]["n"] == 3
    assert isinstance(got["tuple"], list) and len(got["tuple"]) == 2  # tuples travel as JSON lists
    assert_same_tensor(got["tuple"][0], tensors["scalar"])
    assert got["tuple"][0].dim() == 0
    assert_same_tensor(got["tuple"][1], tensors["empty"])
    assert set(got["all"]) == set(tensors)
    for name, t in tensors.items():
        assert_same_tensor(got["all"][name], t)
        assert got["all"][name].is_contiguous(), name  # the receiver owns a fresh, dense tensor
    assert got["plain"] == obj["plain"]


def test_received_tensors_are_fresh_memory(pipe):
    original = torch.arange(8, dtype=torch.float32)
    view = original[2:6]
    a, b = pipe
    wire.send(a, {"whole": original, "view": view})
    expected_whole, expected_view = original.clone(), view.clone()
    original.fill_(-1.0)  # after the send: must not reach what the receiver gets
    got = wire.recv(b)
    assert torch.equal(got["whole"], expected_whole)
    assert torch.equal(got["view"], expected_view)
    assert got["whole"].data_ptr() != original.data_ptr()
    # and the received tensors are independent of each other and writable
    got["whole"].zero_()
    assert torch.equal(got["view"], expected_view)


def test_the_same_tensor_twice_is_sent_once_and_arrives_as_one_tensor(pipe):
    t = torch.tensor([1.0, 2.0, 3.0])
    header, tensors = wire.split([t, t, t[1:], t[1:]])
    assert len(tensors) == 2  # t and its view t[1:], each once
    assert json.loads(header)["body"] == [{"__tensor__": 0}, {"__tensor__": 0}, {"__tensor__": 1}, {"__tensor__": 1}]
    got = roundtrip(pipe, [t, t])
    assert torch.equal(got[0], t) and got[0] is got[1]
    assert got[0].data_ptr() != t.data_ptr()  # still the receiver's own memory


def test_different_views_of_one_storage_are_not_merged(pipe):
    base = torch.arange(6, dtype=torch.float32)
    views = [base, base.reshape(2, 3), base.reshape(2, 3).t(), base[1:], base.to(torch.float64), base.conj()]
    header, tensors = wire.split(views)
    assert len(tensors) == 5  # the conjugate of a real tensor is itself
    got = roundtrip(pipe, views)
    for g, v in zip(got, views):
        assert_same_tensor(g, v.contiguous())


def test_tensor_requiring_grad_and_parameter_round_trip_as_plain_tensors(pipe):
    p = torch.nn.Parameter(torch.randn(3, 2))
    y = p * 2
    got = roundtrip(pipe, {"param": p, "y": y})
    assert type(got["param"]) is torch.Tensor and not got["param"].requires_grad
    assert torch.equal(got["param"], p.detach())
    assert torch.equal(got["y"], y.detach())


def test_several_messages_in_a_row_stay_in_step(pipe):
    a, b = pipe
    msgs = [{"i": i, "t": torch.full((i,), float(i))} for i in range(5)]  # includes an empty tensor (i=0)
    for m in msgs:
        wire.send(a, m)
    for m in msgs:
        got = wire.recv(b)
        assert got["i"] == m["i"]
        assert torch.equal(got["t"], m["t"])


def test_non_finite_floats_in_json_survive(pipe):
    got = roundtrip(pipe, {"nan": float("nan"), "inf": float("inf"), "ninf": float("-inf"),
                           "list": [1.0, float("nan")], "t": torch.tensor([float("nan"), float("inf"), -float("inf")])})
    assert math.isnan(got["nan"])
    assert got["inf"] == math.inf
    assert got["ninf"] == -math.inf
    assert got["list"][0] == 1.0 and math.isnan(got["list"][1])
    t = got["t"]
    assert math.isnan(t[0].item()) and t[1].item() == math.inf and t[2].item() == -math.inf


def test_non_string_keys_become_strings(pipe):
    got = roundtrip(pipe, {1: "one", 2.5: [torch.tensor([1])]})
    assert got["1"] == "one"
    assert torch.equal(got["2.5"][0], torch.tensor([1]))


def test_split_describes_each_tensor():
    header, tensors = wire.split({"a": torch.zeros(2, 3, dtype=torch.bfloat16), "b": [torch.tensor(True)]})
    data = json.loads(header)
    assert data["body"] == {"a": {"__tensor__": 0}, "b": [{"__tensor__": 1}]}
    assert data["__tensors__"] == [
        {"dtype": "bfloat16", "shape": [2, 3], "nbytes": 12},
        {"dtype": "bool", "shape": [], "nbytes": 1},
    ]
    assert len(tensors) == 2


def test_closed_channel_raises_eof():
    a, b = multiprocessing.Pipe()
    a.close()
    with pytest.raises(EOFError):
        wire.recv(b)
    b.close()


# ---------------------------------------------------------------------------------------------------------------
# Malformed messages are refused with WireError


def test_well_formed_raw_message_is_accepted(pipe):
    """The control for the raw-frame tests below: a hand-made message in the documented format decodes."""
    a, b = pipe
    payload = torch.tensor([1.5, -2.0], dtype=torch.float32)
    send_raw(a, {"body": {"x": {"__tensor__": 0}}, "__tensors__": [spec()]}, [payload.numpy().tobytes()])
    got = wire.recv(b)
    assert torch.equal(got["x"], payload)


@pytest.mark.parametrize("bad_spec", [
    spec(dtype="float128"),
    spec(dtype="Tensor"),
    spec(dtype="__class__"),
    spec(dtype="torch.float32"),
    spec(dtype="float8_e4m3fn", nbytes=2),
    spec(dtype=None),
], ids=["float128", "Tensor", "dunder", "prefixed", "float8", "null"])
def test_unknown_dtype_is_refused(pipe, bad_spec):
    a, b = pipe
    send_raw(a, {"body": {"__tensor__": 0}, "__tensors__": [bad_spec]}, [b"\0" * 8])
    with pytest.raises(WireError):
        wire.recv(b)


@pytest.mark.parametrize("bad_spec", [
    spec(shape=[2], nbytes=4),  # too few bytes for 2 float32
    spec(shape=[2], nbytes=12),  # too many
    spec(shape=[3, 3], nbytes=8),
    spec(dtype="bfloat16", shape=[4], nbytes=16),  # float32 byte count for a bfloat16 tensor
    spec(shape=[], nbytes=0),  # a 0-dim tensor has one element
    spec(shape=[0, 5], nbytes=4),
], ids=["short", "long", "2d", "bf16", "scalar", "empty"])
def test_shape_and_nbytes_inconsistent_is_refused(pipe, bad_spec):
    a, b = pipe
    send_raw(a, {"body": {"__tensor__": 0}, "__tensors__": [bad_spec]}, [b"\0" * max(bad_spec["nbytes"], 1)])
    with pytest.raises(WireError):
        wire.recv(b)


@pytest.mark.parametrize("shape, nbytes", [([-2], 8), ([-1, -2], 8), ([-2, -2], 16), ([4, -1], 0)])
def test_negative_dimension_is_refused(pipe, shape, nbytes):
    # [-2, -2] has a positive product matching nbytes: only the sign check can refuse it
    a, b = pipe
    send_raw(a, {"body": {"__tensor__": 0}, "__tensors__": [spec(shape=shape, nbytes=nbytes)]}, [b"\0" * 16])
    with pytest.raises(WireError, match="negative"):
        wire.recv(b)


def test_tensor_larger_than_the_limit_is_refused_before_allocating(pipe):
    n = wire.MAX_TENSOR_BYTES // 4 + 1
    a, b = pipe
    send_raw(a, {"body": {"__tensor__": 0}, "__tensors__": [spec(shape=[n], nbytes=n * 4)]})
    with pytest.raises(WireError):
        wire.recv(b)


@pytest.mark.parametrize("frame_size", [4, 7, 12, 64])
def test_tensor_frame_size_differing_from_header_is_refused(pipe, frame_size):
    a, b = pipe
    send_raw(a, {"body": {"__tensor__": 0}, "__tensors__": [spec(shape=[2], nbytes=8)]}, [b"\1" * frame_size])
    with pytest.raises(WireError):
        wire.recv(b)


def test_second_tensor_frame_short_is_refused(pipe):
    a, b = pipe
    send_raw(a, {"body": [{"__tensor__": 0}, {"__tensor__": 1}],
                 "__tensors__": [spec(shape=[2], nbytes=8), spec(dtype="int64", shape=[3], nbytes=24)]},
             [b"\0" * 8, b"\0" * 16])
    with pytest.raises(WireError):
        wire.recv(b)


def test_missing_tensor_frame_then_closed_channel_is_eof(pipe):
    a, b = pipe
    send_raw(a, {"body": {"__tensor__": 0}, "__tensors__": [spec()]})
    a.close()
    with pytest.raises(EOFError):
        wire.recv(b)


@pytest.mark.parametrize("ref", [1, -1, 5, "0", 0.0, None, [0], {"i": 0}])
def test_bad_tensor_reference_index_is_refused(pipe, ref):
    a, b = pipe
    send_raw(a, {"body": {"out": {"__tensor__": ref}}, "__tensors__": [spec()]}, [b"\0" * 8])
    with pytest.raises(WireError, match="tensor reference"):
        wire.recv(b)


def test_tensor_reference_without_any_tensor_is_refused(pipe):
    a, b = pipe
    send_raw(a, {"body": [{"__tensor__": 0}], "__tensors__": []})
    with pytest.raises(WireError):
        wire.recv(b)


@pytest.mark.parametrize("header", [
    b"not json",
    b"\xff\xfe\x00",
    b"[1, 2]",
    b'"a string"',
    b"null",
    json.dumps({"body": 1}).encode(),  # no tensor table
    json.dumps({"__tensors__": []}).encode(),  # no body
    json.dumps({"body": 1, "__tensors__": {"0": spec()}}).encode(),  # table not a list
    json.dumps({"body": 1, "__tensors__": [5]}).encode(),  # spec not an object
    json.dumps({"body": 1, "__tensors__": [{"dtype": "float32", "nbytes": 8}]}).encode(),  # no shape
    json.dumps({"body": 1, "__tensors__": [{"dtype": "float32", "shape": [2]}]}).encode(),  # no nbytes
    json.dumps({"body": 1, "__tensors__": [spec(shape=2)]}).encode(),  # shape not a list
    json.dumps({"body": 1, "__tensors__": [spec(shape=["x"])]}).encode(),
    json.dumps({"body": 1, "__tensors__": [spec(nbytes="eight")]}).encode(),
    json.dumps({"body": 1, "__tensors__": [spec(shape=[float("nan")], nbytes=0)]}).encode(),
])
def test_malformed_header_is_refused(pipe, header):
    a, b = pipe
    send_raw(a, header, [b"\0" * 8])
    with pytest.raises(WireError):
        wire.recv(b)


# ---------------------------------------------------------------------------------------------------------------
# Regressions: malformed or unusual messages found while writing these tests.


@pytest.mark.parametrize("shape", [[0, 10**30], [0, 2**62, 2**62], [float("inf")]],
                         ids=["zero-by-1e30", "stride-overflow", "infinite-dim"])
def test_zero_numel_shape_with_absurd_dimension_is_refused(pipe, shape):
    a, b = pipe
    send_raw(a, {"body": {"__tensor__": 0}, "__tensors__": [spec(shape=shape, nbytes=0)]})
    with pytest.raises(WireError):
        wire.recv(b)


def test_boolean_tensor_reference_is_refused(pipe):
    a, b = pipe
    send_raw(a, {"body": {"__tensor__": True}, "__tensors__": [spec(), spec()]}, [b"\0" * 8, b"\0" * 8])
    try:
        wire.recv(b)
    except WireError:
        return
    raise AssertionError("a boolean tensor reference was accepted")


def test_conjugate_view_round_trips(pipe):
    c = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    got = roundtrip(pipe, c.conj())
    assert torch.equal(got, torch.tensor([1 - 2j, 3 + 1j], dtype=torch.complex64))


# ---------------------------------------------------------------------------------------------------------------
# A hostile sender: raw frames written straight to the socket (declared sizes need not match what follows). The
# receiver must refuse before allocating, and never read an oversized frame.


def frame(payload: bytes, wide: bool = False) -> bytes:
    """multiprocessing's frame: a 4-byte big-endian length, or -1 and an 8-byte length, then the bytes."""
    prefix = struct.pack("!i", -1) + struct.pack("!Q", len(payload)) if wide else struct.pack("!i", len(payload))
    return prefix + payload


def header_frame(body: Any, specs: list[dict[str, Any]]) -> bytes:
    return frame(json.dumps({"body": body, "__tensors__": specs}).encode())


class RawSender:
    """Writes ``data`` to one end of a real socket pair from a thread, then closes that end."""

    def __init__(self, data: bytes):
        self.a, self.b = multiprocessing.Pipe()
        self._data = data
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        fd, view = self.a.fileno(), memoryview(self._data)
        try:
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            pass
        finally:
            self.a.close()

    def rest(self) -> int:
        """Bytes still unread on the receiving end (reads to the end of the stream)."""
        total = 0
        while chunk := os.read(self.b.fileno(), 1 << 20):
            total += len(chunk)
        self._thread.join(5)
        self.b.close()
        return total


@pytest.fixture
def allocations(monkeypatch):
    """Every tensor the receiver allocates, as byte counts; a request for more than 64 MiB fails the test."""
    sizes: list[int] = []
    real = wire._empty

    def counting_empty(shape, dtype):
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        sizes.append(nbytes)
        assert nbytes <= 64 * 2**20, f"the receiver allocated {nbytes} bytes for a hostile reply"
        return real(shape, dtype=dtype)

    monkeypatch.setattr(wire, "_empty", counting_empty)
    return sizes


def test_reply_declaring_a_tebibyte_is_refused_before_allocating(allocations):
    n = wire.MAX_TENSOR_BYTES // 4  # each tensor within the per-tensor limit, 16 of them: 1 TiB in all
    specs = [spec(shape=[n], nbytes=n * 4) for _ in range(16)]
    sender = RawSender(header_frame([{"__tensor__": i} for i in range(16)], specs))
    with pytest.raises(WireError, match="budget"):
        wire.recv(sender.b, max_bytes=2**30)
    assert allocations == []
    sender.rest()


def test_default_budget_refuses_a_tebibyte_too(allocations):
    n = wire.MAX_TENSOR_BYTES // 4
    sender = RawSender(header_frame([], [spec(shape=[n], nbytes=n * 4) for _ in range(16)]))
    with pytest.raises(WireError, match="budget"):
        wire.recv(sender.b)
    assert allocations == []
    sender.rest()


def test_budget_is_exact_on_the_bytes_declared(allocations):
    payload = torch.arange(256, dtype=torch.float32)
    data = header_frame({"__tensor__": 0}, [spec(shape=[256], nbytes=1024)]) + frame(payload.numpy().tobytes())
    sender = RawSender(data)
    assert torch.equal(wire.recv(sender.b, max_bytes=1024), payload)
    sender.rest()
    sender = RawSender(data)
    with pytest.raises(WireError, match="budget of 1023"):
        wire.recv(sender.b, max_bytes=1023)
    assert allocations == [1024]  # only the accepted message allocated
    sender.rest()


def test_many_distinct_tensors_over_the_budget_are_refused_before_allocating(allocations):
    specs = [spec(shape=[2**18], nbytes=2**20) for _ in range(1000)]  # 1000 x 1 MiB declared
    sender = RawSender(header_frame([{"__tensor__": i} for i in range(1000)], specs))
    with pytest.raises(WireError, match="budget"):
        wire.recv(sender.b, max_bytes=16 * 2**20)
    assert allocations == []
    sender.rest()


@pytest.mark.parametrize("wide", [False, True], ids=["4-byte-length", "8-byte-length"])
def test_frame_larger_than_declared_is_refused_without_reading_it(allocations, wide):
    big = b"\x01" * (32 * 2**20)  # far more than a socket buffer holds: the sender blocks until it is read
    sender = RawSender(header_frame({"__tensor__": 0}, [spec(shape=[2], nbytes=8)]) + frame(big, wide=wide))
    with pytest.raises(WireError, match="declared"):
        wire.recv(sender.b)
    assert sender.rest() == len(big)  # the oversized frame was left in the channel, unread


def test_frame_declaring_a_tebibyte_is_refused_at_its_length(allocations):
    """Only the 12-byte prefix of a 1 TiB frame is sent: the reader must refuse it from the prefix alone."""
    sender = RawSender(header_frame({"__tensor__": 0}, [spec(shape=[2], nbytes=8)])
                       + struct.pack("!i", -1) + struct.pack("!Q", 2**40))
    with pytest.raises(WireError, match=f"{2**40} bytes"):
        wire.recv(sender.b)
    sender.rest()


def test_header_frame_of_absurd_size_is_refused_unread():
    sender = RawSender(struct.pack("!i", -1) + struct.pack("!Q", 2**40) + b"{" * 4096)
    with pytest.raises(WireError, match="header"):
        wire.recv(sender.b)
    assert sender.rest() == 4096


def test_header_with_absurd_tensor_count_is_refused(allocations):
    specs = [spec(shape=[0], nbytes=0)] * (wire.MAX_TENSORS + 1)
    sender = RawSender(header_frame([], specs))
    with pytest.raises(WireError, match="tensors in one message"):
        wire.recv(sender.b)
    assert allocations == []
    sender.rest()


def test_deeply_nested_header_is_a_wire_error():
    sender = RawSender(frame(b"[" * 200000 + b"]" * 200000))
    with pytest.raises(WireError):
        wire.recv(sender.b)
    sender.rest()


def test_negative_frame_length_is_refused():
    sender = RawSender(struct.pack("!i", -7))
    with pytest.raises(WireError, match="negative frame length"):
        wire.recv(sender.b)
    sender.rest()


def test_wide_length_prefix_is_read_for_small_frames_too():
    payload = torch.tensor([3.0, -4.0])
    sender = RawSender(frame(json.dumps({"body": {"__tensor__": 0}, "__tensors__": [spec()]}).encode(), wide=True)
                       + frame(payload.numpy().tobytes(), wide=True))
    assert torch.equal(wire.recv(sender.b), payload)
    sender.rest()


def test_header_referencing_one_tensor_1000_times_allocates_it_once(allocations):
    payload = torch.arange(2**18, dtype=torch.float32)  # 1 MiB
    sender = RawSender(header_frame([{"__tensor__": 0}] * 1000, [spec(shape=[2**18], nbytes=2**20)])
                       + frame(payload.numpy().tobytes()))
    got = wire.recv(sender.b, max_bytes=2**20)
    assert len(got) == 1000 and all(g is got[0] for g in got)
    assert torch.equal(got[0], payload)
    assert allocations == [2**20]
    sender.rest()


def test_a_reply_repeating_one_tensor_1000_times_is_sent_once_and_fits_its_budget():
    t = torch.randn(2**16)  # 256 KiB
    header, tensors = wire.split({"outputs": [t] * 1000})
    assert len(tensors) == 1
    a, b = multiprocessing.Pipe()
    sent = threading.Thread(target=wire.send_parts, args=(a, header, tensors), daemon=True)
    sent.start()
    got = wire.recv(b, max_bytes=t.numel() * 4)  # the budget of one copy
    sent.join(5)
    assert len(got["outputs"]) == 1000 and torch.equal(got["outputs"][999], t)
    a.close()
    b.close()


def test_truncated_tensor_frame_is_an_os_error():
    sender = RawSender(header_frame({"__tensor__": 0}, [spec()]) + struct.pack("!i", 8) + b"\0" * 3)
    with pytest.raises(OSError):
        wire.recv(sender.b)
    sender.rest()


def test_sender_stalling_part_way_is_a_timeout_not_a_hang():
    a, b = multiprocessing.Pipe()
    os.write(a.fileno(), header_frame({"__tensor__": 0}, [spec(shape=[2**18], nbytes=2**20)])
             + struct.pack("!i", 2**20) + b"\0" * 1000)  # then nothing more, and the channel stays open
    with pytest.raises(wire.WireTimeout):
        wire.recv(b, deadline=time.monotonic() + 0.3)
    a.close()
    b.close()


def test_send_to_a_receiver_that_stopped_reading_times_out():
    """A worker that stops reading (SIGSTOP, a starved reader) cannot hang the parent's send past its deadline."""
    a, b = multiprocessing.Pipe()
    outcome: list[Any] = []

    def sending() -> None:
        try:
            wire.send(a, {"t": torch.zeros(16 * 2**20)}, deadline=time.monotonic() + 0.3)  # 64 MiB, never read
            outcome.append("sent")
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=sending, daemon=True)
    thread.start()
    thread.join(10)
    stuck = thread.is_alive()
    b.close()  # unblocks a sender stuck in a blocking write
    thread.join(5)
    assert not stuck, "send blocked past its deadline"
    assert len(outcome) == 1 and isinstance(outcome[0], wire.WireTimeout), outcome
    assert os.get_blocking(a.fileno())  # the descriptor is blocking again
    a.close()


def test_send_with_a_deadline_round_trips_large_and_wide_frames():
    a, b = multiprocessing.Pipe()
    big = torch.arange(3 * 2**20, dtype=torch.float32)  # 12 MiB: many partial writes
    msg = {"big": big, "again": big, "small": torch.tensor([1, 2], dtype=torch.int8), "n": 5}
    thread = threading.Thread(target=wire.send, args=(a, msg, time.monotonic() + 30), daemon=True)
    thread.start()
    got = wire.recv(b, max_bytes=big.numel() * 4 + 2)
    thread.join(5)
    assert torch.equal(got["big"], big) and got["again"] is got["big"] and got["n"] == 5
    assert torch.equal(got["small"], msg["small"])
    a.close()
    b.close()


def test_spin_returns_as_soon_as_a_message_is_there_and_gives_up_after_its_time(pipe):
    """Issue 13: ``spin`` polls without sleeping: True once a message waits (the message itself still unread), False
    after its time with none, at once for no time at all."""
    a, b = pipe
    t0 = time.perf_counter()
    assert wire.spin(a, 0.0) is False and time.perf_counter() - t0 < 0.005
    t0 = time.perf_counter()
    assert wire.spin(a, 0.02) is False and time.perf_counter() - t0 >= 0.02
    threading.Timer(0.005, lambda: wire.send(b, {"x": 1})).start()
    t0 = time.perf_counter()
    assert wire.spin(a, 5.0) is True and time.perf_counter() - t0 < 1.0
    assert wire.recv(a, 0) == {"x": 1}
