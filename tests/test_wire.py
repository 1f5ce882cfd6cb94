"""kbv.wire: tensors and JSON data over a real multiprocessing connection, and refusal of malformed messages."""

from __future__ import annotations

import json
import math
import multiprocessing
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


def test_the_same_tensor_twice_arrives_as_two_independent_copies(pipe):
    t = torch.tensor([1.0, 2.0, 3.0])
    got = roundtrip(pipe, [t, t])
    assert torch.equal(got[0], t) and torch.equal(got[1], t)
    got[0].add_(1)
    assert torch.equal(got[1], t)


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
