"""Typed evidence: what the stages of one pair found, before any verdict is decided.

Stages never set a verdict or a flag list. They return (or add to) an ``Evidence``: the failures of workers, the
outcome of each correctness distribution, the standard protocol's D1 checks, and ``observed``, the named findings
(flags from ``kbv.protocol.FLAGS``) each stage saw. ``kbv.eval.verdict.decide`` turns evidence and options into the
verdicts and flags of the record, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kbv.protocol import DEVICE_IN_USE_SLACK_BYTES, DEVICE_IN_USE_SLACK_REL

STAGES = ("compile", "correctness", "performance")
# what each worker command's time is charged to in the wall_seconds breakdown
PART_OF = {"setup": "setup", "perturb": "setup", "state": "setup", "load": "setup", "forward": "trials", "judge": "judging",
           "precision": "probes", "fallback": "probes", "buffers": "probes", "memory": "probes", "burst": "probes",
           "time": "timing", "kept": "judging", "drop": "judging", "same": "judging", "lend_timed": "setup",
           "borrow_timed": "setup", "fill": "timing", "recorded": "probes"}
ROLES = ("candidate", "reference", "harness")
# words of a device that ran out of memory, in a failure's message or traceback
OUT_OF_MEMORY = ("out of memory", "outofmemoryerror", "cuda_error_out_of_memory", "cudaerrormemoryallocation")


def reads_out_of_memory(error: dict[str, Any]) -> bool:
    """A record's ``error`` entry whose message or traceback says the device ran out of memory."""
    message = str(error.get("message", "")) + str(error.get("traceback", ""))
    return any(word in message.lower() for word in OUT_OF_MEMORY)


def out_of_memory_is_kbvs(error: dict[str, Any], memory_bytes: dict[str, Any], device: str,
                          reason: str) -> dict[str, Any] | None:
    """A candidate's worker that ran out of device memory where the parent's reading of the correctness stage
    (``memory_bytes.correctness_stage.held_max``, the driver's figure per process tree) shows it held no more than
    the reference's worker beyond the memory rule's margin (``DEVICE_IN_USE_SLACK_*``): the pair's own memory, both
    roles' workers with kbv's buffers in them, did not fit the device, which is kbv's failure (``harness_error``),
    not the candidate's ``runtime_error``. The entry the error gets as ``out_of_memory`` (``reason`` says where),
    or None where it is the candidate's: not out of memory, no such reading, or it held more."""
    if device == "cpu" or not reads_out_of_memory(error):
        return None
    held = (memory_bytes.get("correctness_stage") or {}).get("held_max") or {}
    cand, ref = held.get("candidate"), held.get("reference")
    if not (isinstance(cand, int) and isinstance(ref, int)):
        return None
    if cand > ref + max(DEVICE_IN_USE_SLACK_BYTES, DEVICE_IN_USE_SLACK_REL * ref):
        return None
    return {"reason": reason, "held_max": {"candidate": cand, "reference": ref}}


@dataclass(frozen=True)
class Failure:
    """A stage that did not finish: whose fault (``role``), how (``kind``: ``timeout``, ``died``, ``error``,
    ``protocol``, ``build`` or ``harness``), and the record's ``error`` entry."""

    stage: str
    role: str
    kind: str
    error: dict[str, Any]

    def __post_init__(self) -> None:
        if self.stage not in STAGES or self.role not in ROLES:
            raise ValueError(f"bad failure: stage {self.stage!r}, role {self.role!r}")


@dataclass
class Evidence:
    """Everything the verdict rules read. ``distributions`` maps a distribution's name to ``passed``, ``failed``,
    ``skipped`` or ``error``; ``standard_d1`` holds KernelBench's check of each D1 trial, ``d1_complete`` whether
    all D1 trials ran; ``timed_for`` names the protocols whose verdict needed the performance stage (``verified``,
    ``standard``: ``kbv.eval.verdict.should_time``)."""

    compiled: bool = False
    problem_failed: bool = False  # the problem itself did not load in the compile worker
    failures: list[Failure] = field(default_factory=list)
    distributions: dict[str, str] = field(default_factory=dict)
    standard_d1: list[bool] = field(default_factory=list)
    d1_complete: bool = False
    observed: set[str] = field(default_factory=set)
    timed_for: tuple[str, ...] = ()
    timing_truncated: bool = False

    def see(self, *flags: str) -> None:
        """Record findings (flag names)."""
        self.observed.update(flags)

    def fail(self, failure: Failure) -> None:
        self.failures.append(failure)

    def failure_in(self, stage: str, role: str | None = None) -> Failure | None:
        return next((f for f in self.failures if f.stage == stage and (role is None or f.role == role)), None)

    @property
    def correctness_failed(self) -> bool:
        return any(status == "failed" for status in self.distributions.values())
