"""kbv.records: the kbv.result/1 JSON line, the append-only writer and the tolerant reader."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any


from kbv.protocol import SCHEMA
from kbv.records import Record, RecordWriter, read_records, recorded_keys

CONTRACT_FIELDS = ("problem", "level", "candidate", "candidate_sha256", "sample", "verdict", "standard_verdict",
                   "flags", "error", "correctness", "timing_ms", "speedup", "memory_bytes", "seeds", "env")


def make_record(**overrides: Any) -> Record:
    fields: dict[str, Any] = dict(
        problem="level1/5_ReLU", level=1, problem_id=5, problem_sha256="a" * 64, candidate="/c/cand.py",
        candidate_sha256="b" * 64, sample=0, verdict="correct", standard_verdict="correct",
    )
    fields.update(overrides)
    return Record(**fields)


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


# ---------------------------------------------------------------------------------------------------------------
# Record.to_json


def test_schema_constant():
    assert SCHEMA == "kbv.result/1"


def test_to_json_starts_with_schema_and_has_the_contract_fields():
    rec = make_record(flags=["unmatched_params"], error={"stage": "compile", "message": "boom"},
                      correctness={"distributions": {"D1": {"status": "passed"}}},
                      timing_ms={"candidate_verified": {"median": 1.5}}, speedup={"verified": {"value": 2.0}},
                      memory_bytes={"candidate_peak": 10, "reference_peak": 20}, seeds={"init": 123},
                      env={"device_kind": "cpu"})
    line = rec.to_json()
    assert "\n" not in line
    data = json.loads(line)
    assert next(iter(data)) == "schema"
    assert line.startswith('{"schema": "kbv.result/1"')
    assert data["schema"] == "kbv.result/1"
    missing = [f for f in CONTRACT_FIELDS if f not in data]
    assert missing == []
    assert list(data).count("schema") == 1
    assert data["problem"] == "level1/5_ReLU"
    assert data["level"] == 1
    assert data["candidate"] == "/c/cand.py"
    assert data["candidate_sha256"] == "b" * 64
    assert data["sample"] == 0
    assert data["verdict"] == data["standard_verdict"] == "correct"
    assert data["flags"] == ["unmatched_params"]
    assert data["error"] == {"stage": "compile", "message": "boom"}
    assert data["speedup"] == {"verified": {"value": 2.0}}
    assert data["memory_bytes"] == {"candidate_peak": 10, "reference_peak": 20}
    assert data["seeds"] == {"init": 123}
    assert data["env"] == {"device_kind": "cpu"}


def test_to_json_defaults_are_empty_containers_and_null_error():
    data = json.loads(make_record(level=None).to_json())
    assert data["level"] is None
    assert data["error"] is None
    for f in ("correctness", "timing_ms", "speedup", "memory_bytes", "seeds", "env"):
        assert data[f] == {}, f
    assert data["flags"] == []


def test_non_finite_floats_are_strings_and_the_line_is_strict_json():
    rec = make_record(
        correctness={"distributions": {"D2": {"max_abs_error": float("inf"), "error_ratio": float("nan")}}},
        timing_ms={"x": [1.0, float("-inf"), (float("nan"), 2.0)]},
        speedup={"verified": {"value": float("inf"), "ci_low": 1.0}},
    )
    line = rec.to_json()
    for token in ("NaN", "Infinity"):
        assert token not in line

    def reject(const: str) -> Any:
        raise ValueError(f"non-standard JSON constant {const}")

    data = json.loads(line, parse_constant=reject)  # strict: NaN/Infinity would raise
    d2 = data["correctness"]["distributions"]["D2"]
    assert d2["max_abs_error"] == "inf"
    assert d2["error_ratio"] == "nan"
    assert data["timing_ms"]["x"] == [1.0, "-inf", ["nan", 2.0]]
    assert data["speedup"]["verified"] == {"value": "inf", "ci_low": 1.0}
    # the record object itself is untouched
    assert rec.speedup["verified"]["value"] == float("inf")


def test_finite_floats_are_kept_as_numbers():
    data = json.loads(make_record(speedup={"standard": {"value": 1e-300, "ci_low": -0.0}}).to_json())
    assert data["speedup"]["standard"]["value"] == 1e-300
    assert isinstance(data["speedup"]["standard"]["ci_low"], float)


# ---------------------------------------------------------------------------------------------------------------
# RecordWriter


def test_writer_creates_parent_folders_and_appends(tmp_path):
    out = tmp_path / "deep" / "er" / "results.jsonl"
    writer = RecordWriter(out)
    writer.append(make_record(sample=0))
    writer.append(make_record(sample=1))
    lines = out.read_text().splitlines()
    assert len(lines) == 2
    assert [json.loads(line)["sample"] for line in lines] == [0, 1]
    assert out.read_text().endswith("\n")


def test_writer_appends_to_an_existing_file(tmp_path):
    out = tmp_path / "r.jsonl"
    RecordWriter(out).append(make_record(sample=0))
    RecordWriter(out).append(make_record(sample=1))  # a second writer (a resumed run) keeps what is there
    assert [r["sample"] for r in read_records(out)] == [0, 1]


def test_concurrent_appends_give_exactly_n_complete_lines(tmp_path):
    out = tmp_path / "r.jsonl"
    writers = [RecordWriter(out), RecordWriter(out)]  # two writer objects on one file, as well as many threads
    threads_n, per_thread = 8, 25
    big = {"blob": "x" * 20000}  # lines far larger than a pipe buffer: a torn write would show
    barrier = threading.Barrier(threads_n)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                writers[t % 2].append(make_record(candidate=f"t{t}", sample=i, env=big))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    raw = out.read_text()
    assert raw.endswith("\n")
    lines = raw.split("\n")[:-1]
    assert len(lines) == threads_n * per_thread
    seen = set()
    for line in lines:
        data = json.loads(line)  # every line complete
        assert data["env"] == big
        seen.add((data["candidate"], data["sample"]))
    assert seen == {(f"t{t}", i) for t in range(threads_n) for i in range(per_thread)}
    assert len(list(read_records(out))) == threads_n * per_thread


# ---------------------------------------------------------------------------------------------------------------
# read_records


def test_read_records_of_a_missing_file_is_empty(tmp_path):
    assert list(read_records(tmp_path / "nope.jsonl")) == []
    assert recorded_keys(tmp_path / "nope.jsonl") == set()


def test_read_records_skips_truncated_last_line(tmp_path):
    out = tmp_path / "r.jsonl"
    full = [make_record(sample=i).to_json() for i in range(3)]
    truncated = make_record(sample=3).to_json()[:57]
    out.write_text("\n".join(full) + "\n" + truncated)  # killed mid-write: no final newline
    got = list(read_records(out))
    assert [r["sample"] for r in got] == [0, 1, 2]


def test_read_records_skips_other_schemas_and_junk(tmp_path):
    out = tmp_path / "r.jsonl"
    write_lines(out, [
        make_record(sample=0).to_json(),
        json.dumps({"schema": "other.thing/1", "problem": "p", "candidate_sha256": "c", "sample": 9}),
        json.dumps({"problem": "no schema", "candidate_sha256": "c", "sample": 8}),
        json.dumps(["a", "list"]),
        "42",
        "",
        "   ",
        "not json at all",
        make_record(sample=1, problem="level2/1_X").to_json(),
        json.dumps({"schema": "kbv.result/2", "problem": "future", "candidate_sha256": "f", "sample": 0}),
    ])
    got = list(read_records(out))
    assert [(r["problem"], r["sample"]) for r in got] == [
        ("level1/5_ReLU", 0), ("level2/1_X", 1), ("future", 0)]
    assert all(r["schema"].startswith("kbv.result/") for r in got)


def test_read_records_round_trips_to_json(tmp_path):
    out = tmp_path / "r.jsonl"
    rec = make_record(flags=["a", "b"], speedup={"verified": {"value": 1.25}}, level=3)
    RecordWriter(out).append(rec)
    (got,) = list(read_records(out))
    auth = got.pop("auth")  # the writer adds the record's MAC (kbv.attest; tests/test_attest.py)
    assert got == json.loads(rec.to_json())
    assert set(auth) == {"seq", "prev", "mac", "key_id"} and auth["seq"] == 0


# ---------------------------------------------------------------------------------------------------------------
# recorded_keys


def test_recorded_keys_are_problem_hash_sample(tmp_path):
    out = tmp_path / "r.jsonl"
    writer = RecordWriter(out)
    writer.append(make_record(problem="level1/5_ReLU", candidate_sha256="h1", sample=0))
    writer.append(make_record(problem="level1/5_ReLU", candidate_sha256="h1", sample=3))
    writer.append(make_record(problem="level2/1_Gemm", candidate_sha256="h2", sample=0, verdict="compile_error"))
    writer.append(make_record(problem="level1/5_ReLU", candidate_sha256="h1", sample=0))  # duplicate
    with out.open("a") as f:
        f.write(json.dumps({"schema": "other/1", "problem": "x", "candidate_sha256": "y", "sample": 0}) + "\n")
        f.write(make_record(problem="level9/9_Cut", candidate_sha256="h9").to_json()[:60])  # truncated last line
    keys = recorded_keys(out)
    assert keys == {("level1/5_ReLU", "h1", 0), ("level1/5_ReLU", "h1", 3), ("level2/1_Gemm", "h2", 0)}
    assert all(isinstance(k[2], int) for k in keys)


def test_recorded_keys_normalise_sample_to_int(tmp_path):
    out = tmp_path / "r.jsonl"
    write_lines(out, [json.dumps({"schema": SCHEMA, "problem": "p", "candidate_sha256": "c", "sample": "2"})])
    assert recorded_keys(out) == {("p", "c", 2)}


def test_append_after_a_truncated_last_line_is_readable(tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_text(make_record(sample=0).to_json() + "\n" + make_record(sample=1).to_json()[:40])
    RecordWriter(out).append(make_record(sample=2))
    assert [r["sample"] for r in read_records(out)] == [0, 2]
