"""kbv's version (one place; ``kbv.__version__`` and every record's ``env`` read it)."""

__version__ = "0.1.0"
