"""Files kbv writes on the parent side: the cache folder, and writing a file whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    """kbv's cache folder: ``$KBV_CACHE_DIR``, default ``~/.cache/kbv`` (builds, timings, counts, ceilings)."""
    return Path(os.environ.get("KBV_CACHE_DIR", Path.home() / ".cache" / "kbv"))


def write_atomic(path: str | Path, text: str | bytes) -> Path:
    """Write ``text`` (or bytes, exactly) to ``path`` through a temporary file in the same folder, flushed to disk,
    and a rename: a reader sees the old file or the new one, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
