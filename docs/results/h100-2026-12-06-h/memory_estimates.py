"""How well the gate's first estimate of a correctness stage's device memory (before any run of the problem taught
it: until this session 6 times one forward's inputs and outputs, the state twice, a 2 GiB base) covers what
both processes were then seen to hold (`memory_bytes.correctness_stage.together_max`, NVML sampled every 50 ms), over
the H100 reward batches of h100-2026-12-06-f, -g and -h (runs again left out); and the same for an estimate that also
counts the forward's intermediate tensors (the counts' intermediate_bytes: peak live bytes of its ops' outputs on the
meta device, less the output; the inputs' and parameters' storages, and views of them, are not counted).
Run from the repository root with KernelBench in .kb/kernelbench:
    PYTHONPATH=src python docs/results/h100-2026-12-06-h/memory_estimates.py > docs/results/h100-2026-12-06-h/memory_estimates.txt
"""
from __future__ import annotations

import glob
import gzip
import json
from collections import defaultdict

from kbv.protocol import SHARED_CORRECTNESS_BASE_BYTES, SHARED_CORRECTNESS_MEMORY_FACTORS as FACTORS
from kbv.worker.flops import count

GIB = 2**30
OLD_FACTOR, OLD_BASE = 6, 2.0  # SHARED_CORRECTNESS_MEMORY_FACTOR and the base (GiB) until h100-2026-12-06-h


def parts(path: str) -> dict[str, float]:
    """The problem's counts as kbv makes them (kbv.worker.flops, on the meta device), in GiB."""
    c = count(path)
    return {"in": c.bytes_breakdown["inputs"] / GIB, "out": c.bytes_breakdown["outputs"] / GIB,
            "state": c.bytes_breakdown["state"] / GIB, "intermediate": c.intermediate_bytes / GIB}


def held() -> dict[str, float]:
    seen: dict[str, float] = defaultdict(float)
    for path in glob.glob("docs/results/h100-2026-12-06-[fgh]/*.jsonl.gz"):  # gzipped since 2026-12-07
        for line in gzip.open(path, "rt"):
            r = json.loads(line)
            if (r.get("env") or {}).get("correctness_rerun"):
                continue
            together = (((r.get("memory_bytes") or {}).get("correctness_stage")) or {}).get("together_max")
            if together:
                seen[r["problem"]] = max(seen[r["problem"]], together / GIB)
    return seen


def main() -> None:
    base = SHARED_CORRECTNESS_BASE_BYTES / GIB
    rows = []
    for problem, h in sorted(held().items()):
        level, name = problem.split("/")
        p = parts(f".kb/kernelbench/{level}/{name}.py")
        now = OLD_FACTOR * (p["in"] + p["out"]) + 2 * p["state"] + OLD_BASE
        alt = (FACTORS["inputs"] * p["in"] + FACTORS["outputs"] * p["out"] + FACTORS["intermediates"] * p["intermediate"]
               + 2 * p["state"] + base)
        rows.append((problem, p, h, now, alt))
    print(f"{'problem':44s} {'in':>6s} {'out':>6s} {'interm':>6s} {'held':>6s} {'6x':>6s} {'new':>6s}  (GiB)")
    for problem, p, h, now, alt in sorted(rows, key=lambda r: -r[2] / r[3]):
        print(f"{problem[:44]:44s} {p['in']:6.2f} {p['out']:6.2f} {p['intermediate']:6.2f} {h:6.1f} {now:6.1f} {alt:6.1f}")
    for label, index in (("6 x (in + out) + 2 GiB, until now", 3),
                         (f"SHARED_CORRECTNESS_MEMORY_FACTORS {FACTORS} + {base:g} GiB", 4)):
        ratios = [r[index] / r[2] for r in rows]
        print(f"{label}: {sum(x >= 1 for x in ratios)} of {len(rows)} problems held no more than expected; "
              f"expected over held: mean {sum(ratios) / len(ratios):.2f}, least {min(ratios):.2f}, most {max(ratios):.2f}")


if __name__ == "__main__":
    main()
