"""Worker side of the sandbox probe: confine this process as asked, then initialise CUDA and run one kernel
(``python -m kbv.worker.probe SPEC_JSON``; the parent's ``kbv.sandbox.probe`` reads the exit status and last line)."""

from __future__ import annotations

import json
import sys


def main() -> int:
    spec = json.loads(sys.argv[1])
    from kbv.worker import confine

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
