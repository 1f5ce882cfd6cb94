"""Ctrl-C while ``kbv`` starts: its imports (torch among them) take seconds, and a Ctrl-C in them would end in an
import's traceback. While ``kbv.cli`` is imported, SIGINT exits 130 with one line ``Interrupted.`` instead; the
previous handler is back once the commands are gathered (``release``), so a run handles Ctrl-C as usual."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

EXIT_INTERRUPTED = 130  # 128 + SIGINT


def _interrupted(signum: int, frame: Any) -> None:
    # ends the process here: an exception raised into an import half done (a C extension's, such as numpy's) can
    # turn into another error there; nothing is written and no worker runs yet, so there is nothing to clean up
    os.write(2, b"Interrupted.\n")
    os._exit(EXIT_INTERRUPTED)


def guard() -> Any:
    """Install the quiet handler where Python's default one is in place (the main thread); returns what to restore
    (None when nothing was installed)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return None  # someone chose a handler: keep it
    return signal.signal(signal.SIGINT, _interrupted)


def release(previous: Any) -> None:
    """Restore the handler ``guard`` replaced (if the quiet one is still in place)."""
    if previous is not None and signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, previous)
