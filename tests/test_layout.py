"""The package layout shows the trust boundary: worker-side code (``kbv.worker``: everything that runs inside a
worker process) imports only itself and the shared, data-only modules; nothing parent-side imports it, except the
launcher naming its entry point; and no module imports another that imports it back (no cycles)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
# Shared by both sides: constants, the data-only channel, records, the tolerance policy, statistics, data types.
SHARED = {"kbv.protocol", "kbv.wire", "kbv.records", "kbv.attest", "kbv.judge", "kbv.judge_fused", "kbv.stats",
          "kbv.counts",
          "kbv.fallback.ops", "kbv._version", "kbv.files"}
# The one parent-side module allowed to name worker code: the launcher starts the worker's entry point.
LAUNCH_EDGES = {("kbv.sandbox.launch", "kbv.worker.session")}


def _modules() -> dict[str, Path]:
    out = {}
    for f in (SRC / "kbv").rglob("*.py"):
        if {"suites", "examples"} & set(f.relative_to(SRC).parts):
            continue
        name = ".".join(f.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        out[name] = f
    return out


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Every kbv module each module imports, at top level or inside functions (a lazy import is still a dependency).
    The package facade ``kbv`` (lazy attribute access for library users) is left out as an importer."""
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kbv") and not node.level:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    deps.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("kbv"))
        edges[name] = {d for d in deps if d in modules and d != name}
    edges["kbv"] = set()
    return edges


EDGES = _imports(_modules())


def _is_worker(name: str) -> bool:
    return name == "kbv.worker" or name.startswith("kbv.worker.")


def test_worker_side_imports_only_worker_and_shared_modules() -> None:
    bad = {n: sorted(d for d in deps if not (_is_worker(d) or d in SHARED or d == "kbv"))
           for n, deps in EDGES.items() if _is_worker(n)}
    assert not {n: d for n, d in bad.items() if d}, "worker-side code importing parent-side code"


def test_shared_modules_import_no_side() -> None:
    bad = {n: sorted(d for d in EDGES[n] if d not in SHARED) for n in SHARED if n in EDGES}
    assert not {n: d for n, d in bad.items() if d}


def test_parent_side_imports_worker_code_only_to_launch_it() -> None:
    bad = sorted((n, d) for n, deps in EDGES.items() if not _is_worker(n)
                 for d in deps if _is_worker(d) and (n, d) not in LAUNCH_EDGES)
    assert not bad, f"parent-side modules importing worker code: {bad}"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    assert _cycles(EDGES) == []


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
])
def test_cycle_finder_finds_cycles(edges: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert _cycles(edges) == expected


def test_kbv_children_import_the_same_kbv() -> None:
    """Helper processes run ``python -m kbv...``: their environment puts kbv's import root first, also where kbv is
    not installed (the GPU machine runs from a checkout)."""
    import os

    from kbv import proc

    env = proc.kbv_env({"PYTHONPATH": "/somewhere" + os.pathsep + proc.KBV_ROOT})
    assert env["PYTHONPATH"].split(os.pathsep) == [proc.KBV_ROOT, "/somewhere"]
    assert (Path(proc.KBV_ROOT) / "kbv" / "__init__.py").is_file()


def test_readme_layout_names_every_package_and_module() -> None:
    """The README's "Layout" block matches the tree: every package appears as ``name/`` and every module by name."""
    import re
    block = (SRC.parent / "README.md").read_text().split("## Layout", 1)[1].split("```")[1]
    words = set(re.findall(r"[A-Za-z_]+", block))
    root = SRC / "kbv"
    missing = sorted(str(f.relative_to(root)) for f in root.rglob("*.py")
                     if not {"suites", "examples"} & set(f.relative_to(root).parts)
                     and f.stem not in ("__init__", "__main__") and f.stem not in words)
    missing += sorted(f"{d.name}/" for d in root.iterdir() if (d / "__init__.py").exists() and f"{d.name}/" not in block)
    assert not missing, f"not in the README's Layout section: {missing}"
