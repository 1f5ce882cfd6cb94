"""docs/security.md's coverage table stays true: one row per catalog hack, a known status, a reason where nothing is
tested, and only tests that exist.

The catalog IDs come from the summary table of ``shared/docs/hack-catalog.md`` when a copy of ``shared/`` sits beside
the repository (as on CI) or inside it; otherwise from the constant list below, which the first test keeps in step
with the catalog whenever the catalog is present.
"""

from __future__ import annotations

import ast
import json
import re
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "security.md"
CATALOG_PATHS = (ROOT.parent / "shared" / "docs" / "hack-catalog.md", ROOT / "shared" / "docs" / "hack-catalog.md")
COVERAGE_HEADING = "## Coverage by catalog ID"
STATUSES = ("covered", "partial", "open", "n/a")
NO_TEST = {"", "—", "-", "–", "none"}

# The catalog's summary table, in order (used when the catalog is not on disk).
CATALOG_IDS = (
    [f"T{i}" for i in range(1, 15)]
    + [f"M{i}" for i in range(1, 7)]
    + [f"C{i}" for i in range(1, 17)]
    + [f"F{i}" for i in range(1, 7)]
    + [f"E{i}" for i in range(1, 6)]
    + [f"B{i}" for i in range(1, 3)]
)

_ID = re.compile(r"^[A-Z]\d+$")
_TEST_REF = re.compile(r"tests/[\w./-]+\.py::[\w:]+(?:\[[^\]\s`]*\])?")


def _catalog_file() -> Path | None:
    return next((p for p in CATALOG_PATHS if p.is_file()), None)


def _catalog_ids_from(path: Path) -> list[str]:
    """IDs of the rows of the catalog's summary table (the section headed "Summary table"), in order."""
    ids: list[str] = []
    in_summary = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            if in_summary:
                break
            in_summary = "summary table" in line.lower()
            continue
        if in_summary and line.startswith("|"):
            first = line.strip().strip("|").split("|")[0].strip()
            if _ID.match(first):
                ids.append(first)
    return ids


def catalog_ids() -> list[str]:
    path = _catalog_file()
    if path is None:
        return list(CATALOG_IDS)
    ids = _catalog_ids_from(path)
    assert ids, f"no IDs found in the summary table of {path}"
    return ids


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _plain(cell: str) -> str:
    return cell.replace("`", "").replace("*", "").strip()


@lru_cache(maxsize=1)
def coverage_rows() -> list[dict[str, str]]:
    """The rows of the first table after the coverage heading, as dicts keyed by column."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == COVERAGE_HEADING), None)
    assert start is not None, f"{DOC} has no {COVERAGE_HEADING!r} section"
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            if header is not None and rows:
                break  # the table ended
            continue
        cells = _cells(line)
        if header is None:
            header = [_plain(c).lower() for c in cells]
            assert header[:3] == ["id", "hack", "status"] and len(header) == 5, header
            continue
        if set("".join(cells)) <= set("-: "):
            continue  # the separator row
        assert len(cells) == len(header), f"row with {len(cells)} cells, expected {len(header)}: {line}"
        rows.append({"id": _plain(cells[0]), "hack": cells[1], "status": _plain(cells[2]).lower(),
                     "reason": cells[3], "tests": cells[4], "line": line})
    assert rows, "the coverage table is empty"
    return rows


def test_constant_id_list_matches_the_catalog_when_present() -> None:
    path = _catalog_file()
    if path is None:
        pytest.skip("no copy of shared/docs/hack-catalog.md beside the repository")
    assert _catalog_ids_from(path) == CATALOG_IDS, "update CATALOG_IDS (and docs/security.md) to the catalog"


def test_every_catalog_id_appears_exactly_once_in_catalog_order() -> None:
    ids = [row["id"] for row in coverage_rows()]
    expected = catalog_ids()
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, f"IDs listed more than once: {duplicates}"
    assert not set(expected) - set(ids), f"catalog IDs missing from the table: {sorted(set(expected) - set(ids))}"
    assert not set(ids) - set(expected), f"IDs not in the catalog: {sorted(set(ids) - set(expected))}"
    assert ids == expected, "rows are not in catalog order"


def test_every_status_is_known() -> None:
    bad = {row["id"]: row["status"] for row in coverage_rows() if row["status"] not in STATUSES}
    assert not bad, f"statuses must be one of {STATUSES}: {bad}"


def test_covered_and_partial_rows_name_tests() -> None:
    bare = [row["id"] for row in coverage_rows()
            if row["status"] in ("covered", "partial") and not _TEST_REF.findall(row["tests"])]
    assert not bare, f"covered/partial rows without a test: {bare}"


def test_open_and_not_applicable_rows_give_a_reason() -> None:
    bare = [row["id"] for row in coverage_rows()
            if row["status"] in ("open", "n/a") and _plain(row["reason"]).lower() in NO_TEST]
    assert not bare, f"open/n/a rows without a reason: {bare}"


def test_tests_column_holds_only_test_references() -> None:
    """Anything in the tests column other than test references (or a dash) is a typo the regex would skip."""
    odd = {}
    for row in coverage_rows():
        rest = _TEST_REF.sub("", row["tests"]).replace("`", "").replace(",", "").replace("<br>", "").strip()
        if rest.lower() not in NO_TEST:
            odd[row["id"]] = rest
    assert not odd, f"unrecognised text in the tests column: {odd}"


def test_counts_line_matches_the_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(r"Counts: (\d+) covered, (\d+) partial, (\d+) open, (\d+) n/a", text)
    assert match, "docs/security.md has no 'Counts: …' line"
    statuses = [row["status"] for row in coverage_rows()]
    in_table = [statuses.count(s) for s in STATUSES]
    assert [int(n) for n in match.groups()] == in_table, f"the table has {dict(zip(STATUSES, in_table))}"


# ---------------------------------------------------------------------------------------------------------------
# Every test the page names exists


@lru_cache(maxsize=None)
def _module(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _definitions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Top-level test functions by name, and methods of top-level classes as ``Class::method``."""
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[f"{node.name}::{item.name}"] = item
    return found


def _constants(tree: ast.Module) -> set[str]:
    return {str(node.value) for node in ast.walk(tree) if isinstance(node, ast.Constant)}


def _manifest_ids(location: str) -> set[str]:
    """The adversarial corpus is parametrized from tests/candidates/MANIFEST.json: its ids are its parameters."""
    if not location.startswith("tests/test_adversarial"):
        return set()
    manifest = ROOT / "tests" / "candidates" / "MANIFEST.json"
    return {e["id"] for e in json.loads(manifest.read_text(encoding="utf-8"))["entries"]}


def _problem(ref: str) -> str | None:
    """Why a ``tests/file.py::name[param]`` reference does not resolve, or None when it does."""
    location, _, name = ref.partition("::")
    param = None
    if name.endswith("]") and "[" in name:
        name, param = name[:-1].split("[", 1)
    path = ROOT / location
    if not path.is_file():
        return f"{location} does not exist"
    tree = _module(path)
    function = _definitions(tree).get(name)
    if function is None:
        return f"{location} defines no {name}"
    if param is not None:
        if not any("parametrize" in ast.unparse(d) for d in function.decorator_list):
            return f"{name} is not parametrized, but the page names {ref}"
        constants = _constants(tree) | _manifest_ids(location)
        if param not in constants and not all(part in constants for part in param.split("-")):
            return f"no parameter {param!r} in {location}"
    return None


def _page_refs() -> list[str]:
    return sorted(set(_TEST_REF.findall(DOC.read_text(encoding="utf-8"))))


def test_page_names_tests() -> None:
    assert len(_page_refs()) >= 10


@pytest.mark.parametrize("ref", _page_refs())
def test_named_test_exists(ref: str) -> None:
    problem = _problem(ref)
    assert problem is None, problem


def test_the_existence_check_can_fail() -> None:
    """The checker is not vacuous: missing files, functions and parameters are refused."""
    assert _problem("tests/test_verdicts.py::test_verdict[background_thread.py]") is None
    assert _problem("tests/test_verdicts.py::test_verdict") is None
    assert _problem("tests/test_no_such_file.py::test_x") is not None
    assert _problem("tests/test_verdicts.py::test_no_such_test") is not None
    assert _problem("tests/test_verdicts.py::test_verdict[no_such_candidate.py]") is not None
    assert _problem("tests/test_verdicts.py::test_crash_is_explained[os_exit.py]") is not None
