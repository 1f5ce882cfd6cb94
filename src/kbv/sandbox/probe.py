"""Does the accelerator still work inside the sandbox? Each confinement layer is tried on its own in a fresh process.

Some machines refuse CUDA to a process in a new namespace or under another user (the driver answers
``cudaErrorOperatingSystem``, error 304, under some container runtimes). Rather than lose every result, the parent
probes each layer alone (``python -m kbv.worker.probe``: confine, then initialise CUDA and run one kernel), keeps
the layers that work, checks the combination, and records what it dropped and why.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kbv import proc

PROBE_TIMEOUT_S = 120.0
LAYERS = ("network", "pid", "read_only", "ids", "seccomp")  # pid includes a fresh /proc in its own mount namespace


def _run(spec: dict[str, Any], env: dict[str, str] | None) -> tuple[bool, str]:
    done = proc.run([sys.executable, "-m", "kbv.worker.probe", json.dumps(spec)], PROBE_TIMEOUT_S, env=env)
    if done.timed_out:
        return False, f"probe timed out after {PROBE_TIMEOUT_S:.0f} s"
    return done.ok, done.last_line()[:300]


def usable_layers(full: dict[str, Any], env: dict[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The subset of ``full`` (a confine spec) under which CUDA works, and a note for each layer dropped."""
    present = [layer for layer in LAYERS if full.get(layer)]
    extras = {k: v for k, v in full.items() if k not in LAYERS}  # what the layers act on (paths to keep or hide)
    ok, why = _run(full, env)
    if ok:
        return full, []
    with ThreadPoolExecutor(max_workers=len(present) or 1) as pool:
        alone = dict(zip(present, pool.map(lambda layer: _run({**extras, layer: full[layer]}, env), present)))
    kept = {layer: full[layer] for layer in present if alone[layer][0]}
    notes = [f"{layer}: dropped, CUDA fails under it ({alone[layer][1]})" for layer in present if not alone[layer][0]]
    if kept and not _run({**extras, **kept}, env)[0]:
        notes.append(f"the layers {sorted(kept)} work alone but not together: all dropped")
        kept = {}
    return ({**extras, **kept} if kept else {}), notes

