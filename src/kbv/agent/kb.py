"""The agent's layered knowledge base: folders of text files ranked with BM25 through SQLite's FTS5.

Layers, searched in this order: ``reference`` (kernels: kbv's own examples plus any ``--kb`` folder), ``notes``
(the optimisation notes shipped in ``kbv/agent/notes``), ``docs`` (API/ISA documentation a user points to with
``--kb docs=DIR``). Every document's id is ``<layer>:<path relative to its folder>``.

Raw text never reaches FTS5's query syntax: a query is split into word tokens (``[A-Za-z0-9_]+``), each one is
quoted, and they are OR-joined. Results are ordered by BM25 score (rounded, so float noise cannot reorder them),
then by id: the same index and query always give the same ids. Folders named ``evaluator`` (a suite's hidden
side: held-out shapes, weights, provenance), hidden files, symbolic links and files whose opening says "WRONG on
purpose" (kbv's instructive bad examples) are never indexed.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

LAYERS = ("reference", "notes", "docs")
SUFFIXES = (".py", ".md", ".txt", ".rst", ".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".c")
MAX_DOC_BYTES = 256 * 1024  # longer files are indexed up to this size
MAX_QUERY_TERMS = 64
EXCLUDED_DIRS = ("evaluator",)  # a suite's hidden side never enters the knowledge base
WRONG_MARKER = "WRONG on purpose"  # kbv's instructive bad examples say so in their docstring: not reference kernels
_TOKEN = re.compile(r"[A-Za-z0-9_]+")


@dataclass(frozen=True)
class Hit:
    id: str
    layer: str
    path: str
    score: float
    text: str


def notes_dir() -> Path:
    return Path(str(resources.files("kbv") / "agent" / "notes"))


def examples_dir() -> Path:
    return Path(str(resources.files("kbv") / "examples"))


def query_expression(text: str) -> str | None:
    """The FTS5 MATCH expression for free text: its word tokens, each quoted, OR-joined (None when it has none).
    Only ``[A-Za-z0-9_]`` reaches the query, inside double quotes, so no operator, column filter or NEAR group
    can be formed."""
    seen: list[str] = []
    for token in _TOKEN.findall(text.lower()):
        if token not in seen:
            seen.append(token)
        if len(seen) >= MAX_QUERY_TERMS:
            break
    return " OR ".join(f'"{t}"' for t in seen) or None


def _files(root: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")) and d not in EXCLUDED_DIRS)
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if name.startswith(".") or path.is_symlink() or not name.endswith(SUFFIXES):
                continue
            out.append(path)
    return out


class KnowledgeBase:
    """An in-memory FTS5 index over layered folders (``layers``: (layer, folder) pairs; a missing folder is an
    error, an empty one is allowed)."""

    def __init__(self, layers: list[tuple[str, Path]]):
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE docs USING fts5(id UNINDEXED, layer UNINDEXED, body,"
                        " tokenize = 'porter unicode61')")
        self.texts: dict[str, str] = {}
        self.folders: list[tuple[str, str]] = []
        for layer, folder in layers:
            if layer not in LAYERS:
                raise ValueError(f"knowledge-base layer must be one of {', '.join(LAYERS)}, got {layer!r}")
            folder = Path(folder)
            if not folder.is_dir():
                raise FileNotFoundError(f"knowledge-base folder not found: {folder}")
            if any(part in EXCLUDED_DIRS for part in folder.resolve().parts):
                raise ValueError(f"{folder}: a suite's evaluator folder cannot be a knowledge-base folder")
            self.folders.append((layer, str(folder)))
            for path in _files(folder):
                doc_id = f"{layer}:{path.relative_to(folder).as_posix()}"
                if doc_id in self.texts:
                    continue  # the first folder of a layer wins for a repeated relative path
                with path.open("rb") as f:
                    text = f.read(MAX_DOC_BYTES).decode("utf-8", "replace")
                if WRONG_MARKER in text[:500]:
                    continue
                self.texts[doc_id] = text
                self.db.execute("INSERT INTO docs (id, layer, body) VALUES (?, ?, ?)", (doc_id, layer, text))
        self.db.commit()

    @classmethod
    def default(cls, extra: list[tuple[str, Path]] = ()) -> KnowledgeBase:
        """kbv's examples (reference layer), its notes, then the extra (layer, folder) pairs."""
        return cls([("reference", examples_dir()), ("notes", notes_dir()), *extra])

    def __len__(self) -> int:
        return len(self.texts)

    def search(self, text: str, k: int = 4, layer: str | None = None) -> list[Hit]:
        """The k best documents for free text (in one layer, or all), best first, ties broken by id."""
        expr = query_expression(text)
        if expr is None or k <= 0:
            return []
        sql = "SELECT id, layer, round(bm25(docs), 6) AS s FROM docs WHERE docs MATCH ?"
        args: list[object] = [expr]
        if layer is not None:
            sql += " AND layer = ?"
            args.append(layer)
        sql += " ORDER BY s, id LIMIT ?"
        args.append(k)
        rows = self.db.execute(sql, args).fetchall()
        return [Hit(id=i, layer=lay, path=i.split(":", 1)[1], score=float(s), text=self.texts[i]) for i, lay, s in rows]

    def retrieve(self, text: str, per_layer: dict[str, int] | None = None) -> list[Hit]:
        """Layered retrieval: the best documents of each layer in layer order (default 2 reference kernels,
        2 notes, 2 docs)."""
        per_layer = per_layer or {"reference": 2, "notes": 2, "docs": 2}
        hits: list[Hit] = []
        for layer in LAYERS:
            hits.extend(self.search(text, per_layer.get(layer, 0), layer))
        return hits


def parse_kb_option(value: str) -> tuple[str, Path]:
    """``--kb DIR`` (reference layer) or ``--kb LAYER=DIR``."""
    layer, sep, folder = value.partition("=")
    if sep and layer in LAYERS:
        return layer, Path(folder)
    return "reference", Path(value)
