"""The versioned result record (``kbv.result/1``), one JSON line per (problem, candidate sample).

Records are plain data: reports read them and never re-run anything. The parent is the only writer; each record is
appended with a single ``write`` on a file opened with ``O_APPEND`` under an exclusive ``flock``, so a killed run
loses nothing already written; a reader skips a truncated last line, and the next append starts on a new line.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import math
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from kbv import attest
from kbv.protocol import SCHEMA


@dataclass
class Record:
    problem: str
    level: int | None
    problem_id: int
    problem_sha256: str
    candidate: str
    candidate_sha256: str
    sample: int
    verdict: str
    standard_verdict: str
    flags: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    stage: str = ""  # the last stage reached: compile, correctness, performance, done
    correctness: dict[str, Any] = field(default_factory=dict)
    timing_ms: dict[str, Any] = field(default_factory=dict)
    speedup: dict[str, Any] = field(default_factory=dict)
    memory_bytes: dict[str, Any] = field(default_factory=dict)
    seeds: dict[str, Any] = field(default_factory=dict)
    shapes: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    wall_seconds: dict[str, float] = field(default_factory=dict)
    integrity: dict[str, Any] = field(default_factory=dict)  # tamper, and what the parent's clock and /proc saw
    roofline: dict[str, Any] | None = None  # bound, ceilings and attainment (kbv.roofline)
    fallback: dict[str, Any] | None = None  # library share of the forward's work (kbv.fallback)
    shape_results: list[dict[str, Any]] | None = None  # multi-shape problems: one summary per shape (kbv.eval.shapes)
    schema: str = SCHEMA
    auth: dict[str, Any] | None = None  # seq, prev, mac, key_id (kbv.attest); set by RecordWriter, never by hand

    def to_json(self) -> str:
        data = {"schema": self.schema, **{k: v for k, v in asdict(self).items() if k != "schema"}}
        if data.get("auth") is None:
            del data["auth"]  # written by RecordWriter only
        return json.dumps(_finite(data), sort_keys=False)


def _finite(x: Any) -> Any:
    """JSON has no inf/NaN: they are written as strings ("inf", "-inf", "nan")."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


class RecordWriter:
    """Appends records to a JSONL file, one ``os.write`` per record. Each record but an imported one gets its
    ``auth`` field (kbv.attest): a MAC chained to the file's previous record, under the evaluator's key."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def append(self, record: Any) -> None:
        data = json.loads(record.to_json())
        data.pop("auth", None)  # a record read back and written again is signed afresh (or, imported, not at all)
        key = None if attest.imported(data) else attest.load_key()  # created on first use
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # writers in other objects or processes wait their turn
                if key is not None:
                    data = attest.authenticate(data, fd, key, self.path)  # reads only the file's tail
                line = (json.dumps(data) + "\n").encode()
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # a killed writer left a partial line: never glue a record onto it
                os.write(fd, line)
                os.fsync(fd)
                if key is not None:
                    attest.note_head(self.path, data["auth"])
            finally:
                os.close(fd)


def read_records(path: str | Path, warn: Callable[[str], None] | None = None) -> Iterator[dict[str, Any]]:
    """Every complete record in a results file, gzipped where its name ends in ``.gz`` (lines of other schemas or a
    truncated last line are skipped; ``warn`` gets one line per skipped line, naming the file, the line number and
    why)."""
    path = Path(path)
    if not path.exists():
        return
    with (gzip.open(path, "rt", errors="replace") if path.suffix == ".gz" else path.open(errors="replace")) as f:
        for number, line in enumerate(f, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                if warn:
                    warn(f"{path}:{number}: skipped: not a JSON line ({exc.msg}; a torn or foreign line)")
                continue
            if isinstance(data, dict) and str(data.get("schema", "")).startswith("kbv.result/"):
                yield data
            elif warn:
                warn(f"{path}:{number}: skipped: not a kbv record (no kbv.result/ schema)")


def recorded_keys(path: str | Path) -> set[tuple[str, str, int]]:
    """The (problem, candidate_sha256, sample) keys already in a results file, for --resume."""
    return {(r["problem"], r["candidate_sha256"], int(r["sample"])) for r in read_records(path)}
