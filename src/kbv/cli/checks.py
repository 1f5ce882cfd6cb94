"""The ``kbv`` command's user errors (one line ``Error: ...``, exit code 2; README, "Exit codes") and the checks
every command runs on its options before anything runs. Imports no command module (they all import it)."""

from __future__ import annotations

from pathlib import Path

import click

from kbv import envinfo
from kbv.problems import BUILTIN_SUITE, PROBLEM_NAME, Problem, resolve_suite

EXIT_USAGE = 2  # a user mistake: one line "Error: ..."


class UserError(click.ClickException):
    """A user mistake: printed as one line ``Error: ...``, exit code 2."""

    exit_code = EXIT_USAGE


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


def resolved_device(device: str) -> str:
    """``envinfo.resolve_device``, with "no GPU" as a user error."""
    try:
        return envinfo.resolve_device(device)
    except (RuntimeError, ValueError) as exc:
        raise UserError(f"--device {device}: torch sees no CUDA device; use --device cpu (or auto)"
                        if device == "cuda" else f"--device: {exc}") from None


def check_profile(profile: str | None, problems: list[Problem]) -> None:
    """A named ``--profile`` must be one every problem of the run defines (else auto or default)."""
    if profile in (None, "auto", "default") or not problems:
        return
    lacking = [p.key for p in problems if profile not in p.profiles]
    if not lacking:
        return
    known = sorted({name for p in problems for name in p.profiles})
    if len(lacking) == len(problems):
        raise UserError(f"--profile {profile!r}: no problem defines it (use auto, default"
                        + "".join(f", {k}" for k in known) + ")")
    more = f" and {len(lacking) - 5} more" if len(lacking) > 5 else ""
    raise UserError(f"--profile {profile!r}: not defined by {', '.join(lacking[:5])}{more}; use auto or default")
