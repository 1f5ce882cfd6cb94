"""Worker side of ``kbv lint``: the problem screen, run in its own process per problem (``python -m
kbv.worker.screen``) because it executes problem code. It writes raw findings as JSON; the trusted parent
(``kbv.lint``) sorts them into findings and notes and reports them. The checks are described in ``kbv.lint``."""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from kbv import judge
from kbv.protocol import DEFAULT_TRIALS_PER_DISTRIBUTION, DISTRIBUTIONS, PRECISIONS, TIMED_DISTRIBUTION
from kbv.worker import inputs, loading

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

    def __init__(self, path: str | Path, facts: dict[str, Any], device: str, precision: str, profile: str | None,
                 seeds: int):
        self.path, self.facts, self.device, self.precision, self.seeds = Path(path), facts, device, precision, \
            max(2, seeds)
        self.module = loading.load_problem_module(self.path, profile)
        self.model = loading.build_model(self.module.Model, loading.init_inputs(self.module), secrets.randbits(63),
                                         device, precision, facts["mode"])
        self.findings: list[dict[str, Any]] = []
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
            if dist.name in self.facts["skip"]:
                continue
            trials = []
            for _ in range(self.seeds):
                seed = secrets.randbits(63)
                args = inputs.make_inputs(self.module, seed, self.device, self.precision, dist,
                                          tuple(self.facts["unscaled"]))
                trials.append(_Trial(seed, args, _forward(self.model, args, seed)))
            self._degenerate(dist.name, trials)
            if dist.name == TIMED_DISTRIBUTION:
                self._stochastic(trials[0])
            self._fixed_cheats(dist.name, trials)
            if dist.name == TIMED_DISTRIBUTION or not self._same_constant(trials):
                self._dependence(dist.name, trials)

    def _add(self, check: str, dist: str, detail: str, subject: str | None = None) -> None:
        self.findings.append({"check": check, "distribution": dist, "detail": detail, "subject": subject})

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


def screen(path: str | Path, facts: dict[str, Any], device: str, precision: str, profile: str | None,
           seeds: int) -> dict[str, Any]:
    """Every check on one problem in this process; raw findings (``kbv.lint.result_from_raw`` sorts them)."""
    start = time.monotonic()
    s = _Screen(path, facts, device, precision, profile, seeds)
    s.run()
    return {"problem": facts["key"], "path": str(Path(path).resolve()), "raw_findings": s.findings,
            "skipped": dict(facts["skip"]), "standard_only": s.standard_only, "profile": profile,
            "seconds": round(time.monotonic() - start, 3)}


def _child(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kbv.worker.screen", description="Screen one problem (kbv lint's worker).")
    parser.add_argument("--one", required=True, help="the problem file")
    parser.add_argument("--result", required=True, help="where to write the JSON result")
    parser.add_argument("--facts", required=True, help="the problem's skips, mode and unscaled inputs as JSON")
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
        result = screen(args.one, json.loads(args.facts), args.device, args.precision, args.profile, args.seeds)
    except BaseException as exc:  # noqa: BLE001 - any failure of problem code is reported, not raised
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
        out.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}{where}"}))
        return 1
    out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_child())
