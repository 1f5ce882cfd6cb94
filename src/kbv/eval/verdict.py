"""The one place that turns evidence into verdicts and flags (``decide``), and combines verdicts over shapes.

Rules, in the order they apply (README "Verdicts"; ``kbv.protocol.VERDICT_PRECEDENCE`` ranks the verdicts):

1. kbv itself failed: ``runtime_error`` with ``harness_error``.
2. The compile stage failed: ``compile_error`` (a build or import failure) or ``timeout``, for both protocols. A
   problem that did not load is ``runtime_error`` with ``reference_error``: not the candidate's fault.
3. The reference failed in any stage: ``runtime_error`` with ``reference_error``.
4. The candidate's correctness worker failed: ``timeout`` or ``runtime_error``. The standard verdict is KernelBench's
   D1 check where every D1 trial ran before the failure, else the same failure.
5. Otherwise the verified verdict is ``incorrect`` when a distribution failed (the poisoned and profiled trials
   count as D1) or a timed call's output was wrong (``timed_output_mismatch``); else ``rejected`` when a rule was
   broken (``kbv.protocol.REJECTING_FLAGS``; also the fallback flags under ``--require-custom-kernels`` and
   ``low_precision`` under ``--strict-precision``); else ``correct``. The standard verdict is ``correct`` when every
   D1 trial passed KernelBench's check.
6. A candidate failure in the performance stage counts only for a protocol whose verdict needed that timing: it
   replaces a verified ``correct`` or ``rejected`` (the verified timing was run for it), and a standard ``correct``
   when the standard timing ran. It never overrides an ``incorrect`` verdict, which did not need the timing.

Flags are every finding the stages observed, plus those the rules add (``reference_error``, ``harness_error``,
``timing_truncated``), sorted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kbv.eval.evidence import Evidence, Failure
from kbv.protocol import FALLBACK_FLAGS, PRECISION_FLAGS, REJECTING_FLAGS, worst_verdict

INCORRECT_FLAGS = frozenset({"timed_output_mismatch", "uninitialized_read"})


@dataclass(frozen=True)
class Rules:
    """The options the verdict rules depend on (a subset of ``EvalOptions``)."""

    baselines: tuple[str, ...] = ("standard", "verified")
    require_custom_kernels: bool = False
    strict_precision: bool = False

    @property
    def rejecting(self) -> frozenset[str]:
        return (REJECTING_FLAGS | (FALLBACK_FLAGS if self.require_custom_kernels else frozenset())
                | (PRECISION_FLAGS if self.strict_precision else frozenset()))


@dataclass(frozen=True)
class Decision:
    verdict: str
    standard_verdict: str
    flags: list[str] = field(default_factory=list)
    error: dict | None = None  # the failure that decided the verdict, or the first recorded one
    rule: str = ""  # which rule decided (for the record's readers and the tests)


def _failure_verdict(failure: Failure) -> str:
    return "timeout" if failure.kind == "timeout" else "runtime_error"


def correctness_verdicts(ev: Evidence, rules: Rules) -> tuple[str, str]:
    """Rule 5: the verdicts from the correctness evidence (and the timed-output re-checks) alone."""
    failed = ev.correctness_failed or bool(ev.observed & INCORRECT_FLAGS)
    verdict = "incorrect" if failed else "rejected" if ev.observed & rules.rejecting else "correct"
    standard = "correct" if ev.standard_d1 and all(ev.standard_d1) else "incorrect"
    return verdict, standard


def should_time(ev: Evidence, rules: Rules) -> tuple[str, ...]:
    """The protocols whose verdict needs the performance stage: ``verified`` when the verified verdict so far is
    correct, ``standard`` when the standard one is (a kernel only KernelBench's check accepts still gets the speedup
    it would report). When either does, every baseline of the run is timed."""
    if ev.failures or not ev.compiled:
        return ()
    verdict, standard = correctness_verdicts(ev, rules)
    return tuple(b for b, v in (("standard", standard), ("verified", verdict))
                 if b in rules.baselines and v == "correct")


def decide(ev: Evidence, rules: Rules) -> Decision:
    """Verdicts and flags of a pair from its evidence (the rules in the module docstring, in order)."""
    flags = set(ev.observed)
    if ev.timing_truncated:
        flags.add("timing_truncated")
    harness = next((f for f in ev.failures if f.role == "harness"), None)
    if harness is not None:
        flags.add("harness_error")
        return Decision("runtime_error", "runtime_error", sorted(flags), harness.error, "harness error")
    compile_failure = ev.failure_in("compile")
    if ev.problem_failed:
        flags.add("reference_error")
        error = compile_failure.error if compile_failure else None
        return Decision("runtime_error", "runtime_error", sorted(flags), error, "problem did not load")
    if compile_failure is not None or not ev.compiled:
        verdict = "timeout" if compile_failure and compile_failure.kind == "timeout" else "compile_error"
        return Decision(verdict, verdict, sorted(flags), compile_failure.error if compile_failure else None,
                        "compile failed")
    reference = next((f for f in ev.failures if f.role == "reference"), None)
    if reference is not None:
        flags.add("reference_error")
        return Decision("runtime_error", "runtime_error", sorted(flags), reference.error, "reference failed")
    in_correctness = ev.failure_in("correctness", "candidate")
    if in_correctness is not None:
        verdict = _failure_verdict(in_correctness)
        if ev.d1_complete and ev.standard_d1:
            standard = "correct" if all(ev.standard_d1) else "incorrect"
        else:
            standard = verdict
        return Decision(verdict, standard, sorted(flags), in_correctness.error, "candidate failed in correctness")
    verdict, standard = correctness_verdicts(ev, rules)
    in_performance = ev.failure_in("performance", "candidate")
    if in_performance is None:
        return Decision(verdict, standard, sorted(flags), None, "correctness and rules")
    failed = _failure_verdict(in_performance)
    if "verified" in ev.timed_for and verdict in ("correct", "rejected"):
        verdict = worst_verdict(verdict, failed)
    if "standard" in ev.timed_for and standard == "correct":
        standard = failed
    return Decision(verdict, standard, sorted(flags), in_performance.error, "candidate failed in performance")


def over_shapes(verdicts: list[str]) -> str:
    """A multi-shape problem's verdict: the worst over its shapes (correct only if correct on every shape)."""
    return worst_verdict(*verdicts)
