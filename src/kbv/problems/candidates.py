"""Candidates: files defining ``ModelNew``, their hashes, and their pairing with problems."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from kbv.problems.files import Problem

_GENERATION_NAME = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")


@dataclass(frozen=True)
class Candidate:
    path: Path
    sha256: str
    sample: int = 0

    @classmethod
    def from_path(cls, path: str | Path, sample: int = 0) -> "Candidate":
        path = Path(path).resolve()
        return cls(path=path, sha256=hashlib.sha256(path.read_bytes()).hexdigest(), sample=sample)


@dataclass(frozen=True)
class Pair:
    problem: Problem
    candidate: Candidate

    @property
    def key(self) -> tuple[str, str, int]:
        """What --resume matches on: the problem, the candidate's content and its sample number."""
        return (self.problem.key, self.candidate.sha256, self.candidate.sample)


def pair_candidates(problems: list[Problem], candidate_dirs: list[Path]) -> tuple[list[Pair], list[Path]]:
    """Pair candidate files with problems.

    A candidate named ``level_<L>_problem_<id>_sample_<s>_kernel.py`` (KernelBench's generation layout) pairs with
    the problem of that level and id, as sample ``s``; a candidate with the same file name as a problem (in a
    ``level<L>/`` folder when the level matters) pairs with it as sample 0. Returns the pairs and the files that
    matched no problem.
    """
    by_level_id = {(p.level or 0, p.problem_id): p for p in problems}
    by_name: dict[str, list[Problem]] = {}
    for p in problems:
        by_name.setdefault(p.path.name, []).append(p)
    pairs: list[Pair] = []
    unmatched: list[Path] = []
    for directory in candidate_dirs:
        for path in sorted(Path(directory).rglob("*.py")):
            gen = _GENERATION_NAME.match(path.name)
            problem: Problem | None = None
            sample = 0
            if gen:
                problem = by_level_id.get((int(gen.group(1)), int(gen.group(2))))
                sample = int(gen.group(3))
            elif path.name in by_name:
                same_name = by_name[path.name]
                level_dir = re.match(r"^level(\d+)$", path.parent.name)
                if level_dir:
                    same_name = [p for p in same_name if p.level == int(level_dir.group(1))]
                problem = same_name[0] if len(same_name) == 1 else None
            if problem is None:
                unmatched.append(path)
                continue
            pairs.append(Pair(problem, Candidate.from_path(path, sample)))
    pairs.sort(key=lambda pr: (pr.problem.level or 0, pr.problem.problem_id, pr.candidate.sample, str(pr.candidate.path)))
    return pairs, unmatched


def write_reference_candidate(problem: Problem, folder: str | Path) -> Path:
    """Write the problem's own ``Model`` as a candidate (``class ModelNew(Model)``), in the generation layout.

    Evaluating it checks the harness itself: it must be ``correct`` with speedups near 1.0 under both baselines.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"level_{problem.level or 0}_problem_{problem.problem_id}_sample_0_kernel.py"
    path.write_text(reference_candidate_text(problem.path.read_text()))
    return path


def reference_candidate_text(source: str) -> str:
    """A problem's source (``source``) as the text of its own candidate (``write_reference_candidate``): its hash
    tells a record of the reference against itself from one of a custom kernel."""
    return f"{source}\n\nclass ModelNew(Model):\n    \"\"\"The reference itself, as a candidate.\"\"\"\n"
