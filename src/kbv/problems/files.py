"""Problems: KernelBench-format files and suites of them.

The parent reads a problem's metadata with ``ast`` (its ``KBV_*`` declarations are literals) and never executes it;
problem code runs only inside worker processes (see ``kbv.worker.loading``).
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from kbv.protocol import DISTRIBUTION_NAMES

PROBLEM_NAME = re.compile(r"^(\d+)_(\w+)\.py$")
_LEVEL_DIR = re.compile(r"^level(\d+)$")
BUILTIN_SUITE = "builtin"


class ProblemFormatError(ValueError):
    """A problem file that does not follow the format (name, required definitions, KBV_* declarations)."""


@dataclass(frozen=True)
class Problem:
    path: Path
    problem_id: int
    name: str
    level: int | None
    source_sha256: str
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    skip: dict[str, str] = field(default_factory=dict)
    unscaled_inputs: tuple[int, ...] = ()
    mode: str = "train"
    shapes: tuple[dict[str, Any], ...] = ()  # KBV_SHAPES: module-constant overrides, one per shape
    held_out_shapes: tuple[dict[str, Any], ...] = ()  # from the suite's evaluator/heldout.json, never in the file

    def shape_overrides(self) -> list[tuple[int, dict[str, Any] | None, bool]]:
        """Every shape to evaluate, as (index, overrides, held out): the file's own constants alone (overrides None)
        for a single-shape problem; else KBV_SHAPES in order, then the held-out shapes."""
        visible: list[tuple[int, dict[str, Any] | None, bool]] = \
            [(i, dict(o), False) for i, o in enumerate(self.shapes)] or [(0, None, False)]
        return visible + [(len(visible) + i, dict(o), True) for i, o in enumerate(self.held_out_shapes)]

    @property
    def key(self) -> str:
        """Stable identifier used in records: ``level<L>/<file stem>`` (or the stem alone outside a level folder)."""
        stem = self.path.stem
        return f"level{self.level}/{stem}" if self.level is not None else stem


def _literal(tree: ast.Module, name: str, default: Any) -> Any:
    """The value of a module-level literal assignment (the last one, as Python would see it)."""
    for node in reversed(tree.body):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
            try:
                return ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                raise ProblemFormatError(f"{name} must be a literal") from None
    return default


def load_problem(path: str | Path) -> Problem:
    path = Path(path).resolve()
    match = PROBLEM_NAME.match(path.name)
    if not match:
        raise ProblemFormatError(f"{path.name}: a problem file is named <id>_<Name>.py")
    source = path.read_bytes()
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ProblemFormatError(f"{path}: {exc}") from None
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = {"Model", "get_inputs", "get_init_inputs"} - defined
    if missing:
        raise ProblemFormatError(f"{path.name}: missing {', '.join(sorted(missing))}")
    level_match = _LEVEL_DIR.match(path.parent.name)
    skip = _literal(tree, "KBV_SKIP", {})
    profiles = _literal(tree, "KBV_PROFILES", {})
    unscaled = _literal(tree, "KBV_UNSCALED_INPUTS", ())
    if not isinstance(skip, dict) or not all(isinstance(v, str) for v in skip.values()):
        raise ProblemFormatError(f"{path.name}: KBV_SKIP must map distribution names to reasons")
    if not isinstance(profiles, dict) or not all(isinstance(k, str) and isinstance(v, dict)
                                                  and all(isinstance(n, str) for n in v)
                                                  for k, v in profiles.items()):
        raise ProblemFormatError(f"{path.name}: KBV_PROFILES must map profile names to {{constant: value}} dicts")
    if not isinstance(unscaled, (list, tuple)) or not all(type(i) is int for i in unscaled):
        raise ProblemFormatError(f"{path.name}: KBV_UNSCALED_INPUTS must be a list of input positions")
    unknown = set(skip) - set(DISTRIBUTION_NAMES)
    if unknown or "D1" in skip:
        raise ProblemFormatError(f"{path.name}: KBV_SKIP may name only D2-D6, got {sorted(skip)}")
    shapes = _literal(tree, "KBV_SHAPES", [])
    if not isinstance(shapes, (list, tuple)) or not all(isinstance(o, dict) and all(isinstance(k, str) for k in o)
                                                        for o in shapes):
        raise ProblemFormatError(f"{path.name}: KBV_SHAPES must be a list of {{constant: value}} dicts")
    mode = _literal(tree, "KBV_MODE", "train")
    if mode not in ("train", "eval"):
        raise ProblemFormatError(f"{path.name}: KBV_MODE must be 'train' or 'eval'")
    return Problem(
        path=path,
        problem_id=int(match.group(1)),
        name=match.group(2),
        level=int(level_match.group(1)) if level_match else None,
        source_sha256=hashlib.sha256(source).hexdigest(),
        profiles=dict(profiles),
        skip=dict(skip),
        unscaled_inputs=tuple(unscaled),
        mode=mode,
        shapes=tuple(dict(o) for o in shapes),
    )


def builtin_suite_dir() -> Path:
    return Path(str(resources.files("kbv") / "suites" / BUILTIN_SUITE))


def resolve_suite(suite: str | Path | None) -> Path:
    """A suite folder: a path, or the name of a suite shipped in the package."""
    if suite is None or str(suite) == BUILTIN_SUITE:
        return builtin_suite_dir()
    path = Path(suite)
    if path.is_dir():
        return path
    shipped = Path(str(resources.files("kbv") / "suites" / str(suite)))
    if shipped.is_dir():
        return shipped
    raise FileNotFoundError(f"no suite folder or shipped suite named {suite!r}")


def shipped_suites() -> list[str]:
    root = Path(str(resources.files("kbv") / "suites"))
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def discover(suite_dir: str | Path, skipped: list[tuple[Path, str]] | None = None) -> list[Problem]:
    """Every problem file under a suite folder (``level*/`` folders, or the folder itself), ordered by level and id.
    A malformed problem file raises ``ProblemFormatError``; given a ``skipped`` list, it is left out and listed
    there as (path, reason) instead."""
    root = Path(suite_dir)
    files = sorted(root.glob("level*/*.py")) or sorted(root.glob("*.py"))
    problems = []
    for f in files:
        if not PROBLEM_NAME.match(f.name):
            continue
        try:
            problems.append(load_problem(f))
        except ProblemFormatError as exc:
            if skipped is None:
                raise
            skipped.append((f, str(exc)))
    held_out = held_out_shapes(root)
    problems = [replace(p, held_out_shapes=tuple(held_out[p.key])) if p.key in held_out else p for p in problems]
    return sorted(problems, key=lambda p: (p.level or 0, p.problem_id))


def load_problem_in_suite(path: str | Path) -> Problem:
    """A problem file given alone, with the held-out shapes of the suite it sits in (``<suite>/level<L>/<file>``,
    the suite's ``evaluator/heldout.json``), if any: the same shapes as when its suite is evaluated whole."""
    problem = load_problem(path)
    if problem.level is not None:
        held = held_out_shapes(problem.path.parent.parent).get(problem.key)
        if held:
            problem = replace(problem, held_out_shapes=tuple(held))
    return problem


def held_out_shapes(suite_dir: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Held-out shapes per problem key from the suite's evaluator side (``evaluator/heldout.json``), if any."""
    path = Path(suite_dir) / "evaluator" / "heldout.json"
    if not path.is_file():
        return {}
    from kbv.tracesuite.weights import load_heldout

    return load_heldout(path)


def resolve_profile(profile: str | None, device: str, problem: Problem) -> str | None:
    """The size profile a problem runs at: ``auto`` is its ``small`` profile on the CPU (where it has one) and its
    default sizes on a GPU; ``None`` or ``default`` is always the default sizes; any other name is that profile."""
    if profile == "auto":
        return "small" if device == "cpu" and "small" in problem.profiles else None
    return None if profile in (None, "default") else profile
