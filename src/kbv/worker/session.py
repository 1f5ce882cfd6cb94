"""Worker process entry point: serves one role (reference or candidate) for one stage, then exits.

The parent sends commands; the worker replies with raw data (outputs, times, byte counts), never conclusions.
Everything the worker relies on after the candidate is imported (tensor methods, timers, encoders) is captured
here at import time, which happens in kbv's launcher (``kbv.worker.zygote``) before any candidate code exists.
"""

from __future__ import annotations

import math
import os
import resource
import sys
import tempfile
import threading
import time
import traceback
from multiprocessing.connection import Connection
from functools import partial
from typing import Any, Callable

import torch

from kbv import wire
from kbv.worker import confine
from kbv.protocol import (BASELINES, BURST_INPUT_SETS, CHANGED_KEPT_MAX, DEFERRED_WRITE_WAIT_S, DISTRIBUTIONS,
                          FIRST_TIMED_CALL, TIMING_RULES,
                          WORKER_FILE_BYTES_MAX, ask_spin_s, timed_call)
from kbv.worker import (backends, commit, diagnose, guard, handoff, inputs, integrity, kernel_record, lending, loading,
                        memory, recorder, timer)

_Tensor = torch.Tensor
_as_subclass = torch.Tensor.as_subclass
_monotonic = time.monotonic
_DISTRIBUTIONS = {d.name: d for d in DISTRIBUTIONS}
# Replies whose outputs go to the judge: large ones leave a candidate worker as descriptors (kbv.worker.handoff)
HANDOFF_COMMANDS = frozenset({"forward", "fallback", "kept"})
# The reference's state (parameters and buffers) leaves as sealed host memfds: the parent keeps the descriptors and
# hands the same ones to every later worker of the pair (no pipe copies; nobody can change them).
STATE_COMMANDS = frozenset({"setup", "perturb", "state"})
# A reference worker keeps the outputs (and lent inputs) of this many trials: the one the candidate runs and the
# next, whose forward the parent has the reference run meanwhile (kbv.eval.correctness, pipelined trials)
KEPT_TRIALS = 2
# Commands whose message carries a candidate's outputs to the judge, and the size from which the judge empties
# PyTorch's device cache after one (kbv.worker.handoff: exports allocate outside that cache)
RELEASE_AFTER = frozenset({"judge", "same", "precision"})
RELEASE_BYTES = 256 * 2**20


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equality with NaN equal to NaN, for telling whether forward wrote into an input."""
    if _Tensor.equal(a, b):
        return True
    if _Tensor.is_floating_point(a):
        return bool(((a == b) | (_Tensor.isnan(a) & _Tensor.isnan(b))).all())
    return False


def _thread_count() -> int:
    """Threads of this process (every thread, not only Python's), from /proc."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _span(t: torch.Tensor) -> tuple[int, int] | None:
    """[first, last + 1) of the bytes a tensor's elements occupy, or None for an empty one."""
    if _Tensor.numel(t) == 0:
        return None
    extent = sum((size - 1) * abs(stride) for size, stride in zip(t.shape, _Tensor.stride(t)))
    start = _Tensor.data_ptr(t)
    return start, start + (extent + 1) * _Tensor.element_size(t)


def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors overlap in memory: the same storage and overlapping bytes (inputs the judge lends are
    views of one buffer, each in bytes of its own)."""
    try:
        if not _Tensor.untyped_storage(a).data_ptr() == _Tensor.untyped_storage(b).data_ptr() != 0:
            return False
    except RuntimeError:
        return False
    sa, sb = _span(a), _span(b)
    return sa is not None and sb is not None and sa[0] < sb[1] and sb[0] < sa[1]


def _aliases(items: list[Any], inputs: list[Any]) -> list[list[int]]:
    """[output, input] index pairs of a call's described outputs that share storage with its inputs."""
    return [[k, i] for k, item in enumerate(items) if "tensor" in item
            for i, a in enumerate(inputs) if type(a) is _Tensor and _shares_storage(item["tensor"], a)]


class KeptStore:
    """Where the timed calls' kept output copies live on the CPU: carved from blocks of ``KEPT_BLOCK_BYTES``, each
    its own mapping (above glibc's largest heap-served size), so the copies never sit in the heap between the
    outputs the forward allocates and frees. Copies in the heap left each freed output a hole the next
    (64-byte-aligned) output could not reuse, and a worker's resident set then rose by up to one more ring of
    outputs at random, in either role (the whole timing stage's memory rule saw it as a held workspace). A copy
    of ``KEPT_BLOCK_BYTES`` or more gets a block of its own; on a GPU copies are plain clones."""

    def __init__(self) -> None:
        self.block: Any = None
        self.used = 0

    def copy(self, tensor: Any) -> Any:
        if tensor.device.type != "cpu" or tensor.layout is not torch.strided or tensor.is_quantized:
            return _Tensor.clone(tensor, memory_format=torch.contiguous_format)
        nbytes = int(_Tensor.numel(tensor)) * int(_Tensor.element_size(tensor))
        size = (nbytes + 63) // 64 * 64  # every copy 64-byte aligned, as the allocator's own
        if size >= KEPT_BLOCK_BYTES:
            return _Tensor.clone(tensor, memory_format=torch.contiguous_format)  # mapped on its own already
        if self.block is None or self.used + size > KEPT_BLOCK_BYTES:
            self.block, self.used = torch.empty(KEPT_BLOCK_BYTES, dtype=torch.uint8), 0
        view = self.block[self.used:self.used + nbytes].view(tensor.dtype).view(tuple(_Tensor.size(tensor)))
        self.used += size
        view.copy_(tensor)
        return view

    def clear(self) -> None:
        self.block, self.used = None, 0


KEPT_BLOCK_BYTES = 64 * 2**20  # above glibc's largest mmap threshold (32 MiB): each block is a mapping of its own


def _copied(out: Any, inputs: list[Any] | None = None,
            store: KeptStore | None = None) -> tuple[str, list[Any], list[list[int]]]:
    """``_describe_output`` with every tensor copied now (what the call returned, whatever happens to it later;
    into ``store`` where given), and the outputs that share storage with ``inputs`` (``_aliases``)."""
    structure, items = _describe_output(out)
    aliased = _aliases(items, inputs) if inputs else []
    # contiguous copies: the judge compares values, and digesting one costs the same whatever the output's layout
    return structure, [dict(item, tensor=store.copy(item["tensor"]) if store is not None else
                            _Tensor.clone(item["tensor"], memory_format=torch.contiguous_format))
                       if "tensor" in item else item for item in items], aliased


def _own(model: torch.nn.Module) -> list[list[Any]]:
    """Name, shape and dtype of every parameter and buffer of a model, in its order (``kbv.eval.params``)."""
    return [[name, list(_Tensor.size(t)), str(t.dtype).removeprefix("torch.")]
            for name, t in loading.state_of(model).items()]


def _describe_output(out: Any) -> tuple[str, list[Any]]:
    """Flatten a forward result into (structure, items); non-tensors become descriptions, not data."""
    if isinstance(out, (tuple, list)):
        structure, items = type(out).__name__, list(out)
    else:
        structure, items = "single", [out]
    described: list[Any] = []
    for item in items:
        if type(item) is _Tensor:
            described.append({"tensor": _Tensor.detach(item), "stride": list(_Tensor.stride(item)),
                              "device": str(_Tensor.device.__get__(item))})
        elif isinstance(item, _Tensor):
            # A subclass fails the verified check by type alone; its data still goes back, as a plain tensor,
            # so the standard protocol (which, like KernelBench, accepts subclasses) can be judged faithfully.
            name = type(item).__module__ + "." + type(item).__qualname__
            try:
                plain = _Tensor.detach(_as_subclass(item, _Tensor))
                described.append({"subclass": name, "tensor_data": plain})
            except Exception:
                described.append({"not_a_tensor": name})
        else:
            described.append({"not_a_tensor": type(item).__module__ + "." + type(item).__qualname__})
    return structure, described


def _tensor_bytes(x: Any) -> int:
    """Bytes of every tensor anywhere in a received message."""
    if isinstance(x, _Tensor):
        return int(_Tensor.numel(x)) * int(_Tensor.element_size(x))
    if isinstance(x, dict):
        return sum(_tensor_bytes(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return sum(_tensor_bytes(v) for v in x)
    return 0


def _on_device(reply: dict[str, Any], device: str) -> dict[str, Any]:
    """A relayed candidate reply's outputs on the judge's device; an output whose handoff failed to import stands
    as what it is, not a tensor (judged wrong)."""
    outputs = []
    for item in reply.get("outputs", []):
        item = dict(item)
        for key in ("tensor", "tensor_data"):
            value = item.get(key)
            if isinstance(value, dict) and "handoff_error" in value:
                item = {"not_a_tensor": "output handoff failed: " + str(value["handoff_error"])}
                break
            if isinstance(value, _Tensor):
                item[key] = value.to(device)
        outputs.append(item)
    return dict(reply, outputs=outputs)


class Session:
    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        self.device: str = spec["device"]
        self.precision: str = spec["precision"]
        self.problem = loading.load_problem_module(spec["problem_path"], spec.get("profile"), spec.get("shape"),
                                                   source=spec.get("problem_source"))
        self.candidate = None
        self.model: torch.nn.Module | None = None
        # reference role, by the trial tag of the forward that made them (``trial``, None where untagged): the
        # outputs of the last KEPT_TRIALS forwards, on device, and the inputs lent for them with those its own call
        # wrote into (kbv.worker.lending); the parent runs the next trial's forward while the candidate runs this one
        # (each with the seed and distribution its inputs were drawn from: a failed trial's strict run, ``_recheck``)
        self.kept: dict[Any, tuple[str, list[Any], tuple[int, str]]] = {}
        self.lent: dict[Any, tuple[lending.Lent, set[int]]] = {}
        self.timing_inputs: list[Any] | None = None  # what the timed forward is called on (own buffers or lent)
        self.own_inputs: list[Any] | None = None  # the buffers this worker loads its own draws into
        # timed inputs a lender lends (kbv.eval.lent_timing): in the lender, the slot of each role (it fills one before
        # each of that role's timed calls and reads it back before the next); in a timing worker, its views of its own
        self.timed_lent: dict[str, lending.Lent] = {}
        self.timed_slot: list[Any] | None = None
        # in the lender, each slot's next inputs drawn ahead ((seed, distribution), draw), and the work to run once
        # the current reply has gone (``after_reply``: that draw, off the path of the fill's answer)
        self.drawn_ahead: dict[str, tuple[tuple[int, str], list[Any]]] = {}
        self.after_reply: Callable[[], None] | None = None
        self.loads: dict[int, int] = {}  # nanoseconds each call's draw and load took, by call index (one baseline)
        self.rings: dict[Any, list[Any]] = {}  # kept timed outputs until the parent draws the judged ones
        self.kept_store = KeptStore()  # where their copies live on the CPU
        self.digest_ns = 0  # time spent digesting kept outputs (a diagnostic of the timing command's split)
        self.copy_ns = 0  # time spent copying kept outputs (the same)
        self.ask_ns = 0  # time spent waiting for the parent's answers (the same; set by main's ``ask``)
        self.receive_ns = 0  # receiving the command being served, its descriptors imported (set by ``main``)
        self.send_ns = 0  # the last reply's split and send, its outputs exported (set by ``main``)
        self.release_ns = 0  # the cache given back after the last reply (``RELEASE_AFTER``, set by ``main``)
        # sends a kept output's digest to the parent as its trial ends (kbv.worker.commit; set by main)
        self.commit: Callable[[list[Any]], None] | None = None
        # asks the parent for a timed call's seed and distribution when the call is due (kbv.eval.pacing; set by main)
        self.ask: Callable[[list[Any]], dict[str, Any]] | None = None
        self.committed: dict[tuple[Any, ...], list[list[int]]] = {}  # what was sent, by (round, baseline, index)
        self.warmed: set[str] = set()  # baselines this worker's timed forward has been warmed up under
        # a timing worker that records (set up with ``record``): one profiler session from its set-up to the parent's
        # ``recorded`` command, its collection on only around each forward of its timing commands
        self.recording: kernel_record.Recording | None = None
        self.in_use_baseline: int | None = None  # device memory in use before the model (and candidate) existed
        self.integrity = integrity.Integrity()  # before any candidate code: the state to compare against
        self.threads_at_start = set(threading.enumerate())

    # -- commands -------------------------------------------------------------------------------------------------

    def cmd_import(self, msg: dict[str, Any]) -> dict[str, Any]:
        t0 = _monotonic()
        self.candidate = loading.import_file(self.spec["candidate_path"], "kbv_candidate")
        cls = getattr(self.candidate, "ModelNew", None)
        if not isinstance(cls, type) or not issubclass(cls, torch.nn.Module):
            raise ImportError("the candidate defines no class ModelNew(nn.Module)")
        return {"import_seconds": _monotonic() - t0}

    def warm(self) -> float:
        """Start CUDA in this process before any candidate code and before the hello (the parent starts workers
        ahead of their use: the runtime's start then overlaps other work), and in the reference's worker load the
        judge's kernels too (``judge.warm``; its fused ones where the parent expects large outputs,
        ``judge_kernels``: a fresh process would otherwise import Triton at its first comparison), and in both roles'
        timing workers the digest's (``commit.warm``); the seconds it took, 0 on the CPU."""
        if not self.device.startswith("cuda"):
            return 0.0
        t0 = time.perf_counter()
        memory.device_in_use(self.device)
        if self.spec.get("role") == "reference":
            from kbv import judge  # candidate workers never load the judge

            judge.warm(self.device, fused=bool(self.spec.get("judge_kernels")))
        if self.spec.get("stage") == "performance":  # both roles' timing workers digest every kept output
            commit.warm(self.device)
        return time.perf_counter() - t0

    def cmd_setup(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Build the model from the parent's seed and load the state it sent. Replies also say how long the
        first touch of the device took (``cuda_init_s``: starting CUDA in this process, unless the candidate's
        import already had; a diagnostic of the record's time breakdown that decides nothing)."""
        t0 = time.perf_counter()
        if self.in_use_baseline is None:
            self.in_use_baseline = memory.device_in_use(self.device)
        timing: dict[str, Any] = {"cuda_init_s": time.perf_counter() - t0 if self.device.startswith("cuda") else 0.0}
        if msg.get("record") and self.recording is None:  # a timing worker that records: its one session starts
            t_record = time.perf_counter()  # here, before any candidate code, and stays until ``recorded``
            self.recording = kernel_record.Recording(self.device)
            self.recording.start()
            timing["record_warm"] = {"status": self.recording.status.get("status"),
                                     "seconds": round(time.perf_counter() - t_record, 4)}
        init_args = loading.init_inputs(self.problem)
        if self.spec["role"] == "reference":
            self.model = loading.build_model(self.problem.Model, init_args, msg["init_seed"], self.device,
                                             self.precision, self.spec["mode"])
            if "state" in msg:  # timing: load the same state the candidate loads, so both allocate alike
                loading.load_matching_state(self.model, msg["state"])
                return timing
            facts = {"shapes": loading.shapes_of(self.problem), "device": self._device_info(), **timing}
            if msg.get("describe"):  # correctness: the pairing needs names, shapes and dtypes; the state goes once
                return {"own": _own(self.model), **facts}
            return {"state": loading.state_of(self.model), **facts}
        if self.candidate is None:
            self.cmd_import({})
        self.model = loading.build_model(self.candidate.ModelNew, init_args, msg["init_seed"], self.device,
                                         self.precision, self.spec["mode"])
        matched, candidate_only, reference_only = loading.load_matching_state(self.model, msg.get("state", {}))
        return {"matched": matched, "candidate_only": candidate_only, "reference_only": reference_only,
                "own": _own(self.model), "started_threads": self._started_threads(), **timing}

    def _started_threads(self) -> list[dict[str, str]]:
        """Python threads the candidate's import or ``__init__`` started that are still alive: a thread that exists
        before any forward can take work handed over by forward without the thread count ever growing."""
        started = []
        for thread in threading.enumerate():
            if thread in self.threads_at_start or not thread.is_alive():
                continue
            target = getattr(thread, "_target", None)
            code = getattr(target, "__code__", None)
            started.append({"name": thread.name, "daemon": str(thread.daemon),
                            "target": getattr(target, "__qualname__", type(target).__name__),
                            "module": str(getattr(target, "__module__", "")),
                            "file": code.co_filename if code is not None else ""})
        return started

    def cmd_perturb(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Reference role: fresh noise on every floating parameter; replies with the new state for the candidate."""
        if self.spec["role"] != "reference" or self.model is None:
            raise RuntimeError("perturb: reference role only")
        names = loading.perturb_parameters(self.model, int(msg["seed"]))
        return {"state": loading.state_of(self.model), "perturbed": names}

    def cmd_state(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Reference role: the model's state as built from the seed (where the candidate's tensors do not all pair
        with it, and so are not perturbed)."""
        if self.spec["role"] != "reference" or self.model is None:
            raise RuntimeError("state: reference role only")
        return {"state": loading.state_of(self.model)}

    def cmd_load(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Load same-name, same-shape tensors of ``state`` into the model (the candidate after ``perturb``)."""
        assert self.model is not None
        matched, candidate_only, reference_only = loading.load_matching_state(self.model, msg["state"])
        return {"matched": matched, "candidate_only": candidate_only, "reference_only": reference_only}

    def _inputs(self, seed: int, distribution: str) -> list[Any]:
        return inputs.make_inputs(self.problem, seed, self.device, self.precision, _DISTRIBUTIONS[distribution],
                                  tuple(self.spec.get("unscaled", ())))

    def cmd_forward(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Run one trial. A candidate sends its outputs back (host copies); the reference keeps its outputs on the
        device for ``judge`` and sends only their description."""
        assert self.model is not None
        t_start = time.perf_counter()
        if msg.get("baseline") is not None:  # a timed call judged: under the flags it was timed under (TF32 or not)
            if msg["baseline"] not in BASELINES:
                raise KeyError(msg["baseline"])
            self.integrity.flags_set(backends.apply_baseline(msg["baseline"]))
        args, guards, lent = self._trial_inputs(msg)
        t_inputs = time.perf_counter()
        tensor_args = [(i, a) for i, a in enumerate(args) if type(a) is _Tensor]
        lend, lend_error = None, None
        tag = msg.get("trial")
        if msg.get("lend") and self.spec["role"] == "reference":  # a copy for the candidate, before this call
            self._drop_lent(tag)
            while len(self.lent) >= KEPT_TRIALS:
                self._drop_lent(next(iter(self.lent)))
            try:
                lend = lending.Lent(args, int(msg["lend"]), int(msg["seed"]), self.device,
                                    tuple(self.spec.get("handoff") or ("host",)))
            except (lending.LendError, handoff.HandoffError, OSError, RuntimeError) as exc:
                lend_error = f"{type(exc).__name__}: {str(exc)[:300]}"
        t_lend = time.perf_counter()
        # whether forward writes into an input: lent inputs are compared by the judge; the reference's own, where it
        # lends a copy, against that copy (not yet handed over: no clone, a whole input less on the device)
        before = ([] if lent or lend is not None or msg.get("check_mutation") is False
                  else [(i, _Tensor.clone(a)) for i, a in tensor_args])
        t_copy = time.perf_counter()
        poison = msg.get("poison")
        canary, poisoned = None, None
        if poison:  # last before the call: freed blocks of the sizes it allocates hold the poison byte
            sizes = [int(n) for n in poison["sizes"]]
            poisoned = [memory.poison_freed(self.device, int(poison["byte"]), sizes, memory.POISON_COPIES),
                        memory.POISON_COPIES * sum(sizes)]
            canary = memory.perturb_canary() if self.device == "cpu" else None
        threads_before = _thread_count()
        t_forward = time.perf_counter()
        with torch.no_grad():
            out = self.model(*args)
        self._sync()
        t_done = time.perf_counter()
        forward_ms = (t_done - t_forward) * 1e3  # this process's own clock: a diagnostic only
        if canary is not None and memory.perturb_canary() != canary:  # the poison, verified after the call
            self.integrity.note("allocator poison (glibc M_PERTURB) turned off during the call")
        threads_after = _thread_count()
        structure, items = _describe_output(out)
        usage = {
            "guard_violations": guard.violations(guards),
            "nbytes": [_Tensor.numel(item["tensor"]) * _Tensor.element_size(item["tensor"]) if "tensor" in item
                       else 0 for item in items],
            "input_nbytes": [_Tensor.numel(a) * _Tensor.element_size(a) for _, a in tensor_args],
            "threads": [threads_before, threads_after],
            "forward_ms": forward_ms,
            "poisoned_bytes": poisoned,  # CUDA: [placed, asked], the poison blocks that fit (memory.poison_freed)
            "shapes": [list(item["tensor"].shape) if "tensor" in item else None for item in items],
            "strides": [item.get("stride") for item in items],
            "mutated_inputs": (lend.written_since_copied() if lend is not None
                               else [i for (i, a), (_, b) in zip(tensor_args, before) if not _same(a, b)]),
            "aliased_outputs": [[k, i] for k, item in enumerate(items) if "tensor" in item
                                for i, a in tensor_args if _shares_storage(item["tensor"], a)],
        }
        if self.spec["role"] == "reference":
            self.kept.pop(tag, None)
            while len(self.kept) >= KEPT_TRIALS:
                del self.kept[next(iter(self.kept))]
            self.kept[tag] = (structure, items, (int(msg["seed"]), str(msg["distribution"])))
            reply = {"structure": structure, "n_outputs": len(items), **usage}
            if lend is not None:
                self.lent[tag] = (lend, set(usage["mutated_inputs"]))
                reply["lent"] = lend.message()
            elif lend_error is not None:
                reply["lend_error"] = lend_error
        else:
            reply = {"structure": structure, "outputs": items, **usage}
        # where the command's time went besides the call, by this process's clock (a diagnostic only): the command
        # received (lent inputs mapped), inputs drawn or viewed, a copy lent, inputs copied to see writes, the
        # poison placed (and the thread count read), the outputs described and checked; and the last reply's send
        # (outputs exported) and the cache given back after it (``main``)
        ms = lambda a, b: round((b - a) * 1e3, 3)  # noqa: E731
        reply["forward_split_ms"] = {
            "receive": round(self.receive_ns / 1e6, 3), "inputs": ms(t_start, t_inputs), "lend": ms(t_inputs, t_lend),
            "copy": ms(t_lend, t_copy), "poison": ms(t_copy, t_forward), "after": ms(t_done, time.perf_counter()),
            "send_last": round(self.send_ns / 1e6, 3), "release_last": round(self.release_ns / 1e6, 3)}
        return reply

    def _trial_inputs(self, msg: dict[str, Any]) -> tuple[list[Any], list[Any], bool]:
        """A trial's inputs: views of the buffer the judge lent (``lent``: candidate role, ``kbv.worker.lending``),
        or drawn here from the trial's seed, between guard bands of this worker's own when ``guard_bytes`` asks.
        Returns the inputs, the bands to check here, and whether they were lent."""
        lent = msg.get("lent")
        if isinstance(lent, dict) and self.spec["role"] == "candidate":
            buffer = lent.get("buffer")
            if type(buffer) is not _Tensor:
                raise RuntimeError(f"the lent inputs could not be mapped: {buffer!r}"[:400])
            return lending.views(buffer, lent["layout"]), [], True
        seed = int(msg["seed"])
        args = self._inputs(seed, msg["distribution"])
        guards: list[tuple[int, torch.Tensor, torch.Tensor, int]] = []
        if msg.get("guard_bytes"):
            args, guards = guard.surround(args, int(msg["guard_bytes"]), seed)
        return args, guards, False

    def _drop_lent(self, tag: Any) -> None:
        """Release the buffer lent for trial ``tag`` (reference role)."""
        lent = self.lent.pop(tag, None)
        if lent is not None:
            lent[0].close()

    def cmd_fallback(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Candidate role only: one forward (the parent's seed and distribution) under kbv.worker.recorder's
        recorder. Replies like ``forward`` (the reference judges it) plus the raw profile; the parent classifies."""
        if self.spec["role"] != "candidate":
            raise RuntimeError("fallback: candidate role only")
        assert self.model is not None
        model = self.model
        args, guards, _ = self._trial_inputs(msg)
        ext_dir = self.spec.get("env", {}).get("TORCH_EXTENSIONS_DIR")
        roots = [ext_dir] if ext_dir else []
        own = recorder.candidate_modules(roots)  # for the recorder; listed again after the call, for the reply
        kernels = None
        if self.device.startswith("cuda"):  # the same call under torch.profiler too: device time per kernel
            from torch.profiler import ProfilerActivity, profile as gpu_profile, record_function

            with gpu_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                with record_function(recorder.FORWARD_RANGE), torch.no_grad():
                    out, profile = recorder.profile_call(lambda: model(*args), own_modules=own)
                self._sync()
            kernels = recorder.gpu_kernel_events(prof)
        else:
            with torch.no_grad():
                out, profile = recorder.profile_call(lambda: model(*args), own_modules=own)
        self._sync()
        structure, items = _describe_output(out)
        return {"structure": structure, "outputs": items, "fallback": profile, "gpu_kernels": kernels,
                "guard_violations": guard.violations(guards), "modules": recorder.candidate_modules(roots)}

    def cmd_judge(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Reference role only: compare a candidate's outputs (data relayed by the parent) with those kept from the
        forward of the same trial tag (``trial``), which are then released."""
        tag = msg.get("trial")
        if self.spec["role"] != "reference" or tag not in self.kept:
            raise RuntimeError("judge: no reference outputs kept for this trial")
        from dataclasses import asdict

        from kbv import judge  # imported here: candidate workers never load the judge

        t0 = time.perf_counter_ns()
        candidate = _on_device(msg["candidate"], self.device)
        structure, items, draw = self.kept.pop(tag)
        reference = {"structure": structure, "outputs": items}
        comparison = judge.compare_outputs(candidate, reference, msg["precision"])
        if not comparison.passed and math.isfinite(comparison.error_ratio):
            comparison = self._recheck(draw, candidate, reference, msg["precision"], comparison)
        result = asdict(comparison)
        result.pop("per_output", None)
        t1 = time.perf_counter_ns()
        tolerance = float(msg.get("standard_tolerance", judge.STANDARD_ATOL))
        reply = {"comparison": result, "standard": judge.standard_check(candidate, reference, tolerance)}
        t2 = time.perf_counter_ns()
        if msg.get("lent"):  # the inputs this worker lent for the trial, read back after the candidate's call
            lent = self.lent.get(tag)
            reply["lent_check"] = lent[0].check(lent[1]) if lent is not None else None
            self._drop_lent(tag)
        t3 = time.perf_counter_ns()
        if msg.get("digest"):  # of the outputs as the judge sees them, against the candidate's commitment
            reply["digest"] = commit.digest(candidate.get("outputs") or [])
        t4 = time.perf_counter_ns()
        # where the judge's time went, by its own clock (a diagnostic that decides nothing)
        reply["split_ms"] = {"receive": self.receive_ns / 1e6, "compare": (t1 - t0) / 1e6,
                             "standard": (t2 - t1) / 1e6, "lent_check": (t3 - t2) / 1e6, "digest": (t4 - t3) / 1e6}
        return reply

    def _recheck(self, draw: tuple[int, str], candidate: dict[str, Any], reference: dict[str, Any], precision: str,
                 failed: Any) -> Any:
        """A failed trial judged again with the reference's own precision noise allowed for
        (``kbv.judge.recheck_with_noise``): the reference runs the trial's inputs, drawn again from its seed, in
        strict IEEE float32, its flags put back after. The first comparison stands where the reference's two runs
        agree exactly; its reason is kept where the second fails too."""
        from kbv import judge

        saved = backends.read_flags()
        try:
            backends.apply_strict()
            args = self._inputs(*draw)
            with torch.no_grad():
                out = self.model(*args) if self.model is not None else None
            self._sync()
        except (RuntimeError, MemoryError) as exc:  # out of memory for a third output: the first failure stands
            failed.precision_recheck = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            return failed
        finally:
            backends.restore_flags(saved)
        strict_structure, strict_items = _describe_output(out)
        again = judge.recheck_with_noise(candidate, reference, {"structure": strict_structure,
                                                                "outputs": strict_items}, precision)
        del out, strict_items, args
        if again is None:
            return failed
        if not again.passed:
            assert again.precision_recheck is not None
            failed.precision_recheck = {**again.precision_recheck, "reason": again.reason}
            return failed
        return again

    def cmd_same(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Reference role only: whether two candidate replies (relayed by the parent) hold the same output bits."""
        if self.spec["role"] != "reference":
            raise RuntimeError("same: reference role only")
        from kbv import judge

        identical, worst = judge.same_outputs(_on_device(msg["a"], self.device), _on_device(msg["b"], self.device))
        return {"identical": identical, "max_abs_difference": worst}

    def cmd_buffers(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.model is not None
        return {"buffers": {n: b.detach() for n, b in self.model.named_buffers() if b is not None}}

    def _load_timing_buffers(self, contents: list[Any]) -> None:
        """Copy one call's inputs into this worker's own buffers (the first call's inputs become them), which the
        timed forward then reads."""
        buffers = self.own_inputs
        if buffers is None:
            self.own_inputs = buffers = contents
        else:
            with torch.no_grad():
                for buf, src in zip(buffers, contents):
                    if type(buf) is _Tensor and type(src) is _Tensor and buf.shape == src.shape:
                        _Tensor.copy_(buf, src)
        self.timing_inputs = buffers

    def _asked(self, baseline: str) -> Callable[[int], tuple[int, str] | None]:
        """Call ``j``'s seed and distribution, asked of the parent when call ``j`` is due (``kbv.eval.pacing``):
        nothing in this process predicts a timed call's inputs before the previous call's output is committed. The
        untimed calls that come first (estimates and warm-up) are asked for together. None for a timed call whose
        inputs the lender lent (``borrow_timed``): the parent answers once they are in the slot."""
        untimed: list[tuple[int, str]] = []

        def inputs_of(index: int) -> tuple[int, str] | None:
            if self.ask is None:
                raise RuntimeError("no channel to ask the parent for inputs")
            if index < FIRST_TIMED_CALL:
                if not untimed:
                    answer = self.ask([baseline, 0, FIRST_TIMED_CALL])
                    calls = answer.get("calls") if isinstance(answer, dict) else None
                    if not (isinstance(calls, list) and len(calls) == FIRST_TIMED_CALL):
                        raise RuntimeError("malformed inputs from the parent")
                    untimed.extend(_valid(seed, dist) for seed, dist in calls)
                return untimed[index]
            answer = self.ask([baseline, index])
            if not isinstance(answer, dict):
                raise RuntimeError("malformed inputs from the parent")
            if answer.get("lent") is True and self.timed_slot is not None:
                return None  # the judge has put this call's inputs in the slot it lent
            return _valid(answer.get("seed"), answer.get("distribution"))
        return inputs_of

    @staticmethod
    def _derived(msg: dict[str, Any]) -> Callable[[int], tuple[int, str]]:
        """Call ``j``'s seed and distribution derived from the command's ``key`` (commands whose calls are neither
        timed nor judged: the memory measure)."""
        key, names = int(msg["key"]), tuple(msg.get("names") or ("D1",))
        return lambda index: timed_call(key, index, names)

    def _timed_call(self, inputs_of: Callable[[int], tuple[int, str] | None]) -> tuple[Callable[[], Any],
                                                                                    Callable[[int], None]]:
        """The timed call, and the untimed step before call ``j`` that draws that call's inputs (seed and
        distribution from ``inputs_of(j)``) and loads them into the same buffers, or, where the lender lent this
        call's inputs (``inputs_of(j)`` is None), points the call at the slot it filled: no two calls see the same
        contents, so no output can be served from a cache, and the reference can redraw any call's inputs to judge
        it."""
        assert self.model is not None
        model = self.model

        def call() -> Any:
            with torch.no_grad():
                return model(*self.timing_inputs)  # type: ignore[misc]

        def prepare(index: int) -> None:
            drawn = inputs_of(index)
            if drawn is None:
                self.timing_inputs = self.timed_slot
            else:
                t_load = time.perf_counter_ns()
                self._load_timing_buffers(self._inputs(*drawn))
                self.loads[index] = time.perf_counter_ns() - t_load

        return call, prepare

    def cmd_lend_timed(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Reference role, as the lender: a slot for one role's timed inputs (``slot``), between guard bands
        (``kbv.worker.lending``), laid out from a draw of ``seed`` that no timed call uses; replies with its
        descriptor, or ``lend_error``."""
        if self.spec["role"] != "reference":
            raise RuntimeError("lend_timed: reference role only")
        slot = str(msg.get("slot", "candidate"))
        old = self.timed_lent.pop(slot, None)
        if old is not None:
            old.close()
        try:
            self.timed_lent[slot] = lending.Lent(self._inputs(int(msg["seed"]), "D1"), int(msg["guard_bytes"]),
                                                 int(msg["seed"]), self.device,
                                                 tuple(self.spec.get("handoff") or ("host",)))
        except (lending.LendError, handoff.HandoffError, OSError, RuntimeError) as exc:
            return {"lend_error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        return {"lent": self.timed_lent[slot].message()}

    def cmd_fill(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Reference role, as the lender: with ``check``, read the ``slot`` back first (what its borrower's last
        timed call did to its inputs and their bands, the ``excused`` inputs not compared: ``Lent.check``); with
        ``seed``, draw the next timed call's inputs and put them in the slot, its work done before the reply."""
        slot = str(msg.get("slot", "candidate"))
        lent = self.timed_lent.get(slot)
        if self.spec["role"] != "reference" or lent is None:
            raise RuntimeError("fill: no slot lent")
        excused = {i for i in msg.get("excused") or [] if type(i) is int}
        found = lent.check(excused) if msg.get("check") else None
        ahead = self.drawn_ahead.pop(slot, None)
        if msg.get("seed") is not None:
            wanted = (int(msg["seed"]), str(msg["distribution"]))
            try:
                lent.refill(ahead[1] if ahead is not None and ahead[0] == wanted else self._inputs(*wanted))
            except lending.LendError as exc:  # the parent hands this call's seed over instead, and lends no more
                return {"check": found, "refill_error": str(exc)[:300]}
            following = msg.get("next")
            if isinstance(following, list) and len(following) == 2:  # LEND_PREDRAW: drawn once the answer is gone
                self.after_reply = partial(self._draw_ahead, slot, (int(following[0]), str(following[1])))
        return {"check": found}

    def _draw_ahead(self, slot: str, wanted: tuple[int, str]) -> None:
        """Lender: draw ``wanted`` (seed, distribution), the next call's inputs for ``slot``, into this process only."""
        self.drawn_ahead[slot] = (wanted, self._inputs(*wanted))

    def cmd_borrow_timed(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Either role: map the slot the lender lent for this worker's timed inputs; its timed calls read views of
        it."""
        lent = msg.get("lent")
        buffer = lent.get("buffer") if isinstance(lent, dict) else None
        if type(buffer) is not _Tensor:
            raise RuntimeError(f"the lent timed inputs could not be mapped: {buffer!r}"[:400])
        self.timed_slot = lending.views(buffer, lent["layout"])
        return {}

    def _ring(self, name: Any, aliased: list[list[int]]) -> Callable[[int, Any], None]:
        """Keep every timed call's output (a copy taken the moment its trial ends) until the parent draws the
        judged ones: the worker never knows which call is judged. Outputs that share storage with the timed inputs
        are noted in ``aliased`` ([output, input] pairs, once each), as correctness forwards note them."""
        ring: list[Any] = self.rings.setdefault(name, [])

        def keep(index: int, out: Any) -> None:
            t_copy = time.perf_counter_ns()
            structure, copies, pairs = _copied(out, self.timing_inputs or [], self.kept_store)
            self.copy_ns += time.perf_counter_ns() - t_copy
            aliased.extend(p for p in pairs if p not in aliased)
            ring.append((index, structure, copies, out))
            if self.commit is not None:  # on record outside this process before the next trial starts
                t_digest = time.perf_counter_ns()
                digest = self.committed[(*name, index)] = commit.digest(copies)
                self.digest_ns += time.perf_counter_ns() - t_digest
                self.commit([*name, index, digest])
            if len(ring) > 1:  # only the last call's own output stays referenced (the deferred-write check)
                ring[-2] = ring[-2][:3] + (None,)

        return keep

    def _deferred(self, name: Any) -> list[int]:
        """Outputs of a command's last call that changed after the call returned (work finished by a thread or a
        queue after the timer stopped)."""
        ring = self.rings.get(name) or []
        if not ring or ring[-1][3] is None:
            return []
        index, structure, copies, out = ring[-1]
        time.sleep(DEFERRED_WRITE_WAIT_S)
        self._sync()
        _, items = _describe_output(out)
        ring[-1] = (index, structure, copies, None)
        return [k for k, (item, copy) in enumerate(zip(items, copies))
                if "tensor" in item and "tensor" in copy and not _same(item["tensor"], copy["tensor"])]

    def cmd_time(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Time one forward under each baseline's flags, taking ``share`` of the timing budget, each call's inputs
        asked of the parent when the call is due (``kbv.eval.pacing``). Every timed call's output is kept
        (``ring_bytes`` bound the trials) and committed as its trial ends, for the parent to draw the judged ones
        from later (``kept``). A baseline this worker has timed before warms up briefly, unless ``full_warmup``
        (the reference's clean command, after an idle gap); one the parent sends an estimate for (``estimate_ms``,
        ms per call by baseline) makes no estimate calls."""
        t_command = time.perf_counter_ns()
        rule = TIMING_RULES["cuda" if self.device.startswith("cuda") else "cpu"]
        timings: dict[str, Any] = {}
        flags: dict[str, Any] = {}
        ring_info: dict[str, Any] = {}
        keep_outputs = msg.get("ring_bytes") is not None  # both roles: the same work and memory around each call
        round_name = int(msg.get("round", 0))
        for baseline in msg["baselines"]:
            if baseline not in BASELINES:
                raise KeyError(baseline)
            flags[baseline] = backends.apply_baseline(baseline)
            self.integrity.flags_set(flags[baseline])
            call, prepare = self._timed_call(self._asked(baseline))
            name = (round_name, baseline)
            aliased: list[list[int]] = []
            keep = self._ring(name, aliased) if keep_outputs else None
            self.digest_ns = self.copy_ns = self.ask_ns = 0
            self.loads = {}
            slow = msg.get("slow_ms")
            estimate = (msg.get("estimate_ms") or {}).get(baseline)
            recording = self.recording if msg.get("record") else None
            if recording is not None:
                recording.commands += 1
            with diagnose.profiled(os.environ.get(diagnose.PROFILE_ENV) == "1") as profile:
                timings[baseline] = timer.time_calls(call, self.device, rule, float(msg.get("share", 1.0)),
                                                     msg.get("max_trials"), prepare, keep,
                                                     float(slow[baseline]) if isinstance(slow, dict)
                                                     and baseline in slow else None,
                                                     int(msg["ring_bytes"]) if keep_outputs else None,
                                                     warmed=baseline in self.warmed and not msg.get("full_warmup"),
                                                     record=recording,
                                                     estimate_ms=float(estimate)
                                                     if isinstance(estimate, (int, float)) else None)
            self.warmed.add(baseline)
            # each timed call's draw and load of its inputs, this worker's own clock (the reference's is left out
            # of its untimed time where the candidate's inputs were lent: kbv.eval.pacing.untimed_ms)
            timings[baseline]["load_ms"] = [self.loads.get(FIRST_TIMED_CALL + i, 0) / 1e6
                                            for i in range(len(timings[baseline]["times_ms"]))]
            split = timings[baseline]["split_ms"]
            split |= {"digest": self.digest_ns / 1e6, "copy": self.copy_ns / 1e6,  # of "keep"
                      "ask": self.ask_ns / 1e6}  # of "prepare", and of the untimed calls' inputs
            if profile.text:  # KBV_PROFILE_TIMING=1: where the worker's own time went (decides nothing)
                ring = self.rings.get(name) or []
                timings[baseline]["profile"] = {
                    "lines": profile.text,
                    "digest_hot_ms": diagnose.median_ms(lambda: commit.digest(ring[-1][2]),
                                                         diagnose.sync_of(self.device))
                    if ring else None}
            if keep_outputs:
                kept_ring = self.rings.get(name, [])
                ring_info[baseline] = {"kept": len(kept_ring),
                                       "kept_bytes": sum(timer.output_bytes([c["tensor"] for c in copies
                                                                             if "tensor" in c])
                                                         for _, _, copies, _ in kept_ring),
                                       "changed_after_return": self._deferred(name), "aliased_outputs": aliased}
        timer.settle(self.device)  # what its threads launched has run before the other role is timed
        if msg.get("release_cached") and self.device.startswith("cuda"):
            # outputs too large for the ring (the parent's judge_each_command): the caching allocator's free blocks
            # go back to the device, so the other role's worker can use them; the next command's warm-up calls
            # allocate again, before its timed trials (on an 80 GB H100 a 6 GiB output's candidate worker held
            # 36.6 GiB after its timing, and the reference's judged call ran out of memory)
            torch.cuda.empty_cache()
        return {"timing": timings, "flags": flags, "ring": ring_info,
                "command_ms": (time.perf_counter_ns() - t_command + self.receive_ns) / 1e6}  # a diagnostic

    def cmd_kept(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The kept output the parent drew (``round``, ``baseline``, ``index``; or ``burst`` set), then every kept
        output is dropped."""
        name = ("burst", int(msg["burst"])) if "burst" in msg else (int(msg["round"]), msg["baseline"])
        ring = self.rings.get(name) or []
        hit = next((entry for entry in ring if entry[0] == int(msg.get("index", -1)) or "burst" in msg), None)
        reply: dict[str, Any] = {"found": hit is not None}
        if hit is not None:
            reply |= {"structure": hit[1], "outputs": hit[2]}
        if msg.get("drop", True):
            self.rings.clear()
            self.kept_store.clear()
        return reply

    def cmd_recorded(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The recording of every forward of this worker's timing commands (``kernel_record``), its session
        stopped: raw names, calls and device time; the parent classifies them. None where it did not record."""
        recording, self.recording = self.recording, None
        return {"recorded": recording.stop() if recording is not None else None}

    def cmd_drop(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Drop every kept output. Candidate role: first say which kept timed outputs no longer match the digest
        sent when their call ended (this process's own account: it can add a flag, never clear one; the judged
        call's is checked by the judge)."""
        changed = []
        if self.spec["role"] == "candidate":
            for name, ring in self.rings.items():
                for index, _, copies, _ in ring:
                    key = (*name, index) if isinstance(name, tuple) and name[0] != "burst" else None
                    if key in self.committed and commit.digest(copies) != self.committed[key]:
                        changed.append(list(key))
        self.rings.clear()
        self.kept_store.clear()
        self.committed.clear()
        return {"changed_kept": changed[:CHANGED_KEPT_MAX]}

    def cmd_burst(self, msg: dict[str, Any]) -> dict[str, Any]:
        """``calls`` back-to-back calls under ``baseline``'s flags, cycling through ``BURST_INPUT_SETS`` input sets
        drawn from the command's key (loaded before the burst); the parent's clock times the command (see
        ``timer.burst``). The last output of each set is kept for the parent to judge one. The reference draws as
        many sets as fit, with one kept output each (``output_bytes``), in ``budget_bytes`` (at least one) and says
        how many; the candidate is told that count (``sets``)."""
        assert self.model is not None
        key, names = int(msg["key"]), tuple(msg.get("names") or ("D1",))
        calls = int(msg["calls"])
        wanted = max(1, min(BURST_INPUT_SETS, calls, int(msg.get("sets") or BURST_INPUT_SETS)))
        sets = []
        for s in range(wanted):
            seed, dist = timed_call(key, s, names)
            sets.append(self._inputs(seed, dist))
            if s == 0 and msg.get("budget_bytes") is not None:
                per_set = timer.output_bytes(sets[0]) + int(msg.get("output_bytes") or 0)
                wanted = max(1, min(wanted, int(msg["budget_bytes"]) // max(1, per_set)))
            if len(sets) >= wanted:
                break
        flags = backends.apply_baseline(msg["baseline"])
        self.integrity.flags_set(flags)
        model = self.model
        last: dict[int, tuple[str, list[Any]]] = {}
        aliased: list[list[int]] = []
        final = calls - len(sets)  # each set's last call: its output is copied when the call ends, in both roles

        def call(index: int) -> None:
            with torch.no_grad():
                out = model(*sets[index % len(sets)])
            if index >= final:  # a kernel may return one buffer of its own for every call (a CUDA graph's);
                self._sync()  # work it left queued on other streams is part of the output (the timed calls' rule)
                structure, copies, pairs = _copied(out, sets[index % len(sets)])
                aliased.extend(p for p in pairs if p not in aliased)
                last[index % len(sets)] = (structure, copies)

        timer.burst(call, self.device, calls)
        if self.spec["role"] == "candidate" and msg.get("keep", True):
            for s, (structure, items) in last.items():
                self.rings[("burst", s)] = [(s, structure, items, None)]
        return {"sets": len(sets), "aliased_outputs": aliased}

    def cmd_memory(self, msg: dict[str, Any]) -> dict[str, Any]:
        """One call's peak memory. On the CPU in two steps the parent measures between: ``phase: prepare`` loads
        the inputs and returns freed memory to the system (``malloc_trim``), ``phase: run`` makes the call; the
        parent reads the rise of the resident set from ``/proc`` itself."""
        call, prepare = self._timed_call(self._derived(msg))
        phase = msg.get("phase")
        if phase == "prepare":
            memory.measuring_allocator()
            prepare(1)
            memory.trim()
            return {"memory": {}}
        if phase == "run":
            try:
                out = call()
                del out
            finally:
                memory.timing_allocator()
            return {"memory": {}}
        if self.device.startswith("cuda"):  # one warm call first: one-time setup (library handles) is not a peak
            prepare(0)
            call()
        prepare(1)
        result = memory.peak_bytes(call, self.device)
        if result.get("device_in_use") is not None and self.in_use_baseline is not None:
            result["device_in_use_delta"] = result["device_in_use"] - self.in_use_baseline
        return {"memory": result}

    def cmd_precision(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Reference role only: the D1 call of ``msg`` run in float64 and under the verified baseline's flags (on
        copies of the model), and the relative L2 error against float64 of the verified run and of the candidate's
        outputs (relayed by the parent)."""
        if self.spec["role"] != "reference" or self.model is None:
            raise RuntimeError("precision: reference role only")
        from kbv.worker import precision  # imported here: candidate workers never load it

        try:
            args = self._inputs(msg["seed"], msg["distribution"])
            return precision.errors_against_float64(self.model, args, msg["candidate"], self.device)
        except Exception as exc:  # e.g. an op without float64 support: no check, and the reference lives on
            return {"error": f"{type(exc).__name__}: {exc}"[:500], "outputs": []}

    # -- helpers --------------------------------------------------------------------------------------------------

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def _device_info(self) -> dict[str, Any]:
        if self.device.startswith("cuda"):
            props = torch.cuda.get_device_properties(torch.device(self.device))
            return {"name": props.name, "capability": f"{props.major}.{props.minor}",
                    "total_memory": int(props.total_memory), "l2_bytes": int(props.L2_cache_size),
                    "multiprocessors": int(props.multi_processor_count)}
        return {"name": "cpu", "threads": torch.get_num_threads(), "l2_bytes": timer.cpu_l2_bytes()}


def _valid(seed: Any, distribution: Any) -> tuple[int, str]:
    """A seed and distribution as the parent hands them over, checked."""
    if type(seed) is not int or distribution not in _DISTRIBUTIONS:
        raise RuntimeError("malformed inputs from the parent")
    return seed, distribution


def _error(exc: BaseException) -> dict[str, Any]:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc)[:2000], "traceback": tb[-6000:]}}


def _isolate(spec: dict[str, Any]) -> None:
    """New session and process group, private working and temporary folder, output to the stage's log file; in a
    candidate's worker every file it writes is capped at WORKER_FILE_BYTES_MAX (RLIMIT_FSIZE). The reference's
    worker runs trusted code only and hands the reference's state over in memfds, which the cap would also bound
    (a 4 GiB weight of KernelBench's level3/2_ShallowWideMLP failed with EFBIG on the H200, 2026-12-02)."""
    os.setsid()
    if spec["role"] == "candidate":
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)  # every file of this worker, its log included
        cap = WORKER_FILE_BYTES_MAX if hard == resource.RLIM_INFINITY else min(hard, WORKER_FILE_BYTES_MAX)
        resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))
    log = os.open(spec["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.environ.update(spec.get("env", {}))
    os.chdir(spec["work_dir"])
    tempfile.tempdir = None
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    if spec["device"] == "cpu":
        memory.timing_allocator()


def _read_spec(conn: Connection) -> dict[str, Any]:
    """The first message on the channel: this worker's spec, with the problem's source as the parent hashed it."""
    import base64

    spec = wire.recv(conn, 0)
    if not isinstance(spec, dict):
        os._exit(2)
    if isinstance(spec.get("problem_source"), str):
        spec["problem_source"] = base64.b64decode(spec["problem_source"])
    return spec


def main(conn: Connection, spec: dict[str, Any] | None = None) -> None:
    """Serve one stage on ``conn``: read the spec (unless given), isolate and confine this process, load the problem
    from the bytes the parent sent, then answer commands until ``exit`` or EOF."""
    sys.dont_write_bytecode = True  # nothing a later worker imports comes from a cache this one wrote
    if spec is None:
        spec = _read_spec(conn)
    _isolate(spec)
    isolation = confine.confine(spec)  # namespaces and an unprivileged user, before any candidate code
    try:
        session = Session(spec)
    except BaseException as exc:  # the problem itself failed to load
        wire.send(conn, _error(exc))
        os._exit(1)
    codec = handoff.Codec(session.device, tuple(spec.get("handoff") or ("host",)))
    codec.borrow = lending.borrow  # inputs a lender lends: the candidate's trials, either role's timed calls
    wire.use_codec(codec)
    failure_told = False
    handoff_role = spec["role"] == "candidate"
    state_role = spec["role"] == "reference"
    handlers = {"import": session.cmd_import, "setup": session.cmd_setup, "forward": session.cmd_forward,
                "judge": session.cmd_judge, "precision": session.cmd_precision, "perturb": session.cmd_perturb,
                "state": session.cmd_state,
                "load": session.cmd_load, "fallback": session.cmd_fallback, "buffers": session.cmd_buffers, "time": session.cmd_time,
                "memory": session.cmd_memory, "burst": session.cmd_burst, "kept": session.cmd_kept,
                "lend_timed": session.cmd_lend_timed, "fill": session.cmd_fill, "borrow_timed": session.cmd_borrow_timed,
                "drop": session.cmd_drop, "same": session.cmd_same, "recorded": session.cmd_recorded}
    # A kept output's commitment leaves with the next request for inputs (the next trial cannot start without one),
    # or alone at the command's end: one frame per timed call instead of two.
    pending: list[list[Any]] = []

    def flush() -> None:
        while pending:
            wire.send(conn, {"commit": pending.pop(0)})

    def commit_entry(entry: list[Any]) -> None:
        flush()
        pending.append(entry)

    spin_s = ask_spin_s(session.device)

    def ask(request: list[Any]) -> dict[str, Any]:
        t_ask = time.perf_counter_ns()
        wire.send(conn, {"need": request, **({"commit": pending.pop(0)} if pending else {})})
        flush()
        wire.spin(conn, spin_s)  # the answer comes within microseconds: no sleep and wake-up on the way
        answer = wire.recv(conn, 0)
        session.ask_ns += time.perf_counter_ns() - t_ask
        return answer

    session.commit, session.ask = commit_entry, ask
    try:
        cuda_init_s = session.warm()
    except BaseException as exc:  # no usable device in this process: the worker's failure, told as the problem's is
        wire.send(conn, _error(exc))
        os._exit(1)
    wire.send(conn, {"ok": True, "pid": os.getpid(), "isolation": isolation, "cuda_init_s": cuda_init_s})
    last_cmd = None
    while True:
        try:
            if last_cmd == "fill":  # the judge filling a lent slot call by call: the next fill comes within a trial
                wire.spin(conn, spin_s)
            conn.poll(None)  # the next command's first bytes: its receipt (descriptors imported) is timed from here
            t_receive = time.perf_counter_ns()
            msg = wire.recv(conn)
            session.receive_ns = time.perf_counter_ns() - t_receive
        except (EOFError, OSError, wire.WireError):
            os._exit(0)
        if msg.get("cmd") == "exit":
            os._exit(0)
        last_cmd = msg.get("cmd")
        try:
            # the judge's fills, one per timed call of the candidate, skip the tamper snapshot (about 0.3 ms): the
            # reference's worker runs no candidate code, and its snapshot is taken again with its next command
            tamper = [] if last_cmd == "fill" else session.integrity.changes()
            reply = {"ok": True, **handlers[msg["cmd"]](msg), "tamper": tamper}
            t_send = time.perf_counter_ns()
            if state_role and last_cmd != "fill" and session.device.startswith("cuda"):  # the judge's memory (not
                # on fills: one per timed call of the candidate, and read by no one)
                reply["device_memory"] = [torch.cuda.memory_allocated(), torch.cuda.memory_reserved()]
            # copied out (to host, or to a shared buffer) now, inside the error handling
            if state_role and msg.get("cmd") in STATE_COMMANDS:
                header, tensors = wire.split(reply, handoff=True, host=True)
            else:
                header, tensors = wire.split(reply, handoff=handoff_role and msg.get("cmd") in HANDOFF_COMMANDS)
            if codec.failure and not failure_told:  # outputs go through the pipe from now on: say why, once
                failure_told = True
                header, tensors = wire.split(reply | {"handoff_failure": codec.failure}, handoff=False)
        except BaseException as exc:  # anything the candidate raises, SystemExit included
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except Exception:
                pass
            wire.send(conn, _error(exc))
            os._exit(1)
        flush()  # the last trial's commitment, before the reply
        wire.send_parts(conn, header, tensors)
        session.send_ns = time.perf_counter_ns() - t_send
        if session.after_reply is not None:  # the lender's draw of the next call's inputs (LEND_PREDRAW)
            ahead, session.after_reply = session.after_reply, None
            try:
                ahead()
            except Exception:  # drawn again when that call is due, where a failure is answered
                pass
        session.release_ns = 0
        if session.device.startswith("cuda") and msg.get("cmd") in RELEASE_AFTER and _tensor_bytes(msg) >= RELEASE_BYTES:
            t_release = time.perf_counter_ns()
            del msg, reply, header, tensors  # the judge's copies of a large candidate output, and what comparing
            torch.cuda.empty_cache()  # them allocated, go back to the driver: the candidate's next output is
            # exported into a fresh allocation of that size (kbv.worker.handoff), which PyTorch's cache cannot lend
            session.release_ns = time.perf_counter_ns() - t_release
