"""The roofline counts of one forward of a problem's reference: the data ``kbv.worker.flops`` produces in its own
process and ``kbv.roofline`` bounds (a shared, data-only type)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kbv.protocol import COUNT_RULES_VERSION


@dataclass
class Counts:
    """FLOPs per precision class and minimum bytes of one forward of a problem's reference."""

    problem: str
    precision: str
    profile: str | None
    device: str  # where the forward ran: "meta" (no allocation) or "cpu"
    flops: dict[str, int]
    bytes: int
    bytes_breakdown: dict[str, int]
    by_op: dict[str, int] = field(default_factory=dict)
    uncounted: list[str] = field(default_factory=list)
    fp32_matmul: str = "tf32"
    fallback: str | None = None  # why the count did not run on meta at the requested size, when it did not
    notes: list[str] = field(default_factory=list)
    shapes: dict[str, Any] = field(default_factory=dict)
    # the most the forward's ops' outputs held at once beyond its outputs (its intermediate tensors, each storage
    # once, freed with its last tensor): for the gate's first memory estimate (kbv.eval.pair.correctness_memory)
    intermediate_bytes: int = 0
    rules_version: int = COUNT_RULES_VERSION

    @property
    def total_flops(self) -> int:
        return int(sum(self.flops.values()))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Counts":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
