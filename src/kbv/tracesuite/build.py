"""Build a weighted problem suite from ``kbv.trace/1`` files (``kbv suite build``).

Per phase and per level (level 1: aten operators; level 2: modules, the two views of the same time), entries are
ranked by time and taken, hottest first, until the reproducible ones cover ``coverage`` of that level's recorded
time. Entries that cannot be reproduced (``args: null``, custom ops, views, random ops, integer tensors that may be
indices, ...) are skipped and reported, their time staying in the denominator. Selected entries with one signature
(:mod:`kbv.tracesuite.templates`) become one problem, across phases and traces; identical shapes are merged (calls and
time summed per phase). Each shape is run once on the ``meta`` device (on the CPU where meta cannot run it and the
shape is small); shapes that fail are dropped and reported. A problem keeps its ``max_shapes`` hottest shapes;
``held_out`` moves up to N of them (ranks 2, 4, 6, ... by time, never the hottest) to ``evaluator/heldout.json``.

Weights: a problem's weight in a phase is its kept shapes' time in that phase over the time of every kept shape of
its level in that phase, so each level's weights sum to 1 per phase; ``raw_sum`` (the kept time over the level's
recorded time) is the coverage actually reached.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import shutil
import sys
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable

import torch

from kbv.tracesuite.templates import Layout, Unreproducible, kernel_note, module_layout, op_layout, render_problem
from kbv.tracesuite.weights import HELDOUT_SCHEMA, PROVENANCE_SCHEMA, WEIGHTS_SCHEMA

TRACE_SCHEMA = "kbv.trace/1"
CPU_VALIDATION_ELEMENTS = 1 << 22  # shapes meta cannot run are run on the CPU up to this many input elements
LEVELS = {1: "operators", 2: "modules"}


class TraceError(ValueError):
    """A trace file that does not follow ``kbv.trace/1``."""


@dataclass
class Trace:
    path: Path
    data: dict[str, Any]
    sha256: str


def load_trace(path: str | Path) -> Trace:
    path = Path(path)
    raw = path.read_bytes()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != TRACE_SCHEMA:
        raise TraceError(f"{path}: schema is not {TRACE_SCHEMA}")
    if not isinstance(data.get("phases"), dict):
        raise TraceError(f"{path}: no phases")
    return Trace(path, data, hashlib.sha256(raw).hexdigest())


# ---------------------------------------------------------------------------------------------------------------
# Entries


@dataclass
class Entry:
    trace: int
    phase: str
    level: int
    label: str  # aten::mm.default, module:rmsnorm
    calls: int
    time_us: float
    record: dict[str, Any]
    layout: Layout | None
    reason: str | None  # why not reproducible

    @property
    def shape_key(self) -> str:
        return json.dumps(self.layout.values, sort_keys=True) if self.layout else ""


def _entry(trace: int, phase: str, level: int, record: dict[str, Any]) -> Entry:
    calls = int(record.get("calls") or 0)
    time_us = float(record.get("time_us") or 0.0)
    layout, reason = None, None
    label = f"{record.get('op')}.{record.get('overload') or 'default'}" if level == 1 else \
        f"module:{record.get('kind')}"
    try:
        if level == 1:
            if record.get("args") is None:
                raise Unreproducible("not reproducible (no arguments recorded)")
            layout = op_layout(str(record["op"]), record.get("overload"), list(record["args"]),
                               record.get("kwargs") or {})
        else:
            if record.get("inputs") is None or record.get("params") is None:
                raise Unreproducible("not reproducible (no inputs or parameters recorded)")
            layout = module_layout(str(record["kind"]), dict(record["params"]), list(record["inputs"]),
                                   record.get("extra_args"))
    except Unreproducible as exc:
        reason = str(exc)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # malformed records: report, never crash
        reason = f"malformed entry: {type(exc).__name__}: {exc}"
    return Entry(trace, phase, level, label, calls, time_us, record, layout, reason)


def entries_of(traces: list[Trace]) -> list[Entry]:
    out = []
    for t, trace in enumerate(traces):
        for phase, body in trace.data["phases"].items():
            for op in body.get("ops") or []:
                out.append(_entry(t, phase, 1, op))
            for module in body.get("modules") or []:
                out.append(_entry(t, phase, 2, module))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Problems


@dataclass
class Shape:
    values: dict[str, Any]
    entries: list[Entry] = field(default_factory=list)
    validated: str = "no"  # meta | cpu | no (could not run here) | failed: ...

    def time(self, phase: str | None = None) -> float:
        return sum(e.time_us for e in self.entries if phase is None or e.phase == phase)

    def calls(self, phase: str | None = None) -> int:
        return sum(e.calls for e in self.entries if phase is None or e.phase == phase)


@dataclass
class Problem:
    level: int
    layout: Layout  # the first entry's layout (code is shared by the signature)
    shapes: list[Shape]  # hottest first
    held_out: list[Shape] = field(default_factory=list)
    key: str = ""  # level1/3_Mm_bf16

    def time(self, phase: str | None = None) -> float:
        return sum(s.time(phase) for s in self.shapes + self.held_out)


@dataclass
class Skipped:
    entry: Entry
    reason: str

    def to_json(self, traces: list[Trace]) -> dict[str, Any]:
        e = self.entry
        return {"trace": traces[e.trace].path.name, "phase": e.phase, "level": e.level, "entry": e.label,
                "reason": self.reason, "calls": e.calls, "time_us": e.time_us,
                "inputs": e.record.get("inputs")}


@dataclass
class BuildResult:
    problems: list[Problem]
    skipped: list[Skipped]
    levels: dict[str, dict[str, dict[str, Any]]]  # phase -> level1/level2 -> figures
    weights: dict[str, Any]
    provenance: dict[str, Any]
    heldout: dict[str, Any]


def _select(entries: list[Entry], coverage: float
            ) -> tuple[list[Entry], list[Entry], list[Skipped], dict[tuple[str, int], dict]]:
    """Hottest first per (phase, level) until the reproducible entries cover ``coverage`` of the recorded time.
    Returns (chosen, cold: the entries after the cut, skipped, figures per (phase, level))."""
    chosen, cold_entries, skipped, stats = [], [], [], {}
    groups: dict[tuple[str, int], list[Entry]] = defaultdict(list)
    for e in entries:
        groups[(e.phase, e.level)].append(e)
    for key, group in groups.items():
        group.sort(key=lambda e: (-e.time_us, e.label, e.shape_key))
        recorded = sum(e.time_us for e in group)
        covered = unreproducible = 0.0
        cold = [0, 0.0]
        for e in group:
            if recorded > 0 and covered >= coverage * recorded:
                cold[0] += 1
                cold[1] += e.time_us
                cold_entries.append(e)
            elif e.layout is None:
                skipped.append(Skipped(e, e.reason or "not reproducible"))
                unreproducible += e.time_us
            else:
                chosen.append(e)
                covered += e.time_us
        stats[key] = {"recorded_us": recorded, "unreproducible_us": unreproducible, "cold_entries": cold[0],
                      "cold_us": cold[1]}
    return chosen, cold_entries, skipped, stats


def _group(chosen: list[Entry], cold: list[Entry]) -> tuple[list[Problem], list[Entry]]:
    """One problem per signature; a cold entry joins a chosen shape it is identical to (the problem covers it).
    Returns the problems and the cold entries that joined."""
    by_signature: dict[tuple[Any, ...], dict[str, Shape]] = defaultdict(dict)
    layouts: dict[tuple[Any, ...], tuple[int, Layout]] = {}
    for e in chosen:
        assert e.layout is not None
        sig = e.layout.signature
        layouts.setdefault(sig, (e.level, e.layout))
        shape = by_signature[sig].setdefault(e.shape_key, Shape(dict(e.layout.values)))
        shape.entries.append(e)
    joined = []
    for e in cold:
        match = by_signature.get(e.layout.signature, {}).get(e.shape_key) if e.layout is not None else None
        if match is not None:
            match.entries.append(e)
            joined.append(e)
    problems = []
    for sig, shapes in by_signature.items():
        level, layout = layouts[sig]
        ordered = sorted(shapes.values(), key=lambda s: (-s.time(), json.dumps(s.values, sort_keys=True)))
        problems.append(Problem(level, layout, ordered))
    return problems, joined


# ---------------------------------------------------------------------------------------------------------------
# Running generated problems (our own generated code, in this process)


def import_source(source: str, name: str) -> ModuleType:
    """Import generated problem source as a fresh module (not left in ``sys.modules``)."""
    module_name = f"kbv_generated_{name}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_loader(module_name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    finally:
        sys.modules.pop(module_name, None)
    return module


def run_shape(module: ModuleType, overrides: dict[str, Any], device: str) -> Any:
    """``Model(*get_init_inputs())(*get_inputs())`` with ``overrides`` applied, on ``device``; the outputs."""
    for name, value in overrides.items():
        setattr(module, name, value)
    with torch.device(device), torch.no_grad():
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs())
        out = model(*module.get_inputs())
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    if not items or not all(isinstance(o, torch.Tensor) for o in items):
        raise TypeError(f"forward returned {type(out).__name__}, not a tensor or a tuple of tensors")
    return out


def _input_elements(values: dict[str, Any]) -> int:
    return sum(math.prod(v) for k, v in values.items() if k.endswith("_shape") and isinstance(v, list))


def _validate(problem: Problem, skipped: list[Skipped]) -> None:
    """Run every shape (meta first; the CPU for small shapes meta cannot run); drop the shapes that fail."""
    module = import_source(render_problem(problem.layout, [s.values for s in problem.shapes]), "validate")
    kept = []
    for shape in problem.shapes:
        try:
            run_shape(module, shape.values, "meta")
            shape.validated = "meta"
        except Exception as meta_exc:  # noqa: BLE001 - the reason is reported
            if _input_elements(shape.values) <= CPU_VALIDATION_ELEMENTS:
                try:
                    run_shape(module, shape.values, "cpu")
                    shape.validated = "cpu"
                except Exception as exc:  # noqa: BLE001
                    shape.validated = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
            else:
                shape.validated = f"no (meta: {type(meta_exc).__name__}; too large for the CPU)"
        if shape.validated.startswith("failed"):
            skipped += [Skipped(e, f"the generated problem {shape.validated}") for e in shape.entries]
        else:
            kept.append(shape)
    problem.shapes = kept


def _held_out_ranks(count: int, n: int) -> list[int]:
    """Ranks (0 = hottest) moved out: 1, 3, 5, ... while at least one shape stays visible."""
    return [r for r in range(1, count, 2)][:max(0, n)]


# ---------------------------------------------------------------------------------------------------------------
# The build


def build_suite(trace_paths: Iterable[str | Path], out: str | Path, coverage: float = 0.9, max_shapes: int = 8,
                held_out: int = 0, force: bool = False) -> BuildResult:
    """Select, group, validate and write a suite under ``out`` (see the module docstring)."""
    if not 0 < coverage <= 1:
        raise ValueError("coverage is a fraction in (0, 1]")
    if max_shapes < 1:
        raise ValueError("max_shapes must be at least 1")
    traces = [load_trace(p) for p in trace_paths]
    if not traces:
        raise ValueError("no trace files")
    sources = {t.data.get("time_source") for t in traces}
    if len(sources) > 1:
        raise TraceError(f"traces mix time sources {sorted(map(str, sources))}: their times cannot be added")
    time_source = sources.pop() or "device"

    chosen, cold, skipped, stats = _select(entries_of(traces), coverage)
    problems, joined = _group(chosen, cold)
    for e in joined:  # counted as selected, not cold
        stats[(e.phase, e.level)]["cold_entries"] -= 1
        stats[(e.phase, e.level)]["cold_us"] -= e.time_us
    for problem in problems:
        _validate(problem, skipped)
        problem.shapes.sort(key=lambda s: (-s.time(), json.dumps(s.values, sort_keys=True)))
        for shape in problem.shapes[max_shapes:]:
            skipped += [Skipped(e, f"beyond --max-shapes {max_shapes}") for e in shape.entries]
        problem.shapes = problem.shapes[:max_shapes]
        ranks = set(_held_out_ranks(len(problem.shapes), held_out))
        problem.held_out = [s for r, s in enumerate(problem.shapes) if r in ranks]
        problem.shapes = [s for r, s in enumerate(problem.shapes) if r not in ranks]
    problems = [p for p in problems if p.shapes]
    for level in LEVELS:
        ranked = sorted((p for p in problems if p.level == level), key=lambda p: (-p.time(), p.layout.title))
        for i, p in enumerate(ranked, 1):
            p.key = f"level{level}/{i}_{p.layout.title}"
    problems.sort(key=lambda p: (p.level, int(p.key.split("/")[1].split("_")[0])))

    phase_totals = defaultdict(float)
    for t in traces:
        for phase, body in t.data["phases"].items():
            phase_totals[phase] += float(body.get("total_us") or 0.0)
    levels = _level_figures(problems, stats, skipped, coverage, phase_totals)
    weights = _weights(problems, levels, time_source, coverage, traces)
    provenance = _provenance(problems, skipped, traces)
    heldout = {"schema": HELDOUT_SCHEMA,
               "problems": {p.key: [s.values for s in p.held_out] for p in problems if p.held_out}}
    result = BuildResult(problems, skipped, levels, weights, provenance, heldout)
    write_suite(result, Path(out), force)
    return result


def _level_figures(problems: list[Problem], stats: dict[tuple[str, int], dict], skipped: list[Skipped],
                   coverage: float, phase_totals: dict[str, float]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (phase, level), s in sorted(stats.items()):
        kept = sum(p.time(phase) for p in problems if p.level == level)
        dropped = sum(k.entry.time_us for k in skipped  # selected, then failed to run or capped
                      if k.entry.phase == phase and k.entry.level == level and k.entry.layout is not None)
        recorded = s["recorded_us"]
        out[phase][f"level{level}"] = {
            "view": LEVELS[level], "coverage_target": coverage, "recorded_us": recorded, "selected_us": kept,
            "raw_sum": kept / recorded if recorded else 0.0, "unreproducible_us": s["unreproducible_us"],
            "dropped_us": dropped, "cold_entries": s["cold_entries"], "cold_us": s["cold_us"],
            "phase_total_us": phase_totals.get(phase, 0.0),
            "share_of_phase": kept / phase_totals[phase] if phase_totals.get(phase) else None,
            "problems": sum(1 for p in problems if p.level == level and p.time(phase) > 0),
        }
    return dict(out)


def _weights(problems: list[Problem], levels: dict[str, dict[str, dict[str, Any]]], time_source: str,
             coverage: float, traces: list[Trace]) -> dict[str, Any]:
    phases: dict[str, dict[str, Any]] = {}
    for phase, by_level in levels.items():
        entries: dict[str, Any] = {}
        for p in problems:
            t = p.time(phase)
            if t <= 0:
                continue
            figures = by_level[f"level{p.level}"]
            shapes = [{"index": i, "calls": s.calls(phase), "time_us": s.time(phase)}
                      for i, s in enumerate(p.shapes + p.held_out) if s.time(phase) > 0]
            entries[p.key] = {"weight": t / figures["selected_us"],
                              "raw_weight": t / figures["recorded_us"] if figures["recorded_us"] else 0.0,
                              "calls": sum(s.calls(phase) for s in p.shapes + p.held_out), "time_us": t,
                              "shapes": shapes}
        phases[phase] = entries
    return {
        "schema": WEIGHTS_SCHEMA, "source": "trace", "time_source": time_source,
        "estimate": time_source != "device", "coverage": coverage,
        "normalisation": "per phase and per level: level1 (operators) and level2 (modules) are two views of the "
                         "same time, so each level's weights sum to 1 within a phase; raw_weight is the share of "
                         "the level's recorded time and levels.<phase>.<level>.raw_sum their pre-normalisation sum",
        "sizes": sorted({str(t.data.get("size")) for t in traces}),
        "phases": phases, "levels": levels,
        "phase_time_us": {ph: next(iter(lv.values()))["phase_total_us"] for ph, lv in levels.items()},
    }


def _provenance(problems: list[Problem], skipped: list[Skipped], traces: list[Trace]) -> dict[str, Any]:
    def origin(e: Entry) -> dict[str, Any]:
        r = e.record
        base = {"trace": traces[e.trace].path.name, "phase": e.phase, "calls": e.calls, "time_us": e.time_us,
                "inputs": r.get("inputs")}
        if e.level == 1:
            return {**base, "args": r.get("args"), "kwargs": r.get("kwargs")}
        return {**base, "params": r.get("params"), "extra_args": r.get("extra_args")}

    out_problems = {}
    for p in problems:
        shapes = []
        for i, s in enumerate(p.shapes + p.held_out):
            hottest = max(s.entries, key=lambda e: e.time_us)
            shapes.append({"index": i, "held_out": i >= len(p.shapes), "values": s.values,
                           "validated": s.validated, "trace": traces[hottest.trace].path.name,
                           "phase": hottest.phase, "origins": [origin(e) for e in s.entries]})
        first = p.shapes[0].entries[0].record
        ident = {"op": first.get("op"), "overload": first.get("overload") or "default",
                 **kernel_note(str(first.get("op")), first.get("overload"))} if p.level == 1 else \
            {"kind": first.get("kind")}
        out_problems[p.key] = {"source": "op" if p.level == 1 else "module", **ident,
                               "signature": repr(p.layout.signature), "shapes": shapes}
    return {
        "schema": PROVENANCE_SCHEMA,
        "traces": [{"file": t.path.name, "sha256": t.sha256, "recipe": t.data.get("recipe"),
                    "size": t.data.get("size"), "device": t.data.get("device"), "torch": t.data.get("torch"),
                    "dtype": t.data.get("dtype"), "time_source": t.data.get("time_source"),
                    "created": t.data.get("created")} for t in traces],
        "built_with": {"torch": torch.__version__},
        "problems": out_problems,
        "skipped": [k.to_json(traces) for k in sorted(skipped, key=lambda k: -k.entry.time_us)],
    }


def write_suite(result: BuildResult, out: Path, force: bool = False) -> None:
    """Problems under ``out/level*/``, evaluator files under ``out/evaluator/``."""
    clear_suite(out, force)
    for problem in result.problems:
        path = out / f"{problem.key}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_problem(problem.layout, [s.values for s in problem.shapes]))
    write_evaluator_files(out, result.weights, result.provenance, result.heldout)


def clear_suite(out: Path, force: bool) -> None:
    """Refuse to write over a suite in ``out`` unless ``force`` (then remove its level and evaluator folders)."""
    existing = [p for p in (sorted(out.glob("level*")) + [out / "evaluator"]) if p.exists()]
    if existing and not force:
        raise FileExistsError(f"{out} already holds a suite ({', '.join(p.name for p in existing)}); use --force")
    for p in existing:
        shutil.rmtree(p)


def write_evaluator_files(out: Path, weights: dict[str, Any], provenance: dict[str, Any],
                          heldout: dict[str, Any], extra: dict[str, dict[str, Any]] | None = None) -> None:
    folder = out / "evaluator"
    folder.mkdir(parents=True, exist_ok=True)
    files = {"weights.json": weights, "provenance.json": provenance, "heldout.json": heldout, **(extra or {})}
    for name, data in files.items():
        (folder / name).write_text(json.dumps(jsonable(data), indent=1, allow_nan=False) + "\n")


def jsonable(value: Any) -> Any:
    """Strict JSON: non-finite floats (a recorded ``-inf`` fill value) become the strings "inf", "-inf", "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value
