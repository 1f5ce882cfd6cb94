"""Problems and candidates as the trusted parent sees them: files read with ``ast`` (never executed here), suites,
held-out shapes, candidate files and their pairing with problems."""

from kbv.problems.files import (
    BUILTIN_SUITE, PROBLEM_NAME, Problem, ProblemFormatError, builtin_suite_dir, discover, held_out_shapes,
    load_problem, load_problem_in_suite, resolve_profile, resolve_suite, shipped_suites,
)

__all__ = ["BUILTIN_SUITE", "PROBLEM_NAME", "Problem", "ProblemFormatError", "builtin_suite_dir", "discover",
           "held_out_shapes", "load_problem", "load_problem_in_suite", "resolve_profile", "resolve_suite",
           "shipped_suites"]
