"""A problem named on the command line (``--problem``): a problem file, or a shipped problem as ``kbv problems`` lists
it. A click parameter type, kept out of ``kbv.cli`` so that every command module can use it."""

from __future__ import annotations

from pathlib import Path

import click

from kbv.problems.files import BUILTIN_SUITE, PROBLEM_NAME, resolve_suite


class ProblemFile(click.ParamType):
    """``--problem``: a problem file, or a shipped problem named as ``kbv problems`` lists it (``level1/5_ReLU``,
    in the built-in suite) or with its suite (``production:level1/1_Mm_bf16``)."""

    name = "problem"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        path = Path(str(value))
        if path.is_file():
            return path
        suite, _, key = str(value).rpartition(":")
        try:
            shipped = resolve_suite(suite or BUILTIN_SUITE) / f"{key.removesuffix('.py')}.py"
        except FileNotFoundError:
            shipped = None
        if shipped is not None and shipped.is_file() and PROBLEM_NAME.match(shipped.name):
            return shipped
        self.fail(f"{value!r} is no problem file, nor a shipped problem (kbv problems SUITE lists them, as "
                  "level1/5_ReLU or SUITE:level1/5_ReLU)", param, ctx)
