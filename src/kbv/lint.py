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

Each problem runs in its own ``python -m kbv.lint --one`` process with a time limit; results come back as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from kbv import judge
from kbv.problems import _PROBLEM_NAME, Problem, ProblemFormatError, load_problem, resolve_suite
from kbv.protocol import DEFAULT_TRIALS_PER_DISTRIBUTION, DISTRIBUTIONS, PRECISIONS
from kbv.worker import inputs, loading

CHECKS = ("zeros", "constant", "input", "wrong_seed", "ignores_inputs", "ignores_weights", "degenerate", "stochastic",
          "error")
TIMED_DISTRIBUTION = "D1"  # the distribution kbv times on (kbv.pipeline), and the problem's own inputs
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

    def resolved_profile(self, device: str, problem: Problem) -> str | None:
        """As ``kbv eval``: auto is the ``small`` profile on the CPU where the problem has one, else default sizes."""
        if self.profile == "auto":
            return "small" if device == "cpu" and "small" in problem.profiles else None
        return None if self.profile == "default" else self.profile


# ---------------------------------------------------------------------------------------------------------------
# The screen itself (runs inside the per-problem process).

Reply = dict[str, Any]


@dataclass
class _Trial:
    seed: int
    args: list[Any]
    reply: Reply

    @property
    def outputs(self) -> list[torch.Tensor]:
        return [item["tensor"] for item in self.reply["outputs"]]


def _forward(model: torch.nn.Module, args: list[Any], seed: int) -> Reply:
    """One forward on copies of the inputs, under a fixed RNG state (dropout draws alike in every re-run)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    for i, item in enumerate(items):
        if not isinstance(item, torch.Tensor):
            raise TypeError(f"output {i} is a {type(item).__name__}, not a tensor")
    structure = type(out).__name__ if isinstance(out, (tuple, list)) else "single"
    return {"structure": structure, "outputs": [{"tensor": t.detach()} for t in items]}


def _replace(reply: Reply, index: int, tensor: torch.Tensor) -> Reply:
    outputs = list(reply["outputs"])
    outputs[index] = {"tensor": tensor}
    return {"structure": reply["structure"], "outputs": outputs}


def _constant_output(t: torch.Tensor) -> bool:
    """All elements equal (and finite)."""
    flat = t.reshape(-1)
    if flat.numel() == 0 or (t.is_floating_point() and not bool(torch.isfinite(flat).all())):
        return False
    return bool((flat == flat[0]).all())


def _cheats(ref: torch.Tensor, args: list[Any]) -> list[tuple[str, str, torch.Tensor]]:
    """(check, detail, output) for one reference output and its trial's inputs."""
    out = [("zeros", "all zeros", torch.zeros_like(ref))]
    if ref.numel():
        values = ref.double().reshape(-1)
        finite = values[torch.isfinite(values)]
        if finite.numel():
            kinds = {"mean": float(finite.mean()), "median": float(finite.median()),
                     "midrange": float((finite.max() + finite.min()) / 2)}
            for kind, value in kinds.items():
                value = value if ref.is_floating_point() else round(value)
                out.append(("constant", f"the reference's {kind} broadcast", torch.full_like(ref, value)))
    for j, a in enumerate(args):
        if not isinstance(a, torch.Tensor) or a.numel() != ref.numel():
            continue
        if tuple(a.shape) == tuple(ref.shape):
            out.append(("input", f"input {j} as is", a.to(ref.dtype)))
        else:
            out.append(("input", f"input {j} {tuple(a.shape)} reshaped", a.reshape(ref.shape).to(ref.dtype)))
    return out


def _fresh_like(p: torch.Tensor, seed: int) -> torch.Tensor:
    """Normal values of the parameter's shape at its own RMS (1 for an all-zero parameter)."""
    gen = torch.Generator().manual_seed(seed)
    rms = float(p.detach().double().square().mean().sqrt()) if p.numel() else 0.0
    fresh = torch.randn(p.shape, generator=gen, dtype=torch.float32)
    return (fresh * (rms if rms > 0 else 1.0)).to(device=p.device, dtype=p.dtype)


class _Screen:
    """The checks for one problem, one distribution at a time."""

    def __init__(self, problem: Problem, device: str, precision: str, profile: str | None, seeds: int):
        self.problem, self.device, self.precision, self.seeds = problem, device, precision, max(2, seeds)
        self.module = loading.load_problem_module(problem.path, profile)
        self.model = loading.build_model(self.module.Model, loading.init_inputs(self.module), secrets.randbits(63),
                                         device, precision, problem.mode)
        self.findings: list[Finding] = []
        self.standard_only: list[dict[str, str]] = []

    def _all_pass(self, pairs: Iterable[tuple[Callable[[], Reply], Reply]]) -> tuple[bool, float]:
        """Every (candidate, reference) pair passes; the worst error ratio seen. Stops at the first failure."""
        worst = 0.0
        for make, ref in pairs:
            cmp = judge.compare_outputs(make(), ref, self.precision)
            worst = max(worst, cmp.error_ratio)
            if not cmp.passed:
                return False, worst
        return True, worst

    def run(self) -> None:
        for dist in DISTRIBUTIONS:
            if dist.name in self.problem.skip:
                continue
            trials = []
            for _ in range(self.seeds):
                seed = secrets.randbits(63)
                args = inputs.make_inputs(self.module, seed, self.device, self.precision, dist,
                                          self.problem.unscaled_inputs)
                trials.append(_Trial(seed, args, _forward(self.model, args, seed)))
            self._degenerate(dist.name, trials)
            if dist.name == TIMED_DISTRIBUTION:
                self._stochastic(trials[0])
            self._fixed_cheats(dist.name, trials)
            if dist.name == TIMED_DISTRIBUTION or not self._same_constant(trials):
                self._dependence(dist.name, trials)

    def _add(self, check: str, dist: str, detail: str, subject: str | None = None) -> None:
        self.findings.append(Finding(check, dist, detail, subject))

    def _degenerate(self, dist: str, trials: list[_Trial]) -> None:
        for i, ref in enumerate(trials[0].outputs):
            bad = [int((~torch.isfinite(t.outputs[i])).sum()) for t in trials if t.outputs[i].is_floating_point()]
            if any(bad):
                self._add("degenerate", dist, f"output {i} has non-finite values ({max(bad)} of {ref.numel()})",
                          f"output {i}")
            if dist == TIMED_DISTRIBUTION and ref.numel() >= 2 and all(_constant_output(t.outputs[i]) for t in trials):
                self._add("degenerate", dist, f"output {i} is identically constant across its {ref.numel()} "
                                              f"elements ({float(ref.reshape(-1)[0]):.6g} on seed 1)", f"output {i}")

    def _stochastic(self, trial: _Trial) -> None:
        """The same inputs under another RNG state: a reference whose outputs change (dropout in training mode, a
        random projection drawn in forward) cannot be matched by any kernel that draws its own randomness; such a
        problem should declare ``KBV_MODE = "eval"`` or be made deterministic."""
        other = _forward(self.model, trial.args, trial.seed ^ 0x5A5A5A5A)
        cmp = judge.compare_outputs(other, trial.reply, self.precision)
        if not cmp.passed:
            self._add("stochastic", TIMED_DISTRIBUTION, f"the outputs change with the RNG state on the same inputs "
                                                        f"({cmp.reason}): dropout or sampling in forward?", "outputs")

    @staticmethod
    def _same_constant(trials: list[_Trial]) -> bool:
        """Every output the same constant for every seed (ReLU under D4)."""
        first = trials[0].outputs
        return all(
            (r.numel() < 2 or _constant_output(r)) and all(torch.equal(t.outputs[i], r) for t in trials[1:])
            for i, r in enumerate(first))

    def _fixed_cheats(self, dist: str, trials: list[_Trial]) -> None:
        for i in range(len(trials[0].outputs)):
            per_trial = [_cheats(t.outputs[i], t.args) for t in trials]
            for k, (check, detail, _) in enumerate(per_trial[0]):
                cands = [pt[k][2] if k < len(pt) and pt[k][:2] == (check, detail) else None for pt in per_trial]
                if any(c is None for c in cands):
                    continue
                refs = [t.outputs[i] for t in trials]
                if all(c.shape == r.shape and bool((c == r).all()) for c, r in zip(cands, refs)):
                    continue  # the cheat is the right answer on this data
                replies = [_replace(t.reply, i, c) for t, c in zip(trials, cands)]
                passed, worst = self._all_pass((lambda r=r: r, t.reply) for r, t in zip(replies, trials))
                what = f"output {i}: {detail}"
                if passed:
                    self._add(check, dist, f"{what} passes (worst error ratio {worst:.3g})", f"output {i}")
                elif dist == TIMED_DISTRIBUTION and all(judge.standard_check(r, t.reply)
                                                        for r, t in zip(replies, trials)):
                    self.standard_only.append({"check": check, "distribution": dist, "detail": what})

    def _dependence(self, dist: str, trials: list[_Trial]) -> None:
        n = len(trials)
        nxt = [trials[(k + 1) % n] for k in range(n)]
        passed, worst = self._all_pass(((lambda o=o: o.reply), t.reply) for t, o in zip(trials, nxt))
        if passed:
            self._add("wrong_seed", dist, f"the outputs for another seed's inputs pass (worst error ratio "
                                          f"{worst:.3g}): outputs hardly depend on the input values", "inputs")
        tensor_args = [j for j, a in enumerate(trials[0].args) if isinstance(a, torch.Tensor)]
        if len(tensor_args) >= 2:
            for j in tensor_args:
                if all(torch.equal(t.args[j], o.args[j]) for t, o in zip(trials, nxt)):
                    continue  # the same values for every seed: nothing fresh to swap in
                passed, worst = self._all_pass(
                    ((lambda t=t, o=o: _forward(self.model, _swap(t.args, j, o.args[j]), t.seed)), t.reply)
                    for t, o in zip(trials, nxt))
                if passed:
                    a = trials[0].args[j]
                    self._add("ignores_inputs", dist, f"input {j} ({tuple(a.shape)}, {a.dtype}) replaced by fresh "
                                                      f"values leaves the outputs passing (worst error ratio "
                                                      f"{worst:.3g})", f"input {j}")
        for name, p in self.model.named_parameters():
            if not p.is_floating_point():
                continue
            passed, worst = self._all_pass(
                ((lambda t=t, p=p: self._with_param(p, _fresh_like(p, t.seed ^ 0x5EED), t)), t.reply)
                for t in trials)
            if passed:
                self._add("ignores_weights", dist, f"parameter {name} {tuple(p.shape)} re-drawn leaves the outputs "
                                                   f"passing (worst error ratio {worst:.3g})", f"parameter {name}")

    def _with_param(self, p: torch.nn.Parameter, value: torch.Tensor, trial: _Trial) -> Reply:
        saved = p.detach().clone()
        with torch.no_grad():
            p.copy_(value)
        try:
            return _forward(self.model, trial.args, trial.seed)
        finally:
            with torch.no_grad():
                p.copy_(saved)


def _swap(args: list[Any], j: int, value: Any) -> list[Any]:
    out = list(args)
    out[j] = value
    return out


def split_findings(findings: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    """(findings, notes): a check that holds on D1 for some subject is a finding on every distribution it holds on,
    as is every ``degenerate`` and ``error``; the rest hold only on D2-D6 and are notes."""
    on_timed = {(f.check, f.subject) for f in findings if f.distribution == TIMED_DISTRIBUTION}
    keep, notes = [], []
    for f in findings:
        flagging = f.check in ("degenerate", "error") or f.distribution is None or (f.check, f.subject) in on_timed
        (keep if flagging else notes).append(f)
    return keep, notes


def screen(path: str | Path, device: str, precision: str, profile: str | None, seeds: int) -> LintResult:
    """Run every check on one problem in this process (``lint_problem`` runs it in a child process)."""
    start = time.monotonic()
    problem = load_problem(path)
    s = _Screen(problem, device, precision, profile, seeds)
    s.run()
    findings, notes = split_findings(s.findings)
    return LintResult(problem.key, str(problem.path), findings, notes, skipped=dict(problem.skip),
                      standard_only=s.standard_only, profile=profile, seconds=round(time.monotonic() - start, 3))


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
        found = [f for f in (list(root.glob("level*/*.py")) or list(root.glob("*.py"))) if _PROBLEM_NAME.match(f.name)]
        files.extend(sorted(found, key=_order))
    return files


def _order(f: Path) -> tuple[int, int]:
    """Level, then id (as ``kbv.problems.discover``)."""
    level = f.parent.name.removeprefix("level")
    return (int(level) if level.isdigit() else 0, int(f.name.split("_", 1)[0]))


def _error(problem: str, path: Path, message: str, seconds: float = 0.0) -> LintResult:
    return LintResult(problem, str(path), [Finding("error", None, message)], error=message, seconds=seconds)


def lint_problem(path: str | Path, options: LintOptions, device: str) -> LintResult:
    """Screen one problem in a fresh ``python -m kbv.lint --one`` process; failures become an ``error`` entry."""
    path = Path(path).resolve()
    try:
        problem = load_problem(path)
    except (ProblemFormatError, OSError) as exc:
        return _error(path.stem, path, f"{type(exc).__name__}: {exc}")
    profile = options.resolved_profile(device, problem)
    threads = max(1, (os.cpu_count() or 1) // max(1, options.jobs))
    with tempfile.TemporaryDirectory(prefix="kbv-lint-") as tmp:
        result_file = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "kbv.lint", "--one", str(path), "--result", str(result_file),
               "--device", device, "--precision", options.precision, "--seeds", str(options.seeds),
               "--threads", str(threads)] + (["--profile", profile] if profile else [])
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=options.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return _error(problem.key, path, f"timed out after {options.timeout:g} s", time.monotonic() - start)
        finally:
            _kill_group(proc)  # anything the problem left running in its session
        elapsed = time.monotonic() - start
        if result_file.is_file():
            data = json.loads(result_file.read_text())
            if "error" in data and "findings" not in data:
                return _error(problem.key, path, data["error"], elapsed)
            data.pop("ok", None)
            result = LintResult(**{**data, "findings": [Finding(**f) for f in data["findings"]],
                                   "notes": [Finding(**f) for f in data["notes"]]})
            if options.strict:
                result.findings, result.notes = result.findings + result.notes, []
            return result
        tail = stderr.decode(errors="replace").strip().splitlines()[-5:]
        return _error(problem.key, path, f"the lint process exited with code {proc.returncode}: " + " | ".join(tail),
                      elapsed)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def lint(targets: Iterable[str | Path], options: LintOptions,
         on_result: Callable[[LintResult], None] | None = None) -> list[LintResult]:
    """Screen every problem named by ``targets``; results in the order of the files."""
    from kbv import envinfo

    if options.precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}")
    device = envinfo.resolve_device(options.device)
    files = collect(targets)

    def one(path: Path) -> LintResult:
        result = lint_problem(path, options, device)
        if on_result:
            on_result(result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        return list(pool.map(one, files))


def _child(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kbv.lint", description="Screen one problem (kbv lint's worker).")
    parser.add_argument("--one", required=True, help="the problem file")
    parser.add_argument("--result", required=True, help="where to write the JSON result")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS)
    parser.add_argument("--profile", default=None)
    parser.add_argument("--seeds", type=int, default=DEFAULT_TRIALS_PER_DISTRIBUTION)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    out = Path(args.result)
    try:
        result = screen(args.one, args.device, args.precision, args.profile, args.seeds).to_json()
    except BaseException as exc:  # noqa: BLE001 - any failure of problem code is reported, not raised
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
        out.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}{where}"}))
        return 1
    out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_child())
