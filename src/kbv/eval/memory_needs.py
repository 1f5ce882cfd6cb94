"""What a problem's correctness stage really held on the device, remembered for the gate (``--gpu-share``).

The gate's reckoning from the problem's counts (``SHARED_CORRECTNESS_MEMORY_FACTOR`` times one forward's inputs and
outputs) missed by up to 3x on the H200 (docs/results/h200-2026-12-04: 68 GiB held against 24 expected on
level1/9). After each correctness stage on a GPU the parent's own figure of both processes together
(``memory_bytes.correctness_stage.together_max``, from NVML) is kept per problem source, profile, precision and
shape under ``<cache_dir>/gate``, and a later pair of that problem is expected to need the most ever seen there
times ``GATE_MEASURED_MARGIN``: in a sweep or a training loop, where problems come back, the gate learns what each
needs. A candidate that holds more only makes later pairs of its problem run beside fewer others; no verdict reads
this.
"""

from __future__ import annotations

import json
from pathlib import Path

from kbv.files import write_atomic
from kbv.protocol import GATE_MEASURED_MARGIN


def _path(cache_dir: str | Path, key: str) -> Path:
    return Path(cache_dir) / "gate" / f"{key}.json"


def remembered(cache_dir: str | Path, key: str) -> int | None:
    """The most a correctness stage of this problem has held, or None (never measured, or unreadable)."""
    try:
        held = json.loads(_path(cache_dir, key).read_text()).get("together_max")
    except (OSError, ValueError, AttributeError):
        return None
    return held if isinstance(held, int) and held > 0 else None


def remember(cache_dir: str | Path, key: str, held: int) -> None:
    """Keep ``held`` if it is more than what is kept (concurrent writers: the file is replaced whole, one wins)."""
    before = remembered(cache_dir, key)
    if held > 0 and (before is None or held > before):
        path = _path(cache_dir, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"together_max": int(held)}))


def expected(static: int, measured: int | None) -> int:
    """The need the gate uses: the measured figure with its margin where there is one, else the static reckoning."""
    return int(GATE_MEASURED_MARGIN * measured) if measured else static
