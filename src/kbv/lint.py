"""``kbv lint``: screen problems for outputs a cheating kernel can pass (issue #3).

For every applicable distribution (D1-D6, ``KBV_SKIP`` respected) the reference runs on fresh seeds, and kbv's own
verified-protocol judge (:func:`kbv.judge.compare_outputs`, tolerances from :mod:`kbv.protocol`) decides whether
cheat outputs pass. A cheat *holds on a distribution* when it passes for every seed there. The checks:

- ``zeros``, ``constant`` (the reference's mean, median and midrange, each on its own), ``input`` (an input of the
  output's shape as is, or reshaped where the element count matches): one output replaced, the others exact. Not
  reported where the cheat equals the reference bit for bit on every seed (it is then the right answer on that data,
  as ReLU's input under D1 or zeros under D4).
- ``wrong_seed``: the outputs for another seed's inputs pass (outputs hardly depend on the input values).
- ``ignores_inputs``: one input replaced by another seed's draw leaves the outputs passing (problems with two or
  more inputs; with one, this is ``wrong_seed``).
- ``ignores_weights``: one floating parameter re-drawn (normal values at the parameter's own RMS, 1 where it is all
  zeros) leaves the outputs passing.
- ``degenerate``: non-finite outputs under any distribution, or an output of two or more elements identically
  constant under D1.
- ``stochastic``: the same D1 inputs under another RNG state give other outputs (dropout in training mode): no
  kernel with its own random draws can match the reference (catalogue C10).

**Findings and notes.** kbv times kernels on D1, the problem's own inputs, and a kernel can tell D1 from D2-D6 by
one element's sign or size; so a check holding on D1 is a *finding* (a cheat that passes the timed run), as are
every ``degenerate`` and ``error``. A check holding only on D2-D6 is a *note*: that distribution adds no coverage
there (a Gemm with bias under D3, whose inputs the bias drowns), but no cheat gains a verdict or a speedup from it;
``strict`` makes notes findings. A problem with a finding is flagged. On D2-D6 a reference that is the same constant
for every seed (ReLU under D4 is all zeros) is how those distributions catch identity kernels: the dependence
checks and the constant-output check are not run there.

Each problem runs in its own ``python -m kbv.worker.screen`` process with a time limit (the checks live there:
``kbv.worker.screen``); it sends raw findings back as JSON, and this module, the parent, sorts them into findings
and notes.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from kbv import proc
from kbv.problems import PROBLEM_NAME, Problem, ProblemFormatError, load_problem, resolve_profile, resolve_suite
from kbv.protocol import DEFAULT_TRIALS_PER_DISTRIBUTION, PRECISIONS, TIMED_DISTRIBUTION

CHECKS = ("zeros", "constant", "input", "wrong_seed", "ignores_inputs", "ignores_weights", "degenerate", "stochastic",
          "error")
DEFAULT_TIMEOUT = 120.0


@dataclass(frozen=True)
class Finding:
    check: str
    distribution: str | None
    detail: str
    subject: str | None = None  # what the finding is about: "output 0", "input 1", "parameter bias"


@dataclass
class LintResult:
    problem: str
    path: str
    findings: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)  # checks holding only on D2-D6 (see the module docstring)
    error: str | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    standard_only: list[dict[str, str]] = field(default_factory=list)  # cheats only KernelBench's check accepts
    profile: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.findings and self.error is None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out


@dataclass(frozen=True)
class LintOptions:
    device: str = "auto"
    precision: str = "fp32"
    profile: str = "auto"
    seeds: int = DEFAULT_TRIALS_PER_DISTRIBUTION
    timeout: float = DEFAULT_TIMEOUT
    jobs: int = 1
    strict: bool = False  # notes (checks holding only on D2-D6) count as findings

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first option that cannot work (as ``kbv lint``'s flag)."""
        if self.precision not in PRECISIONS:
            raise ValueError(f"--precision must be one of {', '.join(PRECISIONS)} (got {self.precision!r})")
        if not (isinstance(self.timeout, (int, float)) and self.timeout > 0 and math.isfinite(self.timeout)):
            raise ValueError(f"--timeout must be a positive, finite number of seconds (got {self.timeout!r})")
        if not isinstance(self.seeds, int) or self.seeds < 2:
            raise ValueError(f"--seeds must be at least 2 (got {self.seeds!r})")
        if not isinstance(self.jobs, int) or self.jobs < 1:
            raise ValueError(f"--jobs must be at least 1 (got {self.jobs!r})")
        if not isinstance(self.profile, str) or not self.profile.strip():
            raise ValueError(f"--profile must be auto, default or a profile name (got {self.profile!r})")

    def resolved_profile(self, device: str, problem: Problem) -> str | None:
        """As ``kbv eval`` (``kbv.problems.resolve_profile``)."""
        return resolve_profile(self.profile, device, problem)



def split_findings(findings: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    """(findings, notes): a check that holds on D1 for some subject is a finding on every distribution it holds on,
    as is every ``degenerate`` and ``error``; the rest hold only on D2-D6 and are notes."""
    on_timed = {(f.check, f.subject) for f in findings if f.distribution == TIMED_DISTRIBUTION}
    keep: list[Finding] = []
    notes: list[Finding] = []
    for f in findings:
        flagging = f.check in ("degenerate", "error") or f.distribution is None or (f.check, f.subject) in on_timed
        (keep if flagging else notes).append(f)
    return keep, notes



def result_from_raw(data: dict[str, Any], strict: bool = False) -> LintResult:
    """A ``LintResult`` from the screen process's raw JSON (``kbv.worker.screen``): findings sorted from notes here."""
    findings, notes = split_findings([Finding(**f) for f in data["raw_findings"]])
    if strict:
        findings, notes = findings + notes, []
    return LintResult(data["problem"], data["path"], findings, notes, skipped=dict(data.get("skipped", {})),
                      standard_only=list(data.get("standard_only", [])), profile=data.get("profile"),
                      seconds=float(data.get("seconds", 0.0)))


def problem_facts(problem: Problem) -> dict[str, Any]:
    """What the screen process needs to know of a problem beside its file (read here with ``ast``)."""
    return {"key": problem.key, "skip": dict(problem.skip), "mode": problem.mode,
            "unscaled": list(problem.unscaled_inputs)}


# ---------------------------------------------------------------------------------------------------------------
# The parent: one child process per problem, with a time limit.


def collect(targets: Iterable[str | Path]) -> list[Path]:
    """Problem files from files, suite folders (``level*/`` or flat) and shipped suite names."""
    files: list[Path] = []
    for target in targets:
        path = Path(target)
        if path.is_file():
            files.append(path)
            continue
        root = path if path.is_dir() else resolve_suite(str(target))
        found = [f for f in (list(root.glob("level*/*.py")) or list(root.glob("*.py"))) if PROBLEM_NAME.match(f.name)]
        files.extend(sorted(found, key=_order))
    return files


def _order(f: Path) -> tuple[int, int]:
    """Level, then id (as ``kbv.problems.discover``)."""
    level = f.parent.name.removeprefix("level")
    return (int(level) if level.isdigit() else 0, int(f.name.split("_", 1)[0]))


def _error(problem: str, path: Path, message: str, seconds: float = 0.0) -> LintResult:
    return LintResult(problem, str(path), [Finding("error", None, message)], error=message, seconds=seconds)


def lint_problem(path: str | Path, options: LintOptions, device: str) -> LintResult:
    """Screen one problem in a fresh ``python -m kbv.worker.screen`` process; failures become an ``error`` entry."""
    path = Path(path).resolve()
    try:
        problem = load_problem(path)
    except (ProblemFormatError, OSError) as exc:
        return _error(path.stem, path, f"{type(exc).__name__}: {exc}")
    profile = options.resolved_profile(device, problem)
    threads = max(1, (os.cpu_count() or 1) // max(1, options.jobs))
    with tempfile.TemporaryDirectory(prefix="kbv-lint-") as tmp:
        result_file = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "kbv.worker.screen", "--one", str(path), "--result", str(result_file),
               "--facts", json.dumps(problem_facts(problem)),
               "--device", device, "--precision", options.precision, "--seeds", str(options.seeds),
               "--threads", str(threads)] + (["--profile", profile] if profile else [])
        env = dict(os.environ)
        start = time.monotonic()
        done = proc.run(cmd, options.timeout, env=env, cwd=tmp, capture_stdout=False)
        if done.timed_out:
            return _error(problem.key, path, f"timed out after {options.timeout:g} s", time.monotonic() - start)
        elapsed = time.monotonic() - start
        if result_file.is_file():
            data = json.loads(result_file.read_text())
            if "error" in data:
                return _error(problem.key, path, data["error"], elapsed)
            return result_from_raw(data, options.strict)
        tail = done.stderr.strip().splitlines()[-5:]
        return _error(problem.key, path, f"the lint process exited with code {done.returncode}: " + " | ".join(tail),
                      elapsed)


def lint(targets: Iterable[str | Path], options: LintOptions,
         on_result: Callable[[LintResult], None] | None = None) -> list[LintResult]:
    """Screen every problem named by ``targets``; results in the order of the files."""
    from kbv import envinfo

    options.validate()
    device = envinfo.resolve_device(options.device)
    files = collect(targets)

    def one(path: Path) -> LintResult:
        result = lint_problem(path, options, device)
        if on_result:
            on_result(result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        return list(pool.map(one, files))


