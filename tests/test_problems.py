"""kbv.problems (problem files, suites) and kbv.problems.candidates (pairing candidates with problems)."""

from __future__ import annotations

import ast
import importlib.util
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import torch

from kbv.problems.candidates import Candidate, pair_candidates, write_reference_candidate
from kbv.problems import (
    Problem, ProblemFormatError, builtin_suite_dir, discover, load_problem, resolve_suite, shipped_suites,
)

BASE = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, x):
            return torch.relu(x)


    n = 8


    def get_inputs():
        return [torch.rand(n)]


    def get_init_inputs():
        return []
    """)


def write_problem(folder: Path, name: str, extra: str = "", source: str = BASE) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(source + "\n" + textwrap.dedent(extra))
    return path


@pytest.fixture(scope="module")
def builtin() -> list[Problem]:
    return discover(builtin_suite_dir())


def by_key(problems: list[Problem]) -> dict[str, Problem]:
    return {p.key: p for p in problems}


# ---------------------------------------------------------------------------------------------------------------
# The built-in suite


def test_builtin_suite_has_enough_problems_per_level(builtin):
    counts = Counter(p.level for p in builtin)
    assert counts[1] >= 15
    assert counts[2] >= 10
    assert counts[3] >= 5
    assert set(counts) == {1, 2, 3}


def test_builtin_problems_all_have_a_small_profile(builtin):
    missing = [p.key for p in builtin if "small" not in p.profiles]
    assert missing == []
    for p in builtin:
        assert isinstance(p.profiles["small"], dict) and p.profiles["small"], p.key


def test_builtin_problems_are_unique_by_level_and_id(builtin):
    ids = Counter((p.level, p.problem_id) for p in builtin)
    assert [k for k, n in ids.items() if n > 1] == []
    assert len({p.key for p in builtin}) == len(builtin)


def test_builtin_problems_are_ordered_by_level_then_numeric_id(builtin):
    order = [(p.level, p.problem_id) for p in builtin]
    assert order == sorted(order)
    level1 = [p.problem_id for p in builtin if p.level == 1]
    assert level1.index(2) < level1.index(10)  # numeric, not lexicographic


def test_builtin_relu_problem_fields(builtin):
    relu = by_key(builtin)["level1/5_ReLU"]
    assert relu.problem_id == 5
    assert relu.name == "ReLU"
    assert relu.level == 1
    assert relu.path.name == "5_ReLU.py" and relu.path.is_absolute()
    assert relu.profiles["small"] == {"batch_size": 64, "dim": 1024}
    assert relu.skip == {}
    assert relu.mode == "train"
    assert len(relu.source_sha256) == 64
    assert relu.source_sha256 == load_problem(relu.path).source_sha256


def test_builtin_skip_declaration_is_read(builtin):
    skips = {p.key: p.skip for p in builtin if p.skip}
    assert "D4" in skips.get("level1/19_KLDivLoss", {})
    for key, skip in skips.items():
        assert set(skip) <= {"D2", "D3", "D4", "D5", "D6"}, key


def test_builtin_suite_is_shipped_and_resolvable():
    assert "builtin" in shipped_suites()
    assert resolve_suite(None) == builtin_suite_dir()
    assert resolve_suite("builtin") == builtin_suite_dir()
    with pytest.raises(FileNotFoundError):
        resolve_suite("no-such-suite-anywhere")


# ---------------------------------------------------------------------------------------------------------------
# load_problem


def test_load_problem_reads_kbv_declarations(tmp_path):
    path = write_problem(tmp_path / "level2", "12_Custom_Thing.py", """
        KBV_PROFILES = {"small": {"n": 4}, "tiny": {"n": 1}}
        KBV_SKIP = {"D3": "tiny inputs underflow", "D4": "negative inputs are invalid"}
        KBV_UNSCALED_INPUTS = [1, 2]
        KBV_MODE = "eval"
        """)
    p = load_problem(path)
    assert p.problem_id == 12
    assert p.name == "Custom_Thing"
    assert p.level == 2
    assert p.key == "level2/12_Custom_Thing"
    assert p.profiles == {"small": {"n": 4}, "tiny": {"n": 1}}
    assert p.skip == {"D3": "tiny inputs underflow", "D4": "negative inputs are invalid"}
    assert p.unscaled_inputs == (1, 2)
    assert p.mode == "eval"


def test_load_problem_defaults(tmp_path):
    p = load_problem(write_problem(tmp_path / "level1", "3_Plain.py"))
    assert p.profiles == {}
    assert p.skip == {}
    assert p.unscaled_inputs == ()
    assert p.mode == "train"


def test_load_problem_accepts_annotated_declarations(tmp_path):
    p = load_problem(write_problem(tmp_path / "level1", "3_Annotated.py", """
        KBV_UNSCALED_INPUTS: tuple = (0,)
        KBV_MODE: str = "eval"
        """))
    assert p.unscaled_inputs == (0,)
    assert p.mode == "eval"


def test_source_hash_changes_with_content(tmp_path):
    a = load_problem(write_problem(tmp_path / "a" / "level1", "1_X.py"))
    b = load_problem(write_problem(tmp_path / "b" / "level1", "1_X.py", "# a comment\n"))
    assert a.source_sha256 != b.source_sha256
    assert a.key == b.key == "level1/1_X"


def test_problem_key_format(tmp_path):
    assert load_problem(write_problem(tmp_path / "level3", "42_Big_Net.py")).key == "level3/42_Big_Net"
    flat = load_problem(write_problem(tmp_path / "flat", "7_Flat.py"))
    assert flat.level is None
    assert flat.key == "7_Flat"
    # a folder that is not level<digits> gives no level
    assert load_problem(write_problem(tmp_path / "levelx", "8_Odd.py")).level is None
    assert load_problem(write_problem(tmp_path / "level10", "8_Odd.py")).key == "level10/8_Odd"


@pytest.mark.parametrize("name", ["ReLU.py", "5-ReLU.py", "5_ReLU.txt", "x5_ReLU.py", "5_.py", "5_Re LU.py",
                                  "level_1_problem_5_sample_0_kernel.py"])
def test_load_problem_rejects_badly_named_file(tmp_path, name):
    path = write_problem(tmp_path / "level1", name)
    with pytest.raises(ProblemFormatError):
        load_problem(path)


@pytest.mark.parametrize("missing", ["get_inputs", "get_init_inputs", "Model"])
def test_load_problem_rejects_missing_definition(tmp_path, missing):
    source = BASE.replace(f"def {missing}(", f"def renamed_{missing}(").replace(f"class {missing}(", "class Renamed(")
    assert missing not in {n.name for n in ast.parse(source).body if hasattr(n, "name")}
    path = write_problem(tmp_path / "level1", "1_Missing.py", source=source)
    with pytest.raises(ProblemFormatError, match=missing):
        load_problem(path)


def test_load_problem_rejects_definition_only_as_a_variable(tmp_path):
    # get_inputs must be a function definition, not e.g. a name bound to a lambda
    source = BASE.replace("def get_inputs():\n    return [torch.rand(n)]", "get_inputs = lambda: [torch.rand(n)]")
    assert "def get_inputs" not in source
    with pytest.raises(ProblemFormatError, match="get_inputs"):
        load_problem(write_problem(tmp_path / "level1", "1_Lambda.py", source=source))


def test_load_problem_rejects_syntax_error(tmp_path):
    with pytest.raises(ProblemFormatError):
        load_problem(write_problem(tmp_path / "level1", "1_Broken.py", "def oops(:\n"))


@pytest.mark.parametrize("skip", [
    '{"D1": "the standard distribution cannot be skipped"}',
    '{"D1": "a", "D2": "b"}',
    '{"D7": "no such distribution"}',
    '{"d2": "wrong case"}',
    '{"D2": "fine", "bogus": "not fine"}',
])
def test_load_problem_rejects_bad_skip(tmp_path, skip):
    path = write_problem(tmp_path / "level1", "1_Skip.py", f"KBV_SKIP = {skip}\n")
    with pytest.raises(ProblemFormatError, match="KBV_SKIP"):
        load_problem(path)


@pytest.mark.parametrize("profiles", [
    'dict(small={"n": 4})',
    '{"small": {"n": 2 ** 3}}',
    'make_profiles()',
    '{"small": {"n": n}}',
])
def test_load_problem_rejects_non_literal_profiles(tmp_path, profiles):
    path = write_problem(tmp_path / "level1", "1_Prof.py", f"KBV_PROFILES = {profiles}\n")
    with pytest.raises(ProblemFormatError, match="KBV_PROFILES"):
        load_problem(path)


@pytest.mark.parametrize("mode", ['"inference"', '"EVAL"', "None"])
def test_load_problem_rejects_bad_mode(tmp_path, mode):
    with pytest.raises(ProblemFormatError, match="KBV_MODE"):
        load_problem(write_problem(tmp_path / "level1", "1_Mode.py", f"KBV_MODE = {mode}\n"))


def test_load_problem_does_not_execute_the_file(tmp_path):
    marker = tmp_path / "executed"
    path = write_problem(tmp_path / "level1", "1_Side.py", f"open({str(marker)!r}, 'w').close()\n")
    load_problem(path)
    assert not marker.exists()


@pytest.mark.parametrize("extra", ['KBV_SKIP = ["D2"]', "KBV_PROFILES = [1, 2]", "KBV_PROFILES = {[1]: 2}",
                                   "KBV_UNSCALED_INPUTS = 5"],
                         ids=["skip-list", "profiles-list", "profiles-unhashable", "unscaled-int"])
def test_load_problem_rejects_wrongly_typed_declarations(tmp_path, extra):
    with pytest.raises(ProblemFormatError):
        load_problem(write_problem(tmp_path / "level1", "1_Typed.py", extra + "\n"))


# ---------------------------------------------------------------------------------------------------------------
# discover


def test_discover_level_folders_and_ignores_non_problem_files(tmp_path):
    write_problem(tmp_path / "level1", "10_Ten.py")
    write_problem(tmp_path / "level1", "2_Two.py")
    write_problem(tmp_path / "level2", "1_One.py")
    write_problem(tmp_path / "level1", "helpers.py")
    (tmp_path / "level1" / "__init__.py").write_text("")
    found = discover(tmp_path)
    assert [p.key for p in found] == ["level1/2_Two", "level1/10_Ten", "level2/1_One"]


def test_discover_flat_folder(tmp_path):
    write_problem(tmp_path, "3_C.py")
    write_problem(tmp_path, "1_A.py")
    found = discover(tmp_path)
    assert [(p.key, p.level) for p in found] == [("1_A", None), ("3_C", None)]


# ---------------------------------------------------------------------------------------------------------------
# pair_candidates


def make_candidate(folder: Path, name: str, body: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    pass\n" + body)
    return path


def test_generation_names_pair_with_their_problem_as_separate_samples(builtin, tmp_path):
    s0 = make_candidate(tmp_path, "level_1_problem_5_sample_0_kernel.py")
    s3 = make_candidate(tmp_path, "level_1_problem_5_sample_3_kernel.py", "# a different sample\n")
    other = make_candidate(tmp_path, "level_2_problem_5_sample_0_kernel.py")
    pairs, unmatched = pair_candidates(builtin, [tmp_path])
    assert unmatched == []
    assert len(pairs) == 3
    relu = [pr for pr in pairs if pr.problem.key == "level1/5_ReLU"]
    assert sorted((pr.candidate.sample, pr.candidate.path.name) for pr in relu) == [(0, s0.name), (3, s3.name)]
    assert relu[0].key != relu[1].key
    assert {pr.key[2] for pr in relu} == {0, 3}
    level2 = [pr for pr in pairs if pr.problem.level == 2]
    assert len(level2) == 1 and level2[0].problem.problem_id == 5
    assert level2[0].candidate.path == other.resolve()


def test_identical_sources_in_two_samples_are_kept_apart(builtin, tmp_path):
    make_candidate(tmp_path, "level_1_problem_5_sample_0_kernel.py")
    make_candidate(tmp_path, "level_1_problem_5_sample_3_kernel.py")  # same bytes, same sha256
    pairs, _ = pair_candidates(builtin, [tmp_path])
    assert len(pairs) == 2
    assert pairs[0].candidate.sha256 == pairs[1].candidate.sha256
    assert len({pr.key for pr in pairs}) == 2
    assert [pr.candidate.sample for pr in pairs] == [0, 3]


def test_candidate_named_like_a_problem_pairs_as_sample_0(builtin, tmp_path):
    path = make_candidate(tmp_path, "5_ReLU.py")
    pairs, unmatched = pair_candidates(builtin, [tmp_path])
    assert unmatched == []
    assert len(pairs) == 1
    pair = pairs[0]
    assert pair.problem.key == "level1/5_ReLU"
    assert pair.candidate.sample == 0
    assert pair.candidate.path == path.resolve()
    assert pair.key == ("level1/5_ReLU", Candidate.from_path(path).sha256, 0)


def test_same_name_in_a_level_folder_pairs_with_that_level_only(tmp_path):
    suite = tmp_path / "suite"
    p1 = load_problem(write_problem(suite / "level1", "3_Shared.py"))
    p2 = load_problem(write_problem(suite / "level2", "3_Shared.py", "# level 2 version\n"))
    cands = tmp_path / "cands"
    in_level2 = make_candidate(cands / "level2", "3_Shared.py")
    pairs, unmatched = pair_candidates([p1, p2], [cands])
    assert unmatched == []
    assert [(pr.problem.level, pr.candidate.path) for pr in pairs] == [(2, in_level2.resolve())]

    # outside a level folder the name is ambiguous between the two levels: no pairing
    loose = tmp_path / "loose"
    ambiguous = make_candidate(loose, "3_Shared.py")
    pairs, unmatched = pair_candidates([p1, p2], [loose])
    assert pairs == []
    assert unmatched == [ambiguous]

    # a level folder with no such problem: no pairing either
    level3 = tmp_path / "l3"
    wrong = make_candidate(level3 / "level3", "3_Shared.py")
    pairs, unmatched = pair_candidates([p1, p2], [level3])
    assert pairs == [] and unmatched == [wrong]


def test_unmatched_files_are_returned(builtin, tmp_path):
    good = make_candidate(tmp_path, "level_1_problem_5_sample_0_kernel.py")
    no_problem = make_candidate(tmp_path, "level_1_problem_999_sample_0_kernel.py")
    no_level = make_candidate(tmp_path, "level_9_problem_1_sample_0_kernel.py")
    random_name = make_candidate(tmp_path / "sub", "my_kernel.py")
    (tmp_path / "notes.txt").write_text("not a candidate")
    pairs, unmatched = pair_candidates(builtin, [tmp_path])
    assert [pr.candidate.path for pr in pairs] == [good.resolve()]
    assert sorted(unmatched) == sorted([no_problem, no_level, random_name])


def test_pairs_from_several_folders_are_sorted(builtin, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    make_candidate(a, "level_2_problem_1_sample_0_kernel.py")
    make_candidate(b, "level_1_problem_7_sample_1_kernel.py")
    make_candidate(b, "level_1_problem_7_sample_0_kernel.py", "# other\n")
    make_candidate(a, "level_1_problem_16_sample_0_kernel.py")
    pairs, _ = pair_candidates(builtin, [a, b])
    assert [(pr.problem.level, pr.problem.problem_id, pr.candidate.sample) for pr in pairs] == [
        (1, 7, 0), (1, 7, 1), (1, 16, 0), (2, 1, 0)]


def test_candidate_hash_is_of_the_file_content(tmp_path):
    import hashlib

    path = make_candidate(tmp_path, "x.py")
    c = Candidate.from_path(path, sample=4)
    assert c.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert c.sample == 4
    assert c.path.is_absolute()


# ---------------------------------------------------------------------------------------------------------------
# write_reference_candidate


def test_reference_candidate_pairs_back_to_its_problem(builtin, tmp_path):
    relu = by_key(builtin)["level1/5_ReLU"]
    path = write_reference_candidate(relu, tmp_path / "refs")
    assert path.parent == tmp_path / "refs"
    assert path.name == "level_1_problem_5_sample_0_kernel.py"
    pairs, unmatched = pair_candidates(builtin, [tmp_path / "refs"])
    assert unmatched == []
    assert [(pr.problem.key, pr.candidate.sample) for pr in pairs] == [("level1/5_ReLU", 0)]


def test_reference_candidate_defines_modelnew_equal_to_model(builtin, tmp_path):
    relu = by_key(builtin)["level1/5_ReLU"]
    path = write_reference_candidate(relu, tmp_path)
    tree = ast.parse(path.read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    assert "ModelNew" in classes and "Model" in classes
    assert [b.id for b in classes["ModelNew"].bases] == ["Model"]
    spec = importlib.util.spec_from_file_location("kbv_test_reference_candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = torch.randn(4, 8)
    assert torch.equal(module.ModelNew()(x), module.Model()(x))


def test_reference_candidates_for_a_whole_level2_problem(builtin, tmp_path):
    problem = next(p for p in builtin if p.level == 2)
    path = write_reference_candidate(problem, tmp_path)
    pairs, unmatched = pair_candidates(builtin, [tmp_path])
    assert unmatched == []
    assert [pr.problem for pr in pairs] == [problem]
    assert pairs[0].candidate.path == path.resolve()


def test_reference_candidate_of_a_flat_problem_pairs_back(tmp_path):
    write_problem(tmp_path / "suite", "4_Flat.py")
    problems = discover(tmp_path / "suite")
    assert problems[0].level is None
    write_reference_candidate(problems[0], tmp_path / "refs")
    pairs, unmatched = pair_candidates(problems, [tmp_path / "refs"])
    assert unmatched == [], unmatched
    assert [pr.problem.key for pr in pairs] == ["4_Flat"]
