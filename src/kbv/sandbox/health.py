"""Is a GPU still sound after a candidate hit a CUDA error? A fresh process allocates, runs a matmul and checks it
against the CPU (``python -m kbv.sandbox.health``); the runner retires a GPU that fails twice, and the sandbox plan
(its CUDA probe) is made afresh after a failed check."""

from __future__ import annotations

import os
import sys
import time

from kbv import proc

HEALTH_TIMEOUT_S = 90.0
CUDA_FAULT_WORDS = ("cuda error", "illegal memory access", "illegal address", "unspecified launch failure",
                    "device-side assert", "misaligned address", "cudaerror", "ecc error", "xid")


def looks_like_cuda_fault(error: dict | None) -> bool:
    """Whether a record's error (message, log tail, signal) suggests the GPU itself may be left in a bad state."""
    if not error:
        return False
    text = " ".join(str(error.get(k, "")) for k in ("message", "log_tail", "kind")).lower()
    return any(word in text for word in CUDA_FAULT_WORDS) or str(error.get("kind")) == "crash"


def check(gpu: int, retries: int = 1, pause_s: float = 5.0) -> tuple[bool, str]:
    """Run the check on one GPU (by index, through CUDA_VISIBLE_DEVICES); True and a note, or False and why."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu))
    why = ""
    for attempt in range(retries + 1):
        done = proc.run([sys.executable, "-m", "kbv.sandbox.health"], HEALTH_TIMEOUT_S, env=env)
        why = f"health check timed out after {HEALTH_TIMEOUT_S:.0f} s" if done.timed_out else done.last_line()
        if done.ok:
            return True, why
        if attempt < retries:
            time.sleep(pause_s)
    from kbv.sandbox import plan

    plan.forget("cuda")  # the next plan probes the sandbox layers again on what is left of the machine
    return False, why[:500]


def main() -> int:
    import torch

    a = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
    b = torch.randn(256, 256, generator=torch.Generator().manual_seed(1))
    expected = a.double() @ b.double()
    torch.backends.cuda.matmul.allow_tf32 = False
    got = (a.cuda() @ b.cuda()).double().cpu()
    torch.cuda.synchronize()
    err = float((got - expected).abs().max())
    if not err < 1e-2:
        print(f"matmul on the GPU is wrong (max error {err:.3g})")
        return 1
    print(f"gpu healthy (matmul max error {err:.2g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
