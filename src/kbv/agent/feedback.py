"""The public part of a verdict: what a kernel's author (the agent's model, or an external agent's ``check``) sees.

Shown: the verdict, the compile or runtime error's message and log tail, which distributions failed and how,
flags, the verified and standard speedups with their intervals, the roofline attainment and the bound regime, and
the fallback table (the library kernels and ops the forward still used, the kernels by device time on a GPU).
Never shown: seeds (correctness, timing, the fallback trial's), held-out shapes (the loop never evaluates them),
the roofline's FLOP and byte counts, ceilings and bound, and anything from a suite's evaluator folder.
"""

from __future__ import annotations

from typing import Any

LOG_TAIL_LINES = 40
MAX_KERNEL_ROWS = 8
SUSPICIOUS_FLAGS = ("speedup_above_bound", "above_roofline", "wall_clock_mismatch", "timer_inconsistent", "untimed_work",
                    "tamper")
FALLBACK_FLAGS = ("fallback", "partial_fallback")


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def verified_speedup(record: dict[str, Any]) -> dict[str, float | None]:
    sp = (record.get("speedup") or {}).get("verified") or {}
    return {k: _num(sp.get(k)) for k in ("value", "ci_low", "ci_high")}


def attainment(record: dict[str, Any]) -> float | None:
    att = (record.get("roofline") or {}).get("attainment")
    return _num(att.get("candidate")) if isinstance(att, dict) else _num(att)


def regime(record: dict[str, Any]) -> str | None:
    value = (record.get("roofline") or {}).get("regime")
    return value if isinstance(value, str) else None


def library_kernels(record: dict[str, Any]) -> list[str]:
    """The library code the forward still used: GPU library kernels by name, ATen compute ops, library symbols."""
    fb = record.get("fallback") if isinstance(record.get("fallback"), dict) else {}
    gpu = fb.get("gpu") if isinstance(fb.get("gpu"), dict) else {}
    names = list(gpu.get("library_kernels") or [])
    names += [str(op) for op in sorted(fb.get("compute_ops") or {})]
    names += [str(s) for s in fb.get("library_symbols") or []]
    return list(dict.fromkeys(names))


def uses_fallback(record: dict[str, Any]) -> bool:
    return any(f in (record.get("flags") or []) for f in FALLBACK_FLAGS)


def fmt(x: float | None, spec: str = ".3g") -> str:
    return "n/a" if x is None else format(x, spec)


def public_feedback(record: dict[str, Any], ncu: dict[str, Any] | None = None) -> str:
    """The feedback text for one evaluation record (public fields only), with Nsight Compute metrics where given
    (``kbv.agent.ncu``)."""
    lines = [f"verdict: {record.get('verdict')} (kbv verified protocol); KernelBench's check: "
             f"{record.get('standard_verdict')}"]
    err = record.get("error") if isinstance(record.get("error"), dict) else None
    if err:
        lines.append(f"error at {err.get('stage')}: {err.get('kind')}: {str(err.get('message', ''))[:2000]}")
        tail = str(err.get("log_tail") or "").splitlines()[-LOG_TAIL_LINES:]
        if tail:
            lines.append("log tail:")
            lines.extend("    " + t for t in tail)
    corr = record.get("correctness") or {}
    dists = corr.get("distributions") or {}
    failed = corr.get("failed_distributions") or [n for n, d in dists.items()
                                                  if isinstance(d, dict) and d.get("status") in ("failed", "error")]
    for name in failed:
        d = dists.get(name) or {}
        lines.append(f"failed {name}: {d.get('reason') or d.get('status')}"
                     f" (max abs error {fmt(_num(d.get('max_abs_error')))},"
                     f" max rel error {fmt(_num(d.get('max_rel_error')))})")
    if record.get("flags"):
        lines.append("flags: " + ", ".join(map(str, record["flags"])))
    sp = verified_speedup(record)
    if sp["value"] is not None:
        std = ((record.get("speedup") or {}).get("standard") or {}).get("value")
        lines.append(f"speedup vs PyTorch (verified baseline, TF32 on): {fmt(sp['value'])} "
                     f"[95% CI {fmt(sp['ci_low'])}, {fmt(sp['ci_high'])}]"
                     + (f"; vs the standard baseline (TF32 off): {fmt(_num(std))}" if _num(std) is not None else ""))
    att = attainment(record)
    if att is not None or regime(record):
        ref = ((record.get("roofline") or {}).get("attainment") or {})
        ref_att = _num(ref.get("reference_verified")) if isinstance(ref, dict) else None
        lines.append(f"roofline attainment: {fmt(att)} (reference: {fmt(ref_att)}); bound: {regime(record) or 'n/a'}")
    fb = record.get("fallback") if isinstance(record.get("fallback"), dict) else None
    if fb:
        share = _num((fb.get("gpu") or {}).get("library_share_time")) if isinstance(fb.get("gpu"), dict) else None
        share = share if share is not None else _num(fb.get("library_share"))
        libs = library_kernels(record)
        lines.append(f"library share of the forward's work: {fmt(share, '.2f')}"
                     + (f"; library kernels still used: {', '.join(libs[:20])}" if libs else "; no library kernels"))
        gpu = fb.get("gpu") if isinstance(fb.get("gpu"), dict) else {}
        rows = gpu.get("kernels") or []
        if rows:
            lines.append("kernels by device time (class, calls, us):")
            for k in rows[:MAX_KERNEL_ROWS]:
                lines.append(f"    {str(k.get('name'))[:100]}  {k.get('class')}  {k.get('calls')}  "
                             f"{fmt(_num(k.get('us')), '.1f')}")
    if isinstance(ncu, dict) and ncu.get("kernels"):
        lines.append("Nsight Compute, one untimed call (kernel: achieved memory / compute throughput as % of peak, "
                     "duration us):")
        for k in ncu["kernels"][:MAX_KERNEL_ROWS]:
            dur = _num(k.get("duration_ns"))
            lines.append(f"    {str(k.get('name'))[:100]}: {fmt(_num(k.get('memory_pct')), '.1f')}% / "
                         f"{fmt(_num(k.get('compute_pct')), '.1f')}%, {fmt(None if dur is None else dur / 1e3, '.1f')}")
    return "\n".join(lines)
