"""``python -m kbv.cli`` (as scripts/gpu_check.py runs it): the same command as ``kbv`` and ``python -m kbv``."""

from kbv.cli import main

main()
