"""kbv.attest: every record RecordWriter writes carries a MAC chained to the one before it; kbv verify finds
edited, forged, inserted, deleted and reordered lines, and shows imported records as unauthenticated."""

from __future__ import annotations

import hashlib
import hmac
import json
import multiprocessing
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kbv import attest
from kbv.records import Record, RecordWriter, read_records
from kbv.report.text import failure_note
from kbv.verify_cmd import verified_records, verify_cmd


@pytest.fixture
def key_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "keydir" / "record.key"
    monkeypatch.setenv(attest.KEY_ENV, str(path))
    return path


def make_record(sample: int, **overrides: Any) -> Record:
    fields: dict[str, Any] = dict(
        problem="level1/5_ReLU", level=1, problem_id=5, problem_sha256="a" * 64, candidate="/c/cand.py",
        candidate_sha256="b" * 64, sample=sample, verdict="incorrect", standard_verdict="incorrect",
        speedup={"verified": {"value": 0.5 + sample}}, flags=["x"],
    )
    fields.update(overrides)
    return Record(**fields)


def honest_file(path: Path, n: int = 6, candidate: str = "/c/cand.py") -> list[str]:
    writer = RecordWriter(path)
    for i in range(n):
        writer.append(make_record(i, candidate=candidate))
    return path.read_text().splitlines()


def write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


def kinds(path: Path) -> dict[int, str]:
    return {f.line: f.kind for f in attest.verify_file(path).findings}


# ---------------------------------------------------------------------------------------------------------------
# Honest files


def test_honest_file_verifies(tmp_path, key_file):
    out = tmp_path / "r.jsonl"
    lines = honest_file(out)
    result = attest.verify_file(out)
    assert (result.records, result.verified, result.findings) == (6, 6, [])
    auths = [json.loads(line)["auth"] for line in lines]
    assert [a["seq"] for a in auths] == list(range(6))
    assert auths[0]["prev"] == attest.GENESIS
    assert all(b["prev"] == a["mac"] for a, b in zip(auths, auths[1:]))
    assert all(a["key_id"] == attest.key_id(key_file.read_bytes()) for a in auths)
    assert [r["sample"] for r in read_records(out)] == list(range(6))  # readers see the records as before


def test_key_is_created_private_on_first_use(tmp_path, key_file):
    assert not key_file.exists()
    honest_file(tmp_path / "r.jsonl", 1)
    assert len(key_file.read_bytes()) == attest.KEY_BYTES
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    assert attest.key_path() == key_file


def test_a_key_readable_by_others_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "k" / "record.key"
    path.parent.mkdir(mode=0o700)
    path.write_bytes(os.urandom(32))
    path.chmod(0o644)
    with pytest.raises(attest.AttestError, match="0600"):
        attest.load_key(path)


def test_default_key_path_is_under_the_users_config(monkeypatch):
    monkeypatch.delenv(attest.KEY_ENV, raising=False)
    assert attest.key_path() == Path.home() / ".config" / "kbv" / "record.key"


def test_the_chain_survives_a_killed_writers_partial_line(tmp_path, key_file):
    out = tmp_path / "r.jsonl"
    honest_file(out, 2)
    with out.open("a") as f:
        f.write(make_record(9).to_json()[:50])  # killed mid-write
    RecordWriter(out).append(make_record(2))
    result = attest.verify_file(out)
    assert result.verified == 3 and result.failures == []
    assert [f.kind for f in result.findings] == ["malformed"]


def _append_many(path: str, start: int) -> None:
    writer = RecordWriter(path)
    for i in range(start, start + 15):
        writer.append(make_record(i))


def test_concurrent_writers_keep_one_chain(tmp_path, key_file):
    out = tmp_path / "r.jsonl"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(str(out), s)) for s in (0, 100)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    result = attest.verify_file(out)
    assert (result.records, result.verified, result.findings) == (30, 30, [])


def test_append_reads_only_the_files_tail(tmp_path, key_file, monkeypatch):
    out = tmp_path / "r.jsonl"
    with out.open("w") as f:
        f.write("x" * (16 * 2**20) + "\n")  # a big first line: reading it would cost 16 MiB
    honest_file(out, 2)
    read = []
    real_pread, real_read = os.pread, os.read

    def pread(fd, n, offset):
        read.append(n)
        return real_pread(fd, n, offset)

    def read_(fd, n):
        read.append(n)
        return real_read(fd, n)

    with monkeypatch.context() as m:
        m.setattr(os, "pread", pread)
        m.setattr(os, "read", read_)
        RecordWriter(out).append(make_record(2))
    assert sum(read) < 2**20, sum(read)
    assert attest.verify_file(out).verified == 3


# ---------------------------------------------------------------------------------------------------------------
# Tampering: each kind is found, on its line


def test_edited_record_is_found(tmp_path, key_file):
    out = tmp_path / "r.jsonl"
    lines = honest_file(out)
    data = json.loads(lines[2])
    data["verdict"] = "correct"  # the attack: all-zeros ReLU recorded correct at 42x
    data["speedup"]["verified"]["value"] = 42.0
    lines[2] = json.dumps(data)
    write(out, lines)
    assert kinds(out) == {3: "edited"}


def test_edit_that_keeps_the_parsed_content_is_not_a_failure(tmp_path, key_file):
    """The MAC covers the content, not the spelling: re-serialising a record with other whitespace verifies."""
    out = tmp_path / "r.jsonl"
    lines = honest_file(out, 2)
    lines[1] = json.dumps(json.loads(lines[1]), indent=None, separators=(" ,", " : "))
    write(out, lines)
    assert kinds(out) == {}


def test_forgery_without_the_key_fails(tmp_path, key_file):
    """What a worker could write without the key: a record in the right place of the chain, with key_id copied
    from the file, MAC'd under a key of its own."""
    out = tmp_path / "r.jsonl"
    lines = honest_file(out, 3)
    last = json.loads(lines[-1])["auth"]
    forged = json.loads(make_record(3, verdict="correct", standard_verdict="correct").to_json())
    guess = os.urandom(32)
    tag = hmac.new(guess, b"kbv.record-mac/1\n" + f"3\n{last['mac']}\n".encode() + attest.canonical(forged),
                   hashlib.sha256).hexdigest()
    forged["auth"] = {"seq": 3, "prev": last["mac"], "mac": tag, "key_id": last["key_id"]}
    write(out, lines + [json.dumps(forged)])
    assert kinds(out) == {4: "forged"}
    # a forged record inserted mid-file, with the auth of a genuine one copied onto it
    copied = dict(forged, auth=json.loads(lines[1])["auth"])
    write(out, lines[:2] + [json.dumps(copied)] + lines[2:])
    assert kinds(out) == {3: "forged"}


def test_record_signed_with_another_key_is_found(tmp_path, key_file, monkeypatch):
    out, other = tmp_path / "r.jsonl", tmp_path / "other.jsonl"
    lines = honest_file(out, 2)
    monkeypatch.setenv(attest.KEY_ENV, str(tmp_path / "k2" / "record.key"))
    foreign = honest_file(other, 3)[2]
    monkeypatch.setenv(attest.KEY_ENV, str(key_file))
    write(out, lines + [foreign])
    assert kinds(out) == {3: "foreign_key"}


def test_inserted_copy_of_a_line_is_found(tmp_path, key_file):
    out = tmp_path / "r.jsonl"
    lines = honest_file(out)
    write(out, lines[:2] + [lines[4]] + lines[2:])  # a good record (seq 4) repeated earlier
    found = attest.verify_file(out)
    assert {f.line: f.kind for f in found.findings} == {3: "inserted"}
    assert "copy of line 6" in found.findings[0].message
    write(out, lines + [lines[1]])  # and at the end
    assert kinds(out) == {7: "inserted"}


def test_record_from_another_results_file_is_found(tmp_path, key_file):
    out, other = tmp_path / "r.jsonl", tmp_path / "other.jsonl"
    lines = honest_file(out)
    theirs = honest_file(other, 4, candidate="/c/other.py")
    write(out, lines[:3] + [theirs[3]] + lines[3:])  # same key, another chain
    assert kinds(out) == {4: "inserted"}


@pytest.mark.parametrize("drop, line", [(2, 3), (0, 1), ((2, 3), 3)], ids=["middle", "first", "two"])
def test_deleted_record_is_found(tmp_path, key_file, drop, line):
    out = tmp_path / "r.jsonl"
    lines = honest_file(out)
    gone = {drop} if isinstance(drop, int) else set(drop)
    write(out, [x for i, x in enumerate(lines) if i not in gone])
    result = attest.verify_file(out)
    assert {f.line: f.kind for f in result.findings} == {line: "deleted"}
    assert f"{len(gone)} record(s)" in result.findings[0].message
    assert result.verified == 6 - len(gone)


def test_renumbering_to_hide_a_deletion_or_a_reorder_fails(tmp_path, key_file):
    """The MAC covers seq and prev: closing a gap (or re-chaining moved records) by rewriting them is found."""
    out = tmp_path / "r.jsonl"
    lines = honest_file(out)
    kept = [json.loads(x) for i, x in enumerate(lines) if i != 2]
    prev = attest.GENESIS
    for seq, data in enumerate(kept):
        data["auth"].update(seq=seq, prev=prev)
        prev = data["auth"]["mac"]
    write(out, [json.dumps(d) for d in kept])
    found = kinds(out)
    assert {3, 4, 5} <= set(found) and {found[3], found[4], found[5]} <= {"edited", "forged"}, found
    assert 1 not in found and 2 not in found  # lines before the cut still verify
    reordered = [json.loads(lines[i]) for i in (0, 2, 1, 3)]
    for seq, data in enumerate(reordered):
        data["auth"]["seq"] = seq
    write(out, [json.dumps(d) for d in reordered])
    found = kinds(out)
    assert {found.get(2), found.get(3)} <= {"edited", "forged"} and 1 not in found, found


def test_deleted_tail_is_found_from_the_writers_head(tmp_path, key_file):
    out = tmp_path / "r.jsonl"
    lines = honest_file(out)
    write(out, lines[:4])
    assert kinds(out) == {0: "deleted"}
    # and appending after the cut continues from the head, so the gap stays visible
    RecordWriter(out).append(make_record(7))
    result = attest.verify_file(out)
    assert {f.line: f.kind for f in result.findings} == {5: "deleted"}
    assert "2 record(s) (seq 4..5)" in result.findings[0].message


def test_reordered_records_are_found(tmp_path, key_file):
    out = tmp_path / "r.jsonl"
    lines = honest_file(out)
    swapped = lines[:1] + [lines[3], lines[1], lines[2]] + lines[4:]  # seq 3 moved before seq 1
    write(out, swapped)
    assert kinds(out) == {2: "reordered"}


def test_imported_and_stripped_records_are_unauthenticated(tmp_path, key_file):
    out = tmp_path / "r.jsonl"
    RecordWriter(out).append(make_record(0))
    RecordWriter(out).append(make_record(1, flags=["imported_kernelbench"], env={"source": "kernelbench"}))
    RecordWriter(out).append(make_record(2))
    lines = out.read_text().splitlines()
    assert "auth" not in json.loads(lines[1])  # the writer does not sign what it did not evaluate
    stripped = json.loads(lines[2])
    del stripped["auth"]
    write(out, lines + [json.dumps(stripped)])
    result = attest.verify_file(out)
    assert {f.line: f.kind for f in result.findings} == {2: "imported", 4: "unauthenticated"}
    assert result.failures == [] and result.verified == 2


# ---------------------------------------------------------------------------------------------------------------
# kbv verify and the report's reader


def test_verify_command_exit_codes(tmp_path, key_file, monkeypatch):
    out = tmp_path / "r.jsonl"
    lines = honest_file(out, 3)
    runner = CliRunner()
    ok = runner.invoke(verify_cmd, [str(out)])
    assert ok.exit_code == 0, ok.output
    assert "3 records, 3 verified, 0 failed, 0 unauthenticated" in ok.output

    data = json.loads(lines[1])
    data["verdict"] = "correct"
    write(out, [lines[0], json.dumps(data), lines[2]])
    bad = runner.invoke(verify_cmd, [str(out)])
    assert bad.exit_code == 1
    assert f"{out}:2: edited" in bad.output

    imported = tmp_path / "kb.jsonl"
    RecordWriter(imported).append(make_record(0, env={"source": "kernelbench"}))
    assert runner.invoke(verify_cmd, [str(imported)]).exit_code == 1
    assert runner.invoke(verify_cmd, [str(imported), "--allow-unauthenticated"]).exit_code == 0

    monkeypatch.setenv(attest.KEY_ENV, str(tmp_path / "nowhere" / "record.key"))
    missing = runner.invoke(verify_cmd, [str(out)])
    assert missing.exit_code == 2 and "Error: no record key" in missing.output
    assert not (tmp_path / "nowhere").exists()  # verify never creates a key
    assert runner.invoke(verify_cmd, [str(tmp_path / "absent.jsonl")]).exit_code == 2
    assert runner.invoke(verify_cmd, [str(out), "--key-file", str(key_file)]).exit_code == 1
    monkeypatch.delenv(attest.KEY_ENV)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    nothing = runner.invoke(verify_cmd, [str(empty), "--key-file", str(key_file)])
    assert nothing.exit_code == 2 and "holds no records" in nothing.output  # never "0 records", exit 0


def test_report_reader_warns_on_each_failing_record_and_marks_imported(tmp_path, key_file):
    out = tmp_path / "r.jsonl"
    lines = honest_file(out, 4)
    data = json.loads(lines[0])
    data["verdict"] = "correct"
    write(out, [json.dumps(data), lines[1], lines[3]])  # line 1 edited, seq 2 deleted
    RecordWriter(out).append(make_record(5, env={"source": "kernelbench"}))
    warnings: list[str] = []
    bare = json.loads(lines[2])
    del bare["auth"]
    with out.open("a") as f:
        f.write(json.dumps(bare) + "\n")
    records = list(verified_records(out, warnings.append))
    assert [r["authenticated"] for r in records] == ["edited", "verified", "verified", "unauthenticated",
                                                     "unauthenticated"]
    # one line per failure, and for the bare record among signed ones; the imported one is only marked
    assert [w.split(": ")[1:3] for w in warnings] == [[f"{out}:1", "edited"], [f"{out}:3", "deleted"],
                                                      [f"{out}:5", "unauthenticated"]]
    assert "unauthenticated" in failure_note(records[3]) and failure_note(records[1]) == ""


def test_report_leaves_records_that_fail_verification_out_of_its_figures(tmp_path, key_file):
    """A record edited after kbv wrote it (an incorrect kernel made ``correct``) counts in no figure of ``kbv
    report``, which names how many it left out and how to count them (``--include-failing``: then it counts)."""
    from kbv.cli import main

    out = tmp_path / "r.jsonl"
    lines = honest_file(out, 4)
    data = json.loads(lines[1])
    data["verdict"] = data["standard_verdict"] = "correct"
    write(out, [lines[0], json.dumps(data), lines[2], lines[3]])
    runner = CliRunner()
    for extra, counted in (([], 3), (["--include-failing"], 4)):
        result = runner.invoke(main, ["report", str(out), "--format", "json", *extra])
        assert result.exit_code == 0, result.output
        rows = json.loads(result.stdout)["candidates"]
        assert len(rows) == counted and sum(r["verdict"] == "correct" for r in rows) == counted - 3, rows
        assert ("1 record(s) left out of the figures" in result.stderr) is (counted == 3), result.stderr


def test_report_reader_is_silent_on_files_of_unauthenticated_records(tmp_path, key_file):
    out = tmp_path / "kb.jsonl"
    write(out, [make_record(i).to_json() for i in range(3)])  # e.g. written by another tool, no auth anywhere
    warnings: list[str] = []
    assert [r["authenticated"] for r in verified_records(out, warnings.append)] == ["unauthenticated"] * 3
    assert warnings == []


def test_report_reader_without_a_key_warns_once_and_still_reads(tmp_path, key_file, monkeypatch):
    out = tmp_path / "r.jsonl"
    honest_file(out, 2)
    monkeypatch.setenv(attest.KEY_ENV, str(tmp_path / "nowhere" / "record.key"))
    warnings: list[str] = []
    records = list(verified_records(out, warnings.append))
    assert len(records) == 2 and {r["authenticated"] for r in records} == {"unverified"}
    assert len(warnings) == 1 and "no record key" in warnings[0]
