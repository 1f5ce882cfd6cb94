"""What a problem's correctness stage really held on the device, remembered for the gate (``--gpu-share``).

The gate's reckoning from the problem's counts (``SHARED_CORRECTNESS_MEMORY_FACTORS``; until h100-2026-12-06-h six
times one forward's inputs and outputs) missed by up to 3x on the H200 (docs/results/h200-2026-12-04: 68 GiB held
against 24 expected on level1/9). After each correctness stage on a GPU the parent's own figure of both processes together
(``memory_bytes.correctness_stage.together_max``, from NVML) is kept per problem source, profile, precision and
shape under ``<cache_dir>/gate``, and a later pair of that problem is expected to need the most ever seen there
times ``GATE_MEASURED_MARGIN``: in a sweep or a training loop, where problems come back, the gate learns what each
needs. A candidate that holds more only makes later pairs of its problem run beside fewer others; no verdict reads
this.

The same file keeps how long the last pair of the problem took on the device (its stages less their waits for the
GPU: ``pair_seconds``), so that a batch sharing a GPU starts its longest pairs first (``longest_first``): the last
pairs of a batch run beside fewer others, and a long one among them leaves the GPU underused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, TypeVar

from kbv.files import write_atomic
from kbv.protocol import GATE_MEASURED_MARGIN

T = TypeVar("T")


def _path(cache_dir: str | Path, key: str) -> Path:
    return Path(cache_dir) / "gate" / f"{key}.json"


def _kept(cache_dir: str | Path, key: str) -> dict[str, Any]:
    try:
        kept = json.loads(_path(cache_dir, key).read_text())
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


def _keep(cache_dir: str | Path, key: str, kept: dict[str, Any]) -> None:
    """Replace the file whole (concurrent writers: one wins)."""
    path = _path(cache_dir, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(kept))


def _held(kept: dict[str, Any]) -> int | None:
    held = kept.get("together_max")
    return held if isinstance(held, int) and held > 0 else None


def remembered(cache_dir: str | Path, key: str) -> int | None:
    """The most a correctness stage of this problem has held, or None (never measured, or unreadable)."""
    return _held(_kept(cache_dir, key))


def remember(cache_dir: str | Path, key: str, held: int) -> None:
    """Keep ``held`` if it is more than what is kept."""
    kept = _kept(cache_dir, key)
    before = _held(kept)
    if held > 0 and (before is None or held > before):
        _keep(cache_dir, key, kept | {"together_max": int(held)})


def remembered_seconds(cache_dir: str | Path, key: str) -> float | None:
    """How long the last pair of this problem took on the device, or None."""
    seconds = _kept(cache_dir, key).get("pair_seconds")
    return float(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else None


def remember_seconds(cache_dir: str | Path, key: str, seconds: float) -> None:
    if seconds > 0:
        _keep(cache_dir, key, _kept(cache_dir, key) | {"pair_seconds": round(float(seconds), 3)})


def longest_first(items: list[T], seconds: Callable[[T], float | None]) -> list[T]:
    """``items`` with those never timed first (in their order: their cost is unknown and their references are
    timed in full), then the rest by ``seconds``, longest first."""
    return sorted(items, key=lambda item: -(seconds(item) or float("inf")))  # sorted calls the key once each


def expected(static: int, measured: int | None) -> int:
    """The need the gate uses: the measured figure with its margin where there is one, else the static reckoning."""
    return int(GATE_MEASURED_MARGIN * measured) if measured else static
