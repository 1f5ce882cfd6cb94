"""Import Atrex-Bench operator directories as a kbv suite (``kbv import-atrex DATA_DIR --out SUITE``).

An Atrex operator directory holds ``reference.py`` (``class Model``), ``input.py`` (``_make_inputs(**input_kwargs)
-> dict[str, Tensor]`` keyed by ``forward``'s parameters), ``shapes.json`` (``{id: {init_kwargs|null,
input_kwargs}}``) and, evaluator-side, ``metadata.json`` (``importance_score``, ``phase``, per-shape
``call_count`` / ``total_duration_us``) and ``roofline.json`` (per-shape ``semantic_W_flops{dtype}``,
``semantic_Q_read_bytes``, ``semantic_Q_write_bytes``, ``SOL_time_ms{SKU}``).

Each directory becomes one level-1 problem: the reference and input code embedded (``device='cuda'`` arguments,
``.cuda()`` and ``.to('cuda')`` removed from the input code so that inputs are drawn on kbv's evaluation device),
module constants ``INIT_KWARGS`` / ``INPUT_KWARGS`` for the first shape and ``KBV_SHAPES`` over the visible ones.
``get_inputs()`` returns ``_make_inputs``'s values in ``forward``'s parameter order; ``get_init_inputs()`` maps the
init kwargs onto ``__init__``'s positional order (defaults filled in). A forward returning a dict returns its values
as a tuple (kbv compares tensors or tuples of tensors).

Weights: ``importance_score`` (from ``metadata.json``, else ``operator_importance.json``). Phase rule: ``prefill``
counts in the prefill phase, ``decode`` in the decode phase, ``prefill/decode`` (or ``both``) in both phases with
its full score; weights are then normalised per phase (Atrex's published scores sum to 1.0948, not 1: the raw
sums are recorded). Problems are numbered by importance, most important first. ``held_out`` moves up to N shapes
per problem (positions 2, 4, 6, ... of shapes.json's order, never the first) to ``evaluator/heldout.json``.
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbv.tracesuite.build import CPU_VALIDATION_ELEMENTS, clear_suite, import_source, run_shape, write_evaluator_files
from kbv.tracesuite.weights import HELDOUT_SCHEMA, PROVENANCE_SCHEMA, WEIGHTS_SCHEMA

ROOFLINE_SCHEMA = "kbv.tracesuite.atrex-roofline/1"
PHASES = {"prefill": ("prefill",), "decode": ("decode",), "prefill/decode": ("prefill", "decode"),
          "both": ("prefill", "decode"), "decode/prefill": ("prefill", "decode")}
RESERVED_NAMES = {"_AtrexModel", "_as_outputs", "INIT_KWARGS", "INPUT_KWARGS", "KBV_SHAPES", "get_inputs",
                  "get_init_inputs", "inspect"}
ROOFLINE_FIELDS = ("semantic_W_flops", "semantic_Q_read_bytes", "semantic_Q_write_bytes", "SOL_time_ms")


class AtrexError(ValueError):
    """An Atrex operator directory kbv cannot import."""


@dataclass
class AtrexOperator:
    name: str  # the directory name
    path: Path
    source: str  # the generated problem source
    shape_ids: list[str]  # shapes.json order
    shapes: list[dict[str, Any]]  # {"INIT_KWARGS": ..., "INPUT_KWARGS": ...} per shape id
    metadata: dict[str, Any]
    roofline: dict[str, Any]
    importance: float | None
    phase: str | None
    rewrites: int
    warnings: list[str] = field(default_factory=list)
    key: str = ""
    visible: list[int] = field(default_factory=list)  # positions in shape_ids
    held_out: list[int] = field(default_factory=list)
    validated: dict[int, str] = field(default_factory=dict)


@dataclass
class ImportResult:
    operators: list[AtrexOperator]
    errors: dict[str, str]  # directory -> why it was not imported
    weights: dict[str, Any]
    provenance: dict[str, Any]


# ---------------------------------------------------------------------------------------------------------------
# Source rewriting


def _is_cuda(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.startswith("cuda")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "device":
        return len(node.args) >= 1 and _is_cuda(node.args[0])
    return False


class _StripCuda(ast.NodeTransformer):
    """Remove ``device=<cuda>`` keywords, ``x.cuda()`` and ``x.to(<cuda>)``: tensors follow the default device."""

    def __init__(self) -> None:
        self.count = 0

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        kept = [k for k in node.keywords if not (k.arg == "device" and _is_cuda(k.value))]
        self.count += len(node.keywords) - len(kept)
        node.keywords = kept
        if isinstance(node.func, ast.Attribute) and not node.keywords:
            if node.func.attr == "cuda" and not node.args or \
                    node.func.attr == "to" and len(node.args) == 1 and _is_cuda(node.args[0]):
                self.count += 1
                return node.func.value
        return node


def _parse(path: Path) -> ast.Module:
    try:
        return ast.parse(path.read_text(), filename=str(path))
    except (OSError, SyntaxError) as exc:
        raise AtrexError(f"{path.name}: {exc}") from None


def _split_future(tree: ast.Module) -> tuple[list[str], list[ast.stmt]]:
    future = [a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"
              for a in n.names]
    return future, [n for n in tree.body if not (isinstance(n, ast.ImportFrom) and n.module == "__future__")]


def _top_names(body: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


_GLUE = '''
_AtrexModel = Model


class Model(_AtrexModel):
    """The reference above; a dict output is returned as the tuple of its values, in order."""

    def forward(self, *args):
        return _as_outputs(super().forward(*args))
'''

_FUNCTIONS = '''
def get_inputs():
    made = _make_inputs(**INPUT_KWARGS)
    names = [n for n in inspect.signature(_AtrexModel.forward).parameters if n != "self"]
    unknown = sorted(set(made) - set(names))
    present = [n for n in names if n in made]
    if unknown or present != names[:len(present)]:
        raise KeyError(f"inputs {sorted(made)} do not fill forward{tuple(names)} in order")
    return [made[n] for n in present]


def get_init_inputs():
    params = [p for p in inspect.signature(_AtrexModel.__init__).parameters.values() if p.name != "self"]
    unknown = sorted(set(INIT_KWARGS) - {p.name for p in params})
    if unknown:
        raise TypeError(f"__init__ takes no {unknown}")
    out = []
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in INIT_KWARGS:
            out.append(INIT_KWARGS[p.name])
        elif p.default is not p.empty:
            out.append(p.default)
        else:
            raise TypeError(f"__init__ needs {p.name}")
    return out
'''

_HELPERS = '''
def _as_outputs(out):
    if isinstance(out, dict):
        return tuple(out.values())
    if isinstance(out, list):
        return tuple(out)
    return out
'''


def problem_source(title: str, reference: Path, inputs: Path, shapes: list[dict[str, Any]]) -> tuple[str, int]:
    """The kbv problem for one Atrex operator, and how many CUDA device placements were removed."""
    ref_future, ref_body = _split_future(_parse(reference))
    in_future, in_body = _split_future(_parse(inputs))
    if "Model" not in _top_names(ref_body):
        raise AtrexError("reference.py defines no Model")
    if "_make_inputs" not in _top_names(in_body):
        raise AtrexError("input.py defines no _make_inputs")
    clash = (_top_names(ref_body) & _top_names(in_body)) | ((_top_names(ref_body) | _top_names(in_body))
                                                            & RESERVED_NAMES)
    if clash:
        raise AtrexError(f"reference.py and input.py (or kbv's glue) both define {sorted(clash)}")
    stripper = _StripCuda()
    in_module = stripper.visit(ast.Module(body=in_body, type_ignores=[]))
    future = sorted(set(ref_future) | set(in_future))
    first = shapes[0]
    lines = [f'"""{title}: an operator over {len(shapes)} shape{"s" if len(shapes) != 1 else ""} (KBV_SHAPES; the '
             'module constants are the first). Inputs come from _make_inputs(**INPUT_KWARGS) in forward\'s '
             'parameter order; constructor arguments from INIT_KWARGS in __init__\'s order."""', ""]
    if future:
        lines += [f"from __future__ import {', '.join(future)}", ""]
    lines += ["import inspect", "", "import torch", "import torch.nn as nn", "", "",
              ast.unparse(ast.Module(body=ref_body, type_ignores=[])), "", _GLUE.strip("\n"), "", "",
              ast.unparse(in_module), "", "",
              f"INIT_KWARGS = {first['INIT_KWARGS']!r}", f"INPUT_KWARGS = {first['INPUT_KWARGS']!r}", "", "",
              _FUNCTIONS.strip("\n"), "", "", "KBV_SHAPES = ["]
    lines += [f"    {s!r}," for s in shapes]
    lines += ["]", "", "", _HELPERS.strip("\n"), ""]
    source = "\n".join(lines)
    ast.parse(source)  # the generated file must itself be valid Python
    return source, stripper.count


# ---------------------------------------------------------------------------------------------------------------
# Reading directories


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise AtrexError(f"{path.name}: {exc}") from None


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.replace("-", "_").split("_") if p) or "Operator"


def _literal_ok(value: Any) -> bool:
    try:
        return ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError):
        return False


def read_operator(path: Path, importance_table: dict[str, Any]) -> AtrexOperator:
    for name in ("reference.py", "input.py", "shapes.json"):
        if not (path / name).is_file():
            raise AtrexError(f"no {name}")
    raw_shapes = _json(path / "shapes.json")
    if not isinstance(raw_shapes, dict) or not raw_shapes:
        raise AtrexError("shapes.json has no shapes")
    ids = sorted(raw_shapes, key=lambda k: (int(k) if str(k).isdigit() else float("inf"), str(k)))
    shapes = []
    for sid in ids:
        entry = raw_shapes[sid]
        init, inputs = entry.get("init_kwargs") or {}, entry.get("input_kwargs") or {}
        if not isinstance(init, dict) or not isinstance(inputs, dict):
            raise AtrexError(f"shape {sid}: init_kwargs / input_kwargs must be objects")
        if not (_literal_ok(init) and _literal_ok(inputs)):
            raise AtrexError(f"shape {sid}: kwargs must be Python literals")
        shapes.append({"INIT_KWARGS": init, "INPUT_KWARGS": inputs})
    metadata = _json(path / "metadata.json") if (path / "metadata.json").is_file() else {}
    roofline = _json(path / "roofline.json") if (path / "roofline.json").is_file() else {}
    table = importance_table.get(path.name) or {}
    importance = metadata.get("importance_score", table.get("importance_score"))
    phase = metadata.get("phase", table.get("phase"))
    source, rewrites = problem_source(_camel(path.name), path / "reference.py", path / "input.py", shapes)
    op = AtrexOperator(path.name, path, source, ids, shapes, metadata, roofline,
                       float(importance) if isinstance(importance, (int, float)) else None,
                       str(phase) if phase is not None else None, rewrites)
    if op.importance is None:
        op.warnings.append("no importance_score: weight 0")
    if op.phase not in PHASES:
        op.warnings.append(f"phase {op.phase!r} unknown: counted in both phases")
    if "cuda" in ast.unparse(_parse(path / "reference.py")):
        op.warnings.append("reference.py mentions cuda (left as written)")
    return op


def operator_dirs(data_dir: Path) -> list[Path]:
    if (data_dir / "reference.py").is_file():
        return [data_dir]
    return sorted(p for p in data_dir.iterdir() if p.is_dir() and (p / "reference.py").is_file())


def _validate(op: AtrexOperator) -> None:
    """Run each shape on meta, else on the CPU when its inputs are small; record the outcome per shape."""
    try:
        module = import_source(op.source, "atrex")
    except Exception as exc:  # noqa: BLE001 - reported
        op.validated = {i: f"failed: import: {type(exc).__name__}: {exc}" for i in range(len(op.shapes))}
        return
    for i in op.visible + op.held_out:
        try:
            run_shape(module, op.shapes[i], "meta")
            op.validated[i] = "meta"
            continue
        except Exception as exc:  # noqa: BLE001 - reported
            meta_error = type(exc).__name__
        if not _small(op.shapes[i]):
            op.validated[i] = f"no (meta: {meta_error}; too large for the CPU)"
            continue
        try:
            run_shape(module, op.shapes[i], "cpu")
            op.validated[i] = "cpu"
        except Exception as exc:  # noqa: BLE001 - reported
            op.validated[i] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"


def _small(shape: dict[str, Any]) -> bool:
    """A rough size test: the product of the integers in the input kwargs."""
    n = 1
    for v in shape["INPUT_KWARGS"].values():
        for x in (v if isinstance(v, list) else [v]):
            if isinstance(x, int) and not isinstance(x, bool) and x > 0:
                n *= x
    return n <= CPU_VALIDATION_ELEMENTS


# ---------------------------------------------------------------------------------------------------------------
# The import


def import_atrex(data_dir: str | Path, out: str | Path, held_out: int = 0, validate: bool = True,
                 force: bool = False) -> ImportResult:
    data_dir, out = Path(data_dir), Path(out)
    table_path = data_dir / "operator_importance.json"
    table = _json(table_path) if table_path.is_file() else {}
    importance_table = table.get("operators") or {}
    operators, errors = [], {}
    for path in operator_dirs(data_dir):
        try:
            operators.append(read_operator(path, importance_table))
        except AtrexError as exc:
            errors[path.name] = str(exc)
    if not operators:
        raise AtrexError(f"no importable Atrex operator directories under {data_dir}: {errors}")
    operators.sort(key=lambda o: (-(o.importance or 0.0), o.name))
    for rank, op in enumerate(operators, 1):
        op.key = f"level1/{rank}_{_camel(op.name)}"
        held = [r for r in range(1, len(op.shapes), 2)][:max(0, held_out)]
        op.held_out, op.visible = held, [i for i in range(len(op.shapes)) if i not in held]
        op.source = problem_source(_camel(op.name), op.path / "reference.py", op.path / "input.py",
                                   [op.shapes[i] for i in op.visible])[0]
        if validate:
            _validate(op)

    clear_suite(out, force)
    for op in operators:
        target = out / f"{op.key}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(op.source)
    weights = _weights(operators, table)
    provenance = _provenance(operators, data_dir, table_path if table else None)
    heldout = {"schema": HELDOUT_SCHEMA,
               "problems": {op.key: [op.shapes[i] for i in op.held_out] for op in operators if op.held_out}}
    write_evaluator_files(out, weights, provenance, heldout, {"roofline.json": _roofline(operators)})
    return ImportResult(operators, errors, weights, provenance)


def _ordered(op: AtrexOperator) -> list[int]:
    """Shape positions in the problem's index order: visible (KBV_SHAPES order) then held out."""
    return op.visible + op.held_out


def _weights(operators: list[AtrexOperator], table: dict[str, Any]) -> dict[str, Any]:
    phases: dict[str, dict[str, Any]] = {"prefill": {}, "decode": {}}
    raw = {"prefill": 0.0, "decode": 0.0}
    for op in operators:
        for phase in PHASES.get(op.phase or "", ("prefill", "decode")):
            raw[phase] += op.importance or 0.0
    for op in operators:
        meta_shapes = op.metadata.get("shapes") or {}
        shapes = []
        for index, pos in enumerate(_ordered(op)):
            m = meta_shapes.get(op.shape_ids[pos]) or {}
            shapes.append({"index": index, "calls": m.get("call_count"), "time_us": m.get("total_duration_us")})
        known_calls = [s["calls"] for s in shapes if isinstance(s["calls"], int)]
        known_time = [s["time_us"] for s in shapes if isinstance(s["time_us"], (int, float))]
        for phase in PHASES.get(op.phase or "", ("prefill", "decode")):
            phases[phase][op.key] = {
                "weight": (op.importance or 0.0) / raw[phase] if raw[phase] else 0.0,
                "raw_weight": op.importance or 0.0, "importance_score": op.importance,
                "calls": sum(known_calls) if known_calls else None,
                "time_us": sum(known_time) if known_time else None, "shapes": shapes}
    published = sum(float(v.get("importance_score") or 0.0) for v in (table.get("operators") or {}).values())
    return {
        "schema": WEIGHTS_SCHEMA, "source": "atrex", "time_source": "device", "estimate": False, "coverage": None,
        "normalisation": "per phase: importance_score / the sum over the operators counted in that phase; "
                         "'prefill/decode' (or 'both') counts in both phases with its full score",
        "importance_sum": sum(op.importance or 0.0 for op in operators),
        "published_importance_sum": published if table else None,
        "phases": {p: v for p, v in phases.items() if v},
        "levels": {p: {"level1": {"view": "operators", "raw_sum": raw[p],
                                  "problems": len(phases[p])}} for p in phases if phases[p]},
        "phase_time_us": None,
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _provenance(operators: list[AtrexOperator], data_dir: Path, table_path: Path | None) -> dict[str, Any]:
    problems = {}
    for op in operators:
        meta_shapes = op.metadata.get("shapes") or {}
        shapes = []
        for index, pos in enumerate(_ordered(op)):
            sid = op.shape_ids[pos]
            shapes.append({"index": index, "atrex_shape": sid, "held_out": pos in op.held_out,
                           "init_kwargs": op.shapes[pos]["INIT_KWARGS"],
                           "input_kwargs": op.shapes[pos]["INPUT_KWARGS"],
                           "validated": op.validated.get(pos, "not run"), "metadata": meta_shapes.get(sid)})
        files = {p.name: _sha256(p) for p in sorted(op.path.iterdir()) if p.is_file()}
        problems[op.key] = {
            "source": "atrex", "operator": op.name, "atrex_id": op.metadata.get("id"),
            "status": op.metadata.get("status"), "origin": op.metadata.get("origin"), "phase": op.phase,
            "dtype": op.metadata.get("dtype"), "importance_score": op.importance, "files": files,
            "cuda_rewrites": op.rewrites, "warnings": op.warnings, "shapes": shapes}
    return {"schema": PROVENANCE_SCHEMA, "source": "atrex", "data_dir": str(data_dir),
            "operator_importance": {"file": table_path.name, "sha256": _sha256(table_path)} if table_path else None,
            "traces": [], "problems": problems}


def _roofline(operators: list[AtrexOperator]) -> dict[str, Any]:
    problems = {}
    for op in operators:
        table = op.roofline.get("shapes") or {}
        shapes = []
        for index, pos in enumerate(_ordered(op)):
            sid = op.shape_ids[pos]
            entry = table.get(sid) or {}
            shapes.append({"index": index, "atrex_shape": sid, **{k: entry.get(k) for k in ROOFLINE_FIELDS}})
        problems[op.key] = {"shapes": shapes}
    return {"schema": ROOFLINE_SCHEMA,
            "note": "Atrex's semantic work and traffic per shape (W in FLOPs per dtype, Q in bytes) and its SOL "
                    "times per SKU, as published; index = the problem's shape index (visible, then held out)",
            "problems": problems}
