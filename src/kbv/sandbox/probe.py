"""Does the accelerator still work inside the sandbox? Each confinement layer is tried on its own in a fresh process.

Some machines refuse CUDA to a process in a new namespace or under another user (the driver answers
``cudaErrorOperatingSystem``, error 304, under some container runtimes). Rather than lose every result, the parent
probes each layer alone (``python -m kbv.sandbox.probe``: confine, then initialise CUDA and run one kernel), keeps
the layers that work, checks the combination, and records what it dropped and why.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

PROBE_TIMEOUT_S = 120.0
LAYERS = ("network", "pid", "read_only", "ids")


def _run(spec: dict[str, Any], env: dict[str, str] | None) -> tuple[bool, str]:
    try:
        proc = subprocess.run([sys.executable, "-m", "kbv.sandbox.probe", json.dumps(spec)], capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return False, f"probe timed out after {PROBE_TIMEOUT_S:.0f} s"
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return proc.returncode == 0, (lines[-1] if lines else f"exit status {proc.returncode}")[:300]


def usable_layers(full: dict[str, Any], env: dict[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The subset of ``full`` (a confine spec) under which CUDA works, and a note for each layer dropped."""
    present = [layer for layer in LAYERS if full.get(layer)]
    ok, why = _run(full, env)
    if ok:
        return full, []
    with ThreadPoolExecutor(max_workers=len(present) or 1) as pool:
        alone = dict(zip(present, pool.map(lambda layer: _run({layer: full[layer]}, env), present)))
    kept = {layer: full[layer] for layer in present if alone[layer][0]}
    notes = [f"{layer}: dropped, CUDA fails under it ({alone[layer][1]})" for layer in present if not alone[layer][0]]
    if kept and not _run(kept, env)[0]:
        notes.append(f"the layers {sorted(kept)} work alone but not together: all dropped")
        kept = {}
    return kept, notes


def main() -> int:
    spec = json.loads(sys.argv[1])
    from kbv.sandbox import confine

    confine.confine({"confine": spec})
    try:
        import torch

        x = torch.ones(1024, device="cuda")
        total = float((x * 2).sum())
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - any failure is the answer
        print(f"{type(exc).__name__}: {exc}".splitlines()[0])
        return 1
    print(f"cuda ok ({total:.0f})")
    return 0 if total == 2048 else 1


if __name__ == "__main__":
    sys.exit(main())
