"""The optimisation agent: measure -> profile -> revise, with optimisation dropout and a token budget.

For each problem: start from the reference (or a ``start`` kernel, evaluated as iteration 0), then per iteration
build a prompt from the problem file, the current kernel, the iterations since the last dropout (their public
feedback, ``kbv.agent.feedback``) and retrieved knowledge-base documents; ask the model; evaluate the kernel it
returns on the problem's **public** shapes (the file's own; held-out shapes are stripped from the problem before
the loop sees it); decide; record one ``kbv.agent/1`` line. When the loop stops, the best kernel is scored with the
full protocol on every shape, held-out ones included.

Acceptance: a kernel is accepted only if its verdict is ``correct``, it carries none of the suspicious flags
(``feedback.SUSPICIOUS_FLAGS``), under ``require_custom_kernels`` it does not fall back to library code, and it has
a verified speedup; the first such kernel is accepted (the reference is not a kernel of the target DSL, and a slow
correct kernel is a start), every later one only if the lower bound of its verified speedup interval exceeds the
best kernel's verified speedup (a kernel whose timing was truncated, ``timing_truncated``, has no interval and
cannot beat a best).

Optimisation dropout: after ``patience`` iterations without an accepted kernel, the iteration history is dropped
from the model's context. ``keep-best`` keeps the accepted kernel, its measurements and a one-line summary of what
was dropped; ``reset`` restarts from the reference (the best kernel stays on record and is still the bar to
beat). The audit trail keeps everything.

Stops: ``max_iters`` model iterations, the token budget (prompt + completion tokens as the endpoint reports them;
checked before each call), or the best kernel's roofline attainment reaching ``target_attainment``.

The loop's state is a pure function of its audit lines (``State.apply``), so ``resume`` continues a killed run.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from kbv.agent import feedback as fb
from kbv.agent.audit import AuditLog, add_usage, summarize
from kbv.agent.kb import Hit, KnowledgeBase

DROPOUT_MODES = ("keep-best", "reset")
BACKENDS = ("cuda", "triton", "cpp")
MAX_DOC_CHARS = 3000  # per retrieved document in a prompt
RESUME_FIXED = ("backend", "patience", "dropout", "require_custom_kernels", "kb_per_layer")
SHOWN_HISTORY = 6  # iterations since the last dropout shown with their feedback (the latest kernel in full)

_BACKEND_TEXT = {
    "cuda": "CUDA C++ kernels compiled with torch.utils.cpp_extension.load_inline (cuda_sources=...) at import",
    "triton": "Triton kernels (import triton, triton.language as tl; @triton.jit) launched from forward",
    "cpp": "C++ kernels compiled with torch.utils.cpp_extension.load_inline (cpp_sources=..., no CUDA) at import",
}


class CompletionLike(Protocol):
    text: str
    finish_reason: str | None
    usage: dict
    latency_s: float
    retries_taken: int
    error: str | None


Complete = Callable[[list[dict]], CompletionLike]
Evaluate = Callable[[Any, Path], dict]  # (problem, kernel file) -> a kbv.result/1 record as a dict


@dataclass
class AgentConfig:
    backend: str = "triton"
    max_iters: int = 12
    patience: int = 3
    dropout: str = "keep-best"
    token_budget: int | None = None
    target_attainment: float | None = None
    require_custom_kernels: bool = False
    kb_per_layer: dict[str, int] = field(default_factory=lambda: {"reference": 2, "notes": 2, "docs": 2})
    profile_note: str = ""  # e.g. the size profile the loop's evaluations run at

    def validate(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}")
        if self.dropout not in DROPOUT_MODES:
            raise ValueError(f"dropout must be one of {', '.join(DROPOUT_MODES)}")
        if self.max_iters < 0 or self.patience < 1:
            raise ValueError("max-iters must be >= 0 and patience >= 1")
        if self.token_budget is not None and self.token_budget < 1:
            raise ValueError("token budget must be positive")

    def describe(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("backend", "max_iters", "patience", "dropout", "token_budget",
                                               "target_attainment", "require_custom_kernels", "kb_per_layer")}


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def safe_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "__", key)


def extract_code(text: str, finish_reason: str | None = None) -> tuple[str | None, str]:
    """The kernel file in a reply and the extraction status (``kbv.study.extract``: reasoning blocks stripped, the
    first closed fenced block; ``no_code`` or ``truncated`` give no code)."""
    from kbv.study.extract import extract

    result = extract(text or "", finish_reason, "first")
    return result.code, result.status


class _Plain:
    def __init__(self, data: dict[str, Any]):
        self.data = data

    def to_json(self) -> str:
        return json.dumps(self.data)


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Append a result record (a dict) to a results file through kbv's writer, which signs it (``kbv.attest``)."""
    from kbv.records import RecordWriter

    RecordWriter(path).append(_Plain(record))


def evaluation_summary(record: dict[str, Any]) -> dict[str, Any]:
    sp = fb.verified_speedup(record)
    return {"verdict": record.get("verdict"), "flags": list(record.get("flags") or []),
            "speedup": sp["value"], "ci_low": sp["ci_low"], "ci_high": sp["ci_high"],
            "attainment": fb.attainment(record), "regime": fb.regime(record), "fallback": fb.uses_fallback(record),
            "library_kernels": fb.library_kernels(record)[:20]}


def decide(record: dict[str, Any], best_speedup: float | None, require_custom: bool) -> dict[str, Any]:
    """The acceptance rule (module docstring) for one evaluation record against the best verified speedup so far
    (None: no bar, the first eligible kernel is accepted)."""
    verdict = record.get("verdict")
    if verdict != "correct":
        failed = (record.get("correctness") or {}).get("failed_distributions") or []
        detail = f" (failed {', '.join(failed)})" if failed else ""
        return {"status": "rejected", "reason": f"verdict {verdict}{detail}"}
    suspicious = [f for f in record.get("flags") or [] if f in fb.SUSPICIOUS_FLAGS]
    if suspicious:
        return {"status": "rejected", "reason": f"suspicious flags: {', '.join(suspicious)}"}
    if require_custom and fb.uses_fallback(record):
        libs = fb.library_kernels(record)
        return {"status": "rejected", "reason": "library fallback (--require-custom-kernels)"
                + (f": still uses {', '.join(libs[:10])}" if libs else "")}
    sp = fb.verified_speedup(record)
    if sp["value"] is None:
        return {"status": "rejected", "reason": "no verified speedup measured"}
    if best_speedup is None:
        return {"status": "accepted", "reason": "the first correct kernel"}
    if sp["ci_low"] is None:  # timing_truncated: far slower than the reference, the value is an upper bound
        return {"status": "rejected", "reason": f"not faster: verified speedup at most {sp['value']:.3g} (timing "
                                                f"truncated, no interval) against best {best_speedup:.3g}"}
    if not sp["ci_low"] > best_speedup:
        return {"status": "rejected", "reason": f"not faster: verified speedup CI low {sp['ci_low']:.3g} <= "
                                                f"best {best_speedup:.3g}"}
    return {"status": "accepted", "reason": f"verified speedup CI low {sp['ci_low']:.3g} > best {best_speedup:.3g}"}


@dataclass
class State:
    """A problem's loop state, rebuilt from its audit lines."""

    iteration: int = -1  # the last iteration recorded (0: the start kernel)
    best: dict[str, Any] | None = None  # iteration, kernel_sha256, kernel_file, speedup, ci_low, attainment, ...
    since_improvement: int = 0
    context: list[dict[str, Any]] = field(default_factory=list)  # iterations since the last dropout
    dropped: int = 0  # iterations dropped from the context so far
    base: str = "reference"  # what the prompt asks to improve: reference | best | start
    tokens: dict[str, int] = field(default_factory=lambda: add_usage({}, None))
    has_start: bool = False  # iteration 0 (a given start kernel) was evaluated
    done: bool = False

    @property
    def bar(self) -> float | None:
        return self.best["speedup"] if self.best is not None else None

    def apply(self, entry: dict[str, Any]) -> None:
        kind = entry.get("kind")
        if kind == "summary":
            self.done = True
            return
        if kind != "iteration":
            return
        self.iteration = int(entry["iteration"])
        self.tokens = entry.get("tokens") or add_usage(self.tokens, entry.get("usage"))
        decision = entry.get("decision") or {}
        if decision.get("status") == "accepted":
            self.best = entry["best"]
            self.since_improvement = 0
            self.base = "best"
        elif self.iteration > 0:
            self.since_improvement += 1
        if self.iteration == 0:
            self.has_start = True
            if decision.get("status") != "accepted":
                self.base = "start"  # the model starts from the given kernel, whatever its verdict
        self.context.append({"iteration": self.iteration, "kernel_file": entry.get("kernel_file"),
                             "decision": decision, "feedback": entry.get("feedback", "")})
        if entry.get("dropout"):
            self.dropped += len(self.context)
            self.context = []
            self.since_improvement = 0
            if entry["dropout"]["mode"] == "reset":
                self.base = "reference"
            else:
                self.base = "best" if self.best else ("start" if self.has_start else "reference")


class Agent:
    """Runs the loop for problems, writing under ``out``: audit.jsonl, kernels/<problem>/iter_NNN.py (and
    best.py), prompts/<problem>/iter_NNN.json, final.jsonl (the final kernels' kbv.result/1 records, readable by
    ``kbv report``) and summary.json."""

    def __init__(self, complete: Complete, evaluate: Evaluate, score: Evaluate | None, kb: KnowledgeBase,
                 config: AgentConfig, out: str | Path, endpoint: dict[str, Any] | None = None,
                 profiler: Evaluate | None = None, no_profiler_reason: str = "not requested (--ncu)"):
        config.validate()
        self.complete, self.evaluate, self.score, self.kb = complete, evaluate, score, kb
        self.profiler, self.no_profiler_reason = profiler, no_profiler_reason
        self.config = config
        self.out = Path(out)
        self.audit = AuditLog(self.out / "audit.jsonl")
        self.endpoint = endpoint or {}

    # --- prompts ---
    def _system(self) -> str:
        c = self.config
        lines = [
            "You optimise GPU kernels for kbv, a benchmark that verifies them. Write a complete Python file that "
            f"defines `class ModelNew(nn.Module)` using {_BACKEND_TEXT[c.backend]}: the same constructor arguments "
            "and forward signature as the problem's `Model`, returning the same outputs (shapes and dtypes).",
            "Correctness is checked on several input distributions (negative, tiny, large and mixed-sign values) "
            "and on shapes you are not shown: handle every size (masks, tail loops), never a fixed shape.",
            "Speed is measured against PyTorch with TF32 allowed; a kernel is kept only when it is correct and "
            "measurably faster than the best so far.",
        ]
        if c.require_custom_kernels:
            lines.append("Library code does not count: a forward whose work runs in PyTorch ops, cuBLAS or cuDNN is "
                         "rejected. Replace every library kernel named in the feedback with your own.")
        lines.append("Answer with the whole file in one ```python fenced block.")
        return "\n".join(lines)

    def _user(self, problem: Any, state: State, hits: list[Hit], start_source: str | None) -> str:
        source = Path(problem.path).read_text(encoding="utf-8")
        parts = [f"## Problem {problem.key}\n```python\n{source.rstrip()}\n```"]
        if self.config.profile_note:
            parts.append(self.config.profile_note)
        if state.base == "best" and state.best:
            b = state.best
            kernel = Path(self.out / b["kernel_file"]).read_text(encoding="utf-8")
            parts.append(f"## Best kernel so far (iteration {b['iteration']})\n"
                         f"verified speedup {fb.fmt(b['speedup'])} [CI {fb.fmt(b['ci_low'])}, "
                         f"{fb.fmt(b['ci_high'])}], roofline attainment {fb.fmt(b['attainment'])} "
                         f"({b.get('regime') or 'regime n/a'})\n```python\n{kernel.rstrip()}\n```\n"
                         f"{b.get('feedback', '')}")
        elif state.base == "start" and start_source is not None:
            parts.append(f"## Starting kernel (iteration 0)\n```python\n{start_source.rstrip()}\n```")
        else:
            parts.append("## Starting point\nThe reference `Model` above (PyTorch).")
        if state.dropped:
            best = (f"best so far: iteration {state.best['iteration']}, verified speedup {state.best['speedup']:.3g}"
                    if state.best else "no kernel accepted yet")
            note = ("restarted from the reference" if state.base == "reference" else "kept the best kernel")
            parts.append(f"## Earlier attempts\n{state.dropped} earlier iterations were dropped from this context "
                         f"(optimisation dropout: {note}); {best}. Try a different approach.")
        shown = state.context[-SHOWN_HISTORY:]
        if shown:
            parts.append("## Recent iterations")
            for item in shown:
                d = item["decision"]
                parts.append(f"### Iteration {item['iteration']}: {d.get('status')} ({d.get('reason')})\n"
                             f"{item['feedback']}")
            last = shown[-1]
            if last.get("kernel_file") and last["decision"].get("status") != "accepted":
                path = self.out / last["kernel_file"]
                if path.is_file():
                    parts.append(f"Kernel of iteration {last['iteration']}:\n```python\n"
                                 f"{path.read_text(encoding='utf-8').rstrip()}\n```")
        if hits:
            parts.append("## Reference material")
            for h in hits:
                parts.append(f"### [{h.id}]\n{h.text[:MAX_DOC_CHARS].rstrip()}")
        parts.append("## Task\nWrite an improved `ModelNew`: correct on every input and shape, faster than the "
                     "best so far.")
        return "\n\n".join(parts)

    def _query(self, problem: Any, state: State) -> str:
        text = Path(problem.path).read_text(encoding="utf-8") + "\n" + self.config.backend
        if state.context:
            text += "\n" + state.context[-1]["feedback"]
        return text

    # --- one problem ---
    def run_problem(self, problem: Any, *, start: Path | None = None, resume: bool = False) -> dict[str, Any]:
        """The loop for one problem (``problem`` may carry held-out shapes: the loop strips them; the final score
        uses them)."""
        c = self.config
        key = problem.key
        public = replace(problem, held_out_shapes=())
        kdir = self.out / "kernels" / safe_name(key)
        pdir = self.out / "prompts" / safe_name(key)
        kdir.mkdir(parents=True, exist_ok=True)
        pdir.mkdir(parents=True, exist_ok=True)
        state = State()
        entries = list(self.audit.entries(key)) if resume else []
        self._check_resume(problem, entries)
        for e in entries:
            state.apply(e)
        if state.done:
            return summarize(entries, stop=next((e.get("stop") for e in reversed(entries)
                                                 if e.get("kind") == "summary"), None))
        if not entries:
            if not resume and any(True for _ in self.audit.entries(key)):
                raise FileExistsError(f"{self.audit.path} already has lines for {key}: use --resume or a new --out")
            self._write({"kind": "start", "problem": key, "config": c.describe(), "endpoint": self.endpoint,
                         "problem_sha256": problem.source_sha256, "start": str(start) if start else None,
                         "time": time.time()}, entries)
        if start is not None and state.iteration < 0:
            shutil.copyfile(start, kdir / "iter_000.py")
            self._iteration(public, state, 0, kdir / "iter_000.py", None, None, [], entries)
        start_file = kdir / "iter_000.py"  # the start kernel as recorded (also when resuming without --start)
        start_source = start_file.read_text(encoding="utf-8") if state.has_start and start_file.is_file() else None

        stop = None
        while stop is None:
            attained = (state.best or {}).get("attainment")
            if c.target_attainment is not None and attained is not None and attained >= c.target_attainment:
                stop = "target_attainment"
                break
            if state.iteration >= c.max_iters:
                stop = "max_iters"
                break
            if c.token_budget is not None and state.tokens["total_tokens"] >= c.token_budget:
                stop = "token_budget"
                break
            i = max(state.iteration, 0) + 1
            hits = self.kb.retrieve(self._query(public, state), c.kb_per_layer)
            messages = [{"role": "system", "content": self._system()},
                        {"role": "user", "content": self._user(public, state, hits, start_source)}]
            prompt_text = json.dumps(messages, sort_keys=True)
            (pdir / f"iter_{i:03d}.json").write_text(prompt_text)
            completion = self.complete(messages)
            code, status = extract_code(completion.text, completion.finish_reason) if not completion.error \
                else (None, "error")
            path = None
            if code is not None:
                path = kdir / f"iter_{i:03d}.py"
                path.write_text(code if code.endswith("\n") else code + "\n", encoding="utf-8")
            self._iteration(public, state, i, path, completion, sha256_text(prompt_text), hits, entries, status)
        return self._finish(problem, state, stop, entries)

    def _check_resume(self, problem: Any, entries: list[dict[str, Any]]) -> None:
        """A run continues only with the settings and problem file it started with (the iteration and token
        budgets and the target may change)."""
        key = problem.key
        begun = next((e for e in entries if e.get("kind") == "start"), None)
        if begun is None:
            return
        was, now = begun.get("config") or {}, self.config.describe()
        changed = [k for k in RESUME_FIXED if was.get(k) != now.get(k)]
        if begun.get("problem_sha256") != problem.source_sha256:
            changed.append("the problem file")
        changed += [f"endpoint {k}" for k in ("base_url", "model", "api")
                    if (begun.get("endpoint") or {}).get(k) != self.endpoint.get(k)]
        if changed:
            raise FileExistsError(f"{self.audit.path}: {key} was started with other settings "
                                  f"({', '.join(changed)}): resume with the same ones, or use a new --out")

    def _iteration(self, problem: Any, state: State, i: int, kernel: Path | None, completion: Any,
                   prompt_sha: str | None, hits: list[Hit], entries: list[dict[str, Any]],
                   extraction: str = "ok") -> None:
        c = self.config
        usage = dict(completion.usage or {}) if completion is not None else {}
        record = None
        ncu: dict[str, Any] | None = None
        if completion is not None and completion.error:
            decision = {"status": "model_error", "reason": str(completion.error)[:500]}
            text = f"the model endpoint failed: {str(completion.error)[:500]}"
        elif kernel is None and extraction == "truncated":
            decision = {"status": "no_kernel", "reason": "the reply was cut off by the token limit"}
            text = "your reply was cut off by the token limit before the code was complete: answer more briefly"
        elif kernel is None:
            decision = {"status": "no_kernel", "reason": "the reply has no closed fenced code block"}
            text = "your reply had no closed fenced ```python block: answer with the whole file in one block"
        else:
            record = self._safe_evaluate(self.evaluate, problem, kernel)
            decision = decide(record, state.bar, c.require_custom_kernels)
            if record.get("verdict") == "correct":
                ncu = self._profile(problem, kernel)
            text = fb.public_feedback(record, ncu)
        kernel_sha = hashlib.sha256(kernel.read_bytes()).hexdigest() if kernel is not None else None
        kernel_file = str(kernel.relative_to(self.out)) if kernel is not None else None
        best = state.best
        if decision["status"] == "accepted":
            ev = evaluation_summary(record)
            best = {"iteration": i, "kernel_sha256": kernel_sha, "kernel_file": kernel_file, "speedup": ev["speedup"],
                    "ci_low": ev["ci_low"], "ci_high": ev["ci_high"], "attainment": ev["attainment"],
                    "regime": ev["regime"], "fallback": ev["fallback"], "feedback": text}
        since = 0 if decision["status"] == "accepted" else state.since_improvement + (1 if i > 0 else 0)
        dropout = None
        if since >= c.patience:
            dropout = {"mode": c.dropout, "after_iterations_without_improvement": since,
                       "dropped_iterations": [x["iteration"] for x in state.context] + [i],
                       "kept": {"best_iteration": best["iteration"] if best else None,
                                "context": "best kernel and its measurements" if c.dropout == "keep-best" and best
                                else "the reference"}}
        entry = {"kind": "iteration", "problem": problem.key, "iteration": i, "time": time.time(),
                 "prompt_sha256": prompt_sha, "retrieved": [h.id for h in hits],
                 "usage": {k: usage.get(k) for k in ("prompt_tokens", "completion_tokens", "reasoning_tokens",
                                                       "cached_tokens")},
                 "latency_s": getattr(completion, "latency_s", None),
                 "retries": getattr(completion, "retries_taken", None),
                 "finish_reason": getattr(completion, "finish_reason", None),
                 "kernel_sha256": kernel_sha, "kernel_file": kernel_file,
                 "evaluation": evaluation_summary(record) if record else None, "record": record, "ncu": ncu,
                 "feedback": text, "decision": decision, "dropout": dropout, "best": best,
                 "tokens": add_usage(state.tokens, usage)}
        self._write(entry, entries)
        state.apply(entry)
        if decision["status"] == "accepted":
            shutil.copyfile(kernel, kernel.parent / "best.py")  # after the audit line: the audit is the truth

    def _profile(self, problem: Any, kernel: Path) -> dict[str, Any]:
        """Nsight Compute metrics of a correct kernel (feedback only), or why there are none."""
        if self.profiler is None:
            return {"status": "skipped", "reason": self.no_profiler_reason}
        try:
            return self.profiler(problem, kernel)
        except Exception as exc:
            return {"status": "error", "reason": f"{type(exc).__name__}: {exc}"[:500]}

    @staticmethod
    def _safe_evaluate(fn: Evaluate, problem: Any, kernel: Path) -> dict[str, Any]:
        try:
            return fn(problem, kernel)
        except Exception as exc:  # an evaluator bug must not lose the run: record it as kbv does
            return {"verdict": "runtime_error", "standard_verdict": "runtime_error", "flags": ["harness_error"],
                    "error": {"stage": "harness", "kind": "harness", "message": f"{type(exc).__name__}: {exc}",
                              "log_tail": ""}}

    def _finish(self, problem: Any, state: State, stop: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
        if state.best and self.score is not None:
            kernel = self.out / state.best["kernel_file"]
            record = self._safe_evaluate(self.score, problem, kernel)
            self._write({"kind": "final", "problem": problem.key, "kernel_sha256": state.best["kernel_sha256"],
                         "kernel_file": state.best["kernel_file"], "iteration": state.best["iteration"],
                         "held_out_shapes": len(problem.held_out_shapes), "record": record}, entries)
            if str(record.get("schema", "")).startswith("kbv.result/"):
                its = [e for e in entries if e.get("kind") == "iteration"]
                tagged = {**record, "agent": {"iterations": len([e for e in its if e["iteration"] > 0]),
                                              "best_iteration": state.best["iteration"],
                                              "tokens": state.tokens, "stop": stop}}
                write_record(self.out / "final.jsonl", tagged)
        summary = summarize(entries, stop=stop)
        self._write({"kind": "summary", "problem": problem.key, "stop": stop, "summary": summary}, entries)
        return summary

    def _write(self, entry: dict[str, Any], entries: list[dict[str, Any]]) -> None:
        self.audit.append(entry)
        entries.append(entry)

    # --- many problems ---
    def run(self, problems: list[Any], *, start: Path | None = None, resume: bool = False) -> list[dict[str, Any]]:
        summaries = [self.run_problem(p, start=start, resume=resume) for p in problems]
        (self.out / "summary.json").write_text(json.dumps({"schema": "kbv.agent/1", "kind": "run_summary",
                                                           "problems": summaries}, indent=1, default=str))
        return summaries


# --- kbv's own evaluator and the endpoint client ------------------------------------------------------------

class KbvEvaluator:
    """Evaluates a kernel file with kbv's pipeline (``kbv.eval.evaluate_shapes``) on every shape of the problem
    it is given (the loop gives it the public problem; the final scorer the full one)."""

    def __init__(self, options: Any):
        self.options = options

    def __call__(self, problem: Any, kernel: Path) -> dict[str, Any]:
        from kbv import envinfo
        from kbv.eval import evaluate_shapes
        from kbv.problems.candidates import Candidate

        self.options.validate()
        device = envinfo.resolve_device(self.options.device)
        gpu = envinfo.gpu_indices()[0] if device == "cuda" else None
        record = evaluate_shapes(problem, Candidate.from_path(kernel), self.options, device, gpu)
        return json.loads(record.to_json())


def endpoint_complete(endpoint: Any, *, temperature: float = 0.0, max_tokens: int | None = None) -> Complete:
    """A ``Complete`` over kbv's endpoint client (``kbv.study.client``): one sample per call."""
    from kbv.study.client import complete_sync

    def call(messages: list[dict]) -> CompletionLike:
        return complete_sync(endpoint, messages, n=1, temperature=temperature, max_tokens=max_tokens)[0]

    return call
