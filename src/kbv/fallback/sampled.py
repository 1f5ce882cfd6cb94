"""Library use seen from outside the candidate's process: where its workers spent their CPU time, as the parent
sampled it (``kbv.sandbox.sampler``) over every call of every stage, the profiled call and the timed calls included,
for the reference's workers alike.

The in-process recorder (``kbv.worker.recorder``) sees ATen ops, and sees them in one call the candidate can tell
apart; it never sees a library outside torch. Here, compute in such a library (numpy and the BLAS it bundles, or
another BLAS, LAPACK or FFT library) takes a share of the candidate's samples beyond the reference's own share:
``fallback`` (``partial_fallback`` when the recorder saw kernels of the candidate's own too). Under Triton's CPU
interpreter, which computes with numpy, numpy is not counted for a candidate that launched Triton kernels. And
where the profiled call showed no work at all (``no_work_observed``: its work hid from the recorder) while no sample
of any call fell in the candidate's own code, nothing of its own ran anywhere: ``fallback`` as well. And on the CPU,
where the profiled call ran kernels of the candidate's own but the timing stage's calls, long enough to be sampled,
left almost no sample in its own code, the timed calls ran something else (the profiled call was told apart):
``fallback``.
"""

from __future__ import annotations

import os
import re
from typing import Any

from kbv.sandbox.sampler import classify

# At least this share of the candidate's samples in a foreign compute library, beyond the reference's share, and at
# least this many such samples, make library use seen from outside.
FOREIGN_SHARE_MIN = 0.03
FOREIGN_SAMPLES_MIN = 20
# The timing stage's forward calls, at the candidate's own median per call, would give at least this many samples of
# the candidate's CPU time, and fewer than this share of that fell in its own code: its timed calls did not run it.
TIMED_EXPECTED_MIN = 15
TIMED_OWN_SHARE_MIN = 0.1
_COMPUTE_LIBRARY = re.compile(r"(openblas|libmkl|libblis|libflame|fftw|lapack|libatlas|scipy)", re.I)


def foreign(obj: str, own_roots: tuple[str, ...], interpreted_triton: bool) -> bool:
    """Whether a mapped object is a compute library outside torch and the candidate's own builds."""
    cls = classify(obj, own_roots)
    if cls == "numpy":
        return not interpreted_triton
    return cls == "other" and bool(_COMPUTE_LIBRARY.search(os.path.basename(obj)))


def foreign_share(by_object: dict[str, int], own_roots: tuple[str, ...], interpreted_triton: bool) -> tuple[int, int]:
    """(samples in foreign compute libraries, all samples)."""
    total = sum(by_object.values())
    return sum(n for obj, n in by_object.items() if foreign(obj, own_roots, interpreted_triton)), total


def judge(candidate: dict[str, int], reference: dict[str, int], own_roots: tuple[str, ...],
          interpreted_triton: bool, own_kernels: bool, no_work_observed: bool = False,
          timed: tuple[dict[str, int], float] | None = None) -> dict[str, Any]:
    """The record's ``fallback.sampled`` section: each role's samples, its foreign share and own samples, and the
    flag (``flags``) when the candidate's foreign share is above the reference's by ``FOREIGN_SHARE_MIN`` with
    ``FOREIGN_SAMPLES_MIN`` samples or more, or when the profiled call showed no work and no sample fell in the
    candidate's own code, or (``timed``: the candidate's samples in the timing stage and how many its forward calls
    there would give) when the profiled call ran its own kernels and the timed calls left fewer than
    ``TIMED_OWN_SHARE_MIN`` of the samples they would give in its own code (at least ``TIMED_EXPECTED_MIN``)."""
    own = sum(n for obj, n in candidate.items() if classify(obj, own_roots) == "own")
    timed_own = timed_expected = None
    timed_missing = False
    if timed is not None:
        timed_own = sum(n for obj, n in timed[0].items() if classify(obj, own_roots) == "own")
        timed_expected = round(timed[1], 1)
        timed_missing = (own_kernels and not interpreted_triton and timed[1] >= TIMED_EXPECTED_MIN
                         and timed_own < TIMED_OWN_SHARE_MIN * timed[1])
    cand_foreign, cand_total = foreign_share(candidate, own_roots, interpreted_triton)
    ref_foreign, ref_total = foreign_share(reference, (), False)
    cand_share = cand_foreign / cand_total if cand_total else None
    ref_share = ref_foreign / ref_total if ref_total else 0.0
    foreign_seen = (cand_share is not None and cand_foreign >= FOREIGN_SAMPLES_MIN
                    and cand_share - ref_share >= FOREIGN_SHARE_MIN)
    nothing_own = no_work_observed and cand_total > 0 and own == 0
    seen = foreign_seen or nothing_own or timed_missing
    top = sorted(((n, obj) for obj, n in candidate.items() if foreign(obj, own_roots, interpreted_triton)),
                 reverse=True)[:5]
    return {"samples": {"candidate": cand_total, "reference": ref_total},
            "foreign_samples": {"candidate": cand_foreign, "reference": ref_foreign},
            "foreign_share": {"candidate": cand_share, "reference": ref_share if ref_total else None},
            "foreign_objects": [obj for _, obj in top], "interpreted_triton": interpreted_triton,
            "own_samples": own, "foreign_library": foreign_seen, "no_own_code": nothing_own,
            "timed_own_samples": timed_own, "timed_expected_samples": timed_expected,
            "timed_own_missing": timed_missing,
            "flags": ((["partial_fallback"] if own_kernels and not timed_missing else ["fallback"]) if seen
                      else [])}
