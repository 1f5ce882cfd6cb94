"""Cache of reference timings, keyed by everything that can change them.

The key covers the problem's source hash, its shapes, the precision, the baseline, the device name, the driver,
torch's version, the timing rule, the timed inputs' distribution mix and whether they were lent. A cached value is never used blind: the pipeline always re-measures briefly,
records the drift beside the cached median, and sets aside a value the re-measure finds more than
``REFERENCE_CACHE_SLOW_MAX`` too slow (dropping it) or, read twice, more than ``REFERENCE_DRIFT_MAX`` too fast: the
reference is then timed in full beside the candidate, and the cache takes that figure.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from kbv.files import write_atomic
from kbv.protocol import TIMED_DISTRIBUTION_WEIGHTS, TIMING_RULES


def cache_key(problem_sha256: str, shapes: dict[str, Any], precision: str, baseline: str, device_kind: str,
              device_name: str, driver: str, distributions: tuple[str, ...] = (), lent: bool = False,
              recorded: bool = False) -> str:
    """The key; ``lent``: the timed inputs are lent by a lender (``kbv.eval.lent_timing``), which moves the times;
    ``recorded``: every forward was recorded (``kbv.worker.kernel_record``), which adds work around each call."""
    material: dict[str, Any] = {
        "problem": problem_sha256, "shapes": shapes, "precision": precision, "baseline": baseline,
        "device": device_name, "driver": driver, "torch": torch.__version__,
        "rule": asdict(TIMING_RULES[device_kind]),
        "inputs": {d: TIMED_DISTRIBUTION_WEIGHTS[d] for d in distributions},  # the timed inputs' mix
    }
    if lent:  # only then: the keys of times measured on the worker's own draws stay as they were
        material["lent"] = True
    if recorded:
        material["recorded"] = True
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


class ReferenceTimingCache:
    def __init__(self, root: Path):
        self.root = root / "reference-timing"

    def get(self, key: str) -> dict[str, Any] | None:
        path = self.root / f"{key}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, value: dict[str, Any]) -> None:
        write_atomic(self.root / f"{key}.json", json.dumps(value))

    def drop(self, key: str) -> None:
        (self.root / f"{key}.json").unlink(missing_ok=True)
