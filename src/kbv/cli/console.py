"""The consoles kbv's commands print through: as wide as the terminal (``COLUMNS`` when set; 80 when not a
terminal), made per command so ``COLUMNS`` is read when the command runs."""

from __future__ import annotations

from rich.console import Console


def make_console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False)
