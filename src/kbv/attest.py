"""Authenticated result records: the key, canonical bytes, the MAC chain and its verification.

Every record :class:`kbv.records.RecordWriter` writes carries ``auth = {"seq", "prev", "mac", "key_id"}``:
``mac`` is HMAC-SHA256, under a key only the evaluating user can read, over the record's canonical content (the
record without ``auth``, as sorted, compact, ASCII JSON), its sequence number ``seq`` in the file and ``prev``,
the previous authenticated record's MAC (``GENESIS`` for the first). So a record changed after it was written
(edited), one written without the key (forged), one added from elsewhere (inserted), one removed (deleted, found
from the gap in ``seq``) and records moved (reordered) are each found by :func:`verify_file`. A removed tail is
found when the writer's head file (next to the key, see :func:`head_path`) still names the file.

Records converted from KernelBench (and any other import) carry no ``auth``: they are reported as unauthenticated.
The key is 32 random bytes created on first use at :func:`key_path` (``~/.config/kbv/record.key`` or
``$KBV_RECORD_KEY_FILE``), in a folder of mode 0700, as a file of mode 0600. Workers must not be able to read it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from kbv.files import write_atomic

KEY_ENV = "KBV_RECORD_KEY_FILE"
KEY_BYTES = 32
GENESIS = "0" * 64  # ``prev`` of a file's first authenticated record
IMPORTED_SOURCES = frozenset({"kernelbench", "atrex"})  # env.source of records converted from another harness
_DOMAIN = b"kbv.record-mac/1\n"
_TAIL_CHUNK = 64 * 1024
_KEYS: dict[str, bytes] = {}


class AttestError(Exception):
    """The key cannot be created or read safely (a message for the user)."""


# -- the key -------------------------------------------------------------------------------------------------------


def key_path() -> Path:
    """Where the record key lives: ``$KBV_RECORD_KEY_FILE`` or ``~/.config/kbv/record.key``. The sandbox hides
    this path (and its folder) from workers."""
    override = os.environ.get(KEY_ENV)
    return Path(override).expanduser() if override else Path.home() / ".config" / "kbv" / "record.key"


def _private_folder(folder: Path) -> None:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.stat()
    if info.st_mode & 0o077:
        if info.st_uid != os.geteuid():
            raise AttestError(f"the key folder {folder} is readable by others and not ours to tighten")
        folder.chmod(0o700)


def load_key(path: Path | None = None, *, create: bool = True) -> bytes:
    """The record key at ``path`` (default :func:`key_path`), created (32 random bytes, mode 0600, in a mode-0700
    folder) when missing and ``create`` is true."""
    path = key_path() if path is None else Path(path)
    cached = _KEYS.get(str(path))
    if cached is not None:
        return cached
    if not path.exists():
        if not create:
            raise AttestError(f"no record key at {path} (set {KEY_ENV} to the key the records were written with)")
        _private_folder(path.parent)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # atomic: a concurrent first use keeps whichever key was published first
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            info = os.fstat(fd)
            key = os.read(fd, KEY_BYTES + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise AttestError(f"cannot read the record key {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
        raise AttestError(f"the record key {path} must be a regular file readable only by its owner (mode 0600)")
    if len(key) != KEY_BYTES:
        raise AttestError(f"the record key {path} is not {KEY_BYTES} bytes")
    _KEYS[str(path)] = key
    return key


def key_id(key: bytes) -> str:
    """A short public name of a key (16 hex digits of a hash; reveals nothing of the key)."""
    return hashlib.sha256(b"kbv.record-key-id\n" + key).hexdigest()[:16]


def head_path(results: str | Path, key_file: Path | None = None) -> Path:
    """The writer's note of a results file's last record (seq and MAC), kept in the key's folder, so a removed
    tail is found too."""
    name = hashlib.sha256(str(Path(results).resolve()).encode()).hexdigest()[:32]
    return (key_path() if key_file is None else Path(key_file)).parent / "heads" / f"{name}.json"


# -- canonical bytes and the MAC -------------------------------------------------------------------------------------


def canonical(data: dict[str, Any]) -> bytes:
    """The bytes a MAC covers: the record without ``auth``, as sorted, compact, ASCII JSON (the same after a JSON
    round trip, so the reader recomputes exactly what the writer signed)."""
    body = {k: v for k, v in data.items() if k != "auth"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True).encode()


def mac(key: bytes, seq: int, prev: str, data: dict[str, Any]) -> str:
    message = _DOMAIN + f"{seq}\n{prev}\n".encode() + canonical(data)
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def sign(key: bytes, seq: int, prev: str, data: dict[str, Any]) -> dict[str, Any]:
    """The ``auth`` field of a record at position ``seq`` after a record whose MAC is ``prev``."""
    return {"seq": seq, "prev": prev, "mac": mac(key, seq, prev, data), "key_id": key_id(key)}


def imported(data: dict[str, Any]) -> bool:
    """A record converted from another harness (KernelBench, Atrex): it is written and shown unauthenticated."""
    env: dict[str, Any] = data["env"] if isinstance(data.get("env"), dict) else {}
    flags: list[Any] = data["flags"] if isinstance(data.get("flags"), list) else []
    return env.get("source") in IMPORTED_SOURCES or any(str(f).startswith("imported_") for f in flags)


def _auth_of(data: Any) -> dict[str, Any] | None:
    """A well-formed ``auth`` field, or None."""
    auth = data.get("auth") if isinstance(data, dict) else None
    if not isinstance(auth, dict):
        return None
    seq, prev, tag, kid = auth.get("seq"), auth.get("prev"), auth.get("mac"), auth.get("key_id")
    if type(seq) is not int or seq < 0 or not all(isinstance(x, str) for x in (prev, tag, kid)):
        return None
    if not (_is_hex(str(prev), 64) and _is_hex(str(tag), 64)):
        return None
    return auth


def _is_hex(s: str, n: int) -> bool:
    return len(s) == n and all(c in "0123456789abcdef" for c in s)


# -- the writer's side: where the chain stands --------------------------------------------------------------------


def _lines_backward(fd: int, size: int) -> Iterator[bytes]:
    """The file's lines from the last to the first, read in chunks from the end. The first one yielded is what
    follows the last newline (empty, or a partial line a killed writer left)."""
    pos, rest = size, b""
    while pos > 0:
        n = min(_TAIL_CHUNK, pos)
        pos -= n
        rest = os.pread(fd, n, pos) + rest
        parts = rest.split(b"\n")
        rest = parts[0]
        yield from reversed(parts[1:])
    yield rest


def chain_tail(fd: int) -> tuple[int, str]:
    """``(seq, prev)`` for the next record appended to the open file ``fd``: read backwards from its end to the
    last complete authenticated record (normally the last line), never the whole file."""
    lines = _lines_backward(fd, os.fstat(fd).st_size)
    next(lines, None)  # after the last newline: empty or partial, never a complete record
    for line in lines:
        if not line.strip():
            continue
        try:
            auth = _auth_of(json.loads(line))
        except ValueError:
            continue
        if auth is not None:
            return auth["seq"] + 1, auth["mac"]
    return 0, GENESIS


def authenticate(data: dict[str, Any], fd: int, key: bytes, results: str | Path,
                 key_file: Path | None = None) -> dict[str, Any]:
    """``data`` with its ``auth`` field, chained after the last record of the open results file ``fd`` (call
    under the file's lock, then :func:`note_head` once it is written). When the writer's head names a later record
    than the file now ends with, the chain continues from the head, so the removed records show as a gap."""
    seq, prev = chain_tail(fd)
    head = _read_head(Path(results), key_file)
    ahead = head is not None and head["seq"] + 1 > seq and (head["seq"] + 1, head["mac"]) != (seq, prev)
    if ahead and os.fstat(fd).st_size:  # an empty file starts afresh (a results file deleted on purpose)
        seq, prev = head["seq"] + 1, head["mac"]  # type: ignore[index]
    return {**data, "auth": sign(key, seq, prev, data)}


def note_head(results: str | Path, auth: dict[str, Any], key_file: Path | None = None) -> None:
    """Remember the file's newest record (best effort: without a head only a removed tail goes unseen)."""
    path = head_path(results, key_file)
    try:
        _private_folder(path.parent)
        write_atomic(path, json.dumps({"results": str(Path(results).resolve()), "seq": auth["seq"],
                                       "mac": auth["mac"]}))
    except (OSError, AttestError):
        pass


def _read_head(path: Path, key_file: Path | None) -> dict[str, Any] | None:
    try:
        head = json.loads(head_path(path, key_file).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(head, dict) or type(head.get("seq")) is not int or not _is_hex(str(head.get("mac")), 64):
        return None
    return head


# -- verification -------------------------------------------------------------------------------------------------


@dataclass
class Finding:
    line: int  # 1-based line number in the file (0: the file as a whole)
    kind: str  # edited, forged, inserted, deleted, reordered, unauthenticated, imported, foreign_key, malformed
    message: str

    @property
    def failed(self) -> bool:
        return self.kind not in ("unauthenticated", "imported", "malformed")


@dataclass
class Verification:
    path: str
    records: int = 0  # lines that are JSON objects
    verified: int = 0  # authenticated, intact and in place
    findings: list[Finding] = field(default_factory=list)

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.failed]

    @property
    def unauthenticated(self) -> list[Finding]:
        return [f for f in self.findings if f.kind in ("unauthenticated", "imported")]

    def status_of(self) -> dict[int, str]:
        """Line number -> kind, for the lines that did not verify (a gap, ``deleted``, is reported on the line
        after it, which itself may verify)."""
        return {f.line: f.kind for f in self.findings if f.line and f.kind != "deleted"}


@dataclass
class _Node:
    line: int
    seq: int
    prev: str
    mac: str
    valid: bool


def _longest_increasing(values: list[int]) -> set[int]:
    """Indices of one longest strictly increasing subsequence of ``values``."""
    import bisect

    tails: list[int] = []  # values
    tail_idx: list[int] = []
    parent = [-1] * len(values)
    for i, v in enumerate(values):
        j = bisect.bisect_left(tails, v)
        if j == len(tails):
            tails.append(v)
            tail_idx.append(i)
        else:
            tails[j] = v
            tail_idx[j] = i
        parent[i] = tail_idx[j - 1] if j else -1
    keep, i = set(), (tail_idx[-1] if tail_idx else -1)
    while i >= 0:
        keep.add(i)
        i = parent[i]
    return keep


def verify_file(path: str | Path, key: bytes | None = None, key_file: Path | None = None) -> Verification:
    """Check every line of a results file against the key (default :func:`load_key`, never created here)."""
    path = Path(path)
    result = Verification(str(path))
    nodes: list[_Node] = []
    parsed: list[tuple[int, dict[str, Any]]] = []
    with path.open("rb") as f:
        raw_lines = f.read().split(b"\n")
    trailing_partial = bool(raw_lines and raw_lines[-1].strip())
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            last = number == len(raw_lines) and trailing_partial
            result.findings.append(Finding(number, "malformed", "truncated last line (a killed writer); readers skip it"
                                           if last else "not a JSON record; readers skip it"))
            continue
        result.records += 1
        parsed.append((number, data))
    if any("auth" in d for _, d in parsed) and key is None:
        key = load_key(key_file, create=False)
    kid = key_id(key) if key is not None else None
    for number, data in parsed:
        if "auth" not in data:
            if imported(data):
                result.findings.append(Finding(number, "imported", "imported from another harness: unauthenticated"))
            else:
                result.findings.append(Finding(number, "unauthenticated", "no auth field: not written by kbv, or "
                                               "its auth was removed"))
            continue
        auth = _auth_of(data)
        if auth is None:
            result.findings.append(Finding(number, "forged", "malformed auth field"))
            continue
        if auth["key_id"] != kid:
            result.findings.append(Finding(number, "foreign_key", f"signed with key {auth['key_id']}, not this "
                                           f"key ({kid}): forged, or written with another key"))
            continue
        valid = hmac.compare_digest(mac(key, auth["seq"], auth["prev"], data), auth["mac"])  # type: ignore[arg-type]
        nodes.append(_Node(number, auth["seq"], auth["prev"], auth["mac"], valid))

    # The file's chain: from GENESIS, at each seq the record whose prev is the chain's last MAC (an intact one
    # first, then one after the chain's last line, then the earliest). An edited record keeps its place: its auth
    # fits there, its content does not.
    by_link: dict[tuple[int, str], list[_Node]] = {}
    by_seq: dict[int, list[_Node]] = {}
    for n in nodes:
        by_link.setdefault((n.seq, n.prev), []).append(n)
        by_seq.setdefault(n.seq, []).append(n)
    seqs = sorted(by_seq)
    used: set[int] = set()  # ids of nodes in the chain
    broken: set[int] = set()  # ids of chain nodes whose prev is not the MAC of the record before them
    chain: list[_Node] = []
    gaps: list[tuple[int, int, _Node | None, _Node]] = []  # (first missing seq, count, before, after)
    seq, prev, cursor = 0, GENESIS, 0
    while True:
        fits = [n for n in by_link.get((seq, prev), ()) if id(n) not in used]
        if not fits:  # a gap: continue at the lowest seq still to place (seq only grows, so a cursor suffices)
            while cursor < len(seqs) and (seqs[cursor] < seq or all(id(n) in used for n in by_seq[seqs[cursor]])):
                cursor += 1
            if cursor == len(seqs):
                break
            fits = [n for n in by_seq[seqs[cursor]] if id(n) not in used]
            after = min(fits, key=lambda n: (not n.valid, n.line))
            if after.seq > seq:
                gaps.append((seq, after.seq - seq, chain[-1] if chain else None, after))
            else:  # right seq, wrong prev: from another chain, or the record before it was replaced
                broken.add(id(after))
            fits = [after]
        last_line = chain[-1].line if chain else 0
        node = min(fits, key=lambda n: (not n.valid, n.line <= last_line, n.line))
        chain.append(node)
        used.add(id(node))
        seq, prev = node.seq + 1, node.mac
    unused = [n for n in nodes if id(n) not in used]
    head = _read_head(path, key_file)
    in_chain = {n.mac: n.line for n in chain}
    for n in unused:
        if n.valid and n.mac in in_chain:
            result.findings.append(Finding(n.line, "inserted", f"a copy of line {in_chain[n.mac]}"))
        elif n.valid:
            result.findings.append(Finding(n.line, "inserted", f"an authentic record (seq {n.seq}) that is not part "
                                           "of this file's chain (from another results file?)"))
        else:
            result.findings.append(Finding(n.line, "forged", "its MAC does not match its content and it fits nowhere "
                                           "in the chain: forged or inserted"))
    for first, count, before, after in gaps:
        where = f"between line {before.line} and line {after.line}" if before else f"before line {after.line}"
        missing = f"seq {first}" + (f"..{first + count - 1}" if count > 1 else "")
        result.findings.append(Finding(after.line, "deleted", f"{count} record(s) ({missing}) missing {where}"))
    in_place = _longest_increasing([n.line for n in chain])
    for i, n in enumerate(chain):
        if not n.valid:
            # the writer wrote a record with this MAC (the next record chains to it, or it is the writer's last):
            # edited; otherwise a record made up to fit the chain: forged
            successor = chain[i + 1] if i + 1 < len(chain) else None
            written = (successor is not None and successor.prev == n.mac) or (head is not None and head["mac"] == n.mac)
            result.findings.append(Finding(n.line, "edited", f"content changed after it was written (seq {n.seq})")
                                   if written else Finding(n.line, "forged", f"its MAC does not match its content "
                                                           f"(seq {n.seq}): not written with this key"))
        elif id(n) in broken:
            prior = f"line {chain[i - 1].line}" if i else "the file's start"
            result.findings.append(Finding(n.line, "inserted", f"record seq {n.seq} does not chain to {prior}: "
                                           "from another results file, or the record before it was replaced"))
        elif i not in in_place:
            result.findings.append(Finding(n.line, "reordered", f"record seq {n.seq} is out of its place"))
        else:
            result.verified += 1
    end = chain[-1].seq if chain else -1
    if head is not None and head["seq"] > end:
        result.findings.append(Finding(0, "deleted", f"{head['seq'] - end} record(s) missing at the end (the writer "
                                       f"last wrote seq {head['seq']}, the file's chain ends at seq {end})"))
    result.findings.sort(key=lambda f: (f.line, f.kind))
    return result
