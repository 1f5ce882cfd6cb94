"""The ``kbv`` command's user errors (one line ``Error: ...``, exit code 2; README, "Exit codes") and the checks
every command runs on its options before anything runs. Imports no command module (they all import it)."""

from __future__ import annotations

import click

from kbv import envinfo
from kbv.problems import Problem

EXIT_USAGE = 2  # a user mistake: one line "Error: ..."


class UserError(click.ClickException):
    """A user mistake: printed as one line ``Error: ...``, exit code 2."""

    exit_code = EXIT_USAGE


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
