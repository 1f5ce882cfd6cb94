"""Reports: aggregate figures (``metrics``), text/Markdown/JSON/CSV (``text``), HTML (``html``), plots, and
KernelBench's ``eval_results.json`` export and import (``kernelbench``). Reports read records, never re-run anything."""
