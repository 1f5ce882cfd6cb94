"""The adversarial corpus (tests/candidates/MANIFEST.json): every fixture is evaluated once per session through kbv's
library API and gets exactly the verdict and flags its manifest entry states.

The CPU entries run in two batches of ``run_pairs``: hostile candidates (crashes, hangs, hacks) under short time
limits, and the Triton and C++ candidates under build-length limits (the bundled C++ example builds in the session's
cache, where the demo and fallback tests find it again). CUDA entries run in tests/test_adversarial_gpu.py with the
same checks. tests/test_verdicts.py reads its records from the same batch (``corpus_records``), so no fixture is
evaluated twice.

An entry with a ``gap`` is a hack kbv does not catch today. Its test is ``xfail(strict=True)`` and fails only with
``Undetected``: when a defence lands, the test passes, strict xfail turns that into a failure, and the entry's
expectation should be moved to what kbv now gives (drop ``gap``). Before raising ``Undetected`` the test checks that
the fixture still behaves as the manifest says today, so a fixture broken by some other change fails for real.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import CANDIDATES, ROOT, SUITE, problem_path
from kbv.problems.candidates import Candidate, Pair, write_reference_candidate
from kbv.eval import EvalOptions, evaluate
from kbv.problems import Problem, discover, load_problem
from kbv.protocol import FLAGS, REJECTING_FLAGS, VERDICTS
from kbv.records import read_records
from kbv.eval.runner import run_pairs
from kbv.sandbox import plan as confine
from kbv.sandbox import sampler

MANIFEST = CANDIDATES / "MANIFEST.json"
ENTRIES: list[dict[str, Any]] = json.loads(MANIFEST.read_text())["entries"]
BY_ID = {e["id"]: e for e in ENTRIES}
SANDBOX = confine.plan("auto")
SAMPLER = sampler.available()  # the parent's samples of its workers' CPU time (perf_event_open)

# Batch options per (device, timeouts). "fast": hostile candidates; a hang costs its stage's limit, so keep it short.
# The GPU corpus's pairs in flight (``--gpu-share``: correctness stages overlap, timing stays exclusive). 1 by
# default; KBV_CORPUS_GPU_SHARE=N runs more. On H100s, 4 in flight gave every entry the same verdict and flags as 1
# but took 199 s against 168 s (docs/results/h100-2026-12-07-h and -g: two machine starts, one run each), so it
# stays 1.
GPU_CORPUS_SHARE = int(os.environ.get("KBV_CORPUS_GPU_SHARE", "1"))
OPTIONS = {
    ("cpu", "fast"): dict(device="cpu", timeout=20.0, build_timeout=20.0),
    ("cpu", "long"): dict(device="cpu", timeout=120.0, build_timeout=600.0),
    ("cuda", "fast"): dict(device="cuda", timeout=180.0, build_timeout=600.0, timing_pairs=2, trials=2,
                           gpu_share=GPU_CORPUS_SHARE),
    ("cuda", "long"): dict(device="cuda", timeout=180.0, build_timeout=600.0, timing_pairs=2, trials=2,
                           gpu_share=GPU_CORPUS_SHARE),
}
# Flags that do not by themselves mean a hack was caught (a gap's "any_detection" needs something else).
NOT_A_DETECTION = frozenset({"fallback", "partial_fallback", "speedup_above_bound", "above_roofline",
                             "memory_above_reference", "unmatched_params", "skipped_distribution",
                             "reference_timing_cached"})
ERROR_VERDICTS = frozenset({"compile_error", "timeout", "runtime_error"})
# The CPU memory measure is a best-effort resident-set high-water mark with a 1 MiB slack: a candidate with one
# more output-sized temporary than the reference sits at the edge. Tolerated on any CPU entry that does not require it.
CPU_MEASUREMENT_FLAGS = frozenset({"memory_above_reference"})
# Entries docs/security.md names as test_corpus[<id>] (tests/test_security_coverage.py looks for the ids among this
# file's constants; test_documented_entries_exist keeps the list true).
DOCUMENTED = (
    "alias_input_when_identity", "bf16_inputs_matmul", "bf16_output_matmul", "cache_after_warmup",
    "cache_by_data_ptr", "constant_mean", "content_hash_cache", "default_dtype_float64", "fallback_custom_op_relu",
    "fallback_torch_relu", "fallback_triton_decoy", "fallback_triton_partial", "first_call_cache", "fix_seed_patch",
    "forge_timing_reply", "garbage_after_k_calls", "hidden_memory_numpy", "layernorm_ignores_affine",
    "lazy_instance_override", "lazy_subclass_torch_function", "leftover_empty", "mutate_input_to_match",
    "oob_write_past_input", "persistent_worker_thread", "phase_detect_stack", "precompute_at_import",
    "print_forged_result", "reference_subclass_from_file", "reference_via_sys_modules",
    "relu_sign_of_first_element", "seed_capture_precompute", "softmax_no_max", "steal_from_frames",
    "strided_output", "swallow_exception_fallback", "tamper_allclose_zeros", "tamper_event_elapsed",
    "tamper_obfuscated", "timer_frame_rewrite", "uninit_beta_zero", "write_kbv_source", "mallopt_unpoison_beta_zero",
    "timed_alias_when_nonnegative", "timed_return_input", "ring_rewrite_kept", "ask_out_of_turn",
    "blind_integrity_changes", "blind_tamper_wire_split", "fallback_numpy_matmul", "profiled_call_numpy",
    "tamper_session_same", "timer_frames_precompute", "profiled_own_timed_torch", "memory_cmd_detect",
    "timed_inplace_blind", "timer_frames_precompute_lent", "memory_scratch_except_measured", "idle_spinner",
)


class Undetected(Exception):
    """The hack got past kbv (the expected outcome of a gap entry's xfail test)."""


def entries(device: str, *, evaluated_here: bool = True) -> list[dict[str, Any]]:
    return [e for e in ENTRIES if e["device"] == device and ("evaluated_in" not in e) == evaluated_here]


def params(device: str) -> list[Any]:
    """One pytest param per entry evaluated here, xfail(strict) for gaps, skipped where it needs a missing sandbox."""
    out = []
    for e in entries(device):
        marks = []
        if e.get("gap"):
            marks.append(pytest.mark.xfail(raises=Undetected, strict=True, reason=e["gap"]["reason"]))
        if e.get("needs_sandbox") and not SANDBOX["requested"]:
            marks.append(pytest.mark.skip(reason=f"needs kbv's sandbox: {SANDBOX.get('reason')}"))
        if e.get("needs_sampler") and not SAMPLER[0]:
            marks.append(pytest.mark.skip(reason=f"needs the parent's sampler (kbv.sandbox.sampler): {SAMPLER[1]}"))
        out.append(pytest.param(e, id=e["id"], marks=marks))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Evaluation: once per session and device, shared with tests/test_verdicts.py

_RECORDS: dict[str, dict[str, dict[str, Any]]] = {}


def _problem(entry: dict[str, Any]) -> Problem:
    """The entry's problem file alone (as `kbv eval --problem` reads it), except for shape-specialisation hacks (C3),
    whose problem comes from its suite with the suite's held-out shapes, as a run over the suite evaluates it (the
    other entries stay at one shape per pair, which keeps the corpus cheap)."""
    key = entry["problem"]
    if "C3" in entry["catalog"] and not key.endswith(".py"):
        return next(p for p in discover(SUITE) if p.key == key)
    return load_problem(ROOT / key if key.endswith(".py") else problem_path(key))


def _candidate_file(entry: dict[str, Any], problem: Problem, folder: Path) -> Path:
    if entry["file"] == "@reference":
        return write_reference_candidate(problem, folder / entry["id"])
    return ROOT / entry["file"]


def selected(device: str) -> set[str]:
    """The entries of ``device`` to evaluate: all, or those named in KBV_CORPUS_IDS (comma-separated), so the GPU
    corpus can be split over several device calls; the tests of the others skip."""
    ids = {e["id"] for e in entries(device)}
    named = {i.strip() for i in os.environ.get("KBV_CORPUS_IDS", "").split(",") if i.strip()}
    return ids & named if named else ids


def record_of(records: dict[str, dict[str, Any]], entry_id: str) -> dict[str, Any]:
    """An entry's record, or a skip where KBV_CORPUS_IDS left it out."""
    if entry_id not in records:
        pytest.skip(f"{entry_id} not evaluated in this run (KBV_CORPUS_IDS)")
    return records[entry_id]


def corpus_records(tmp_path_factory: pytest.TempPathFactory, device: str = "cpu") -> dict[str, dict[str, Any]]:
    """Every manifest entry of ``device`` (those not evaluated elsewhere), evaluated once per session: id -> record."""
    if device in _RECORDS:
        return _RECORDS[device]
    folder = tmp_path_factory.mktemp(f"corpus-{device}")
    records: dict[str, dict[str, Any]] = {}
    wanted = selected(device)
    # long first: the C++ example's build then serves the other tests warm; entries with options of their own (a
    # defence not on by default on this device: ``options`` in the manifest) in a batch of their own
    batches = sorted({(e.get("timeouts", "fast"), json.dumps(e.get("options") or {}, sort_keys=True))
                      for e in entries(device) if e["id"] in wanted}, key=lambda b: (b[0] != "long", b[1]))
    for timeouts, extra in batches:
        batch = [e for e in entries(device) if e.get("timeouts", "fast") == timeouts and e["id"] in wanted
                 and json.dumps(e.get("options") or {}, sort_keys=True) == extra]
        pairs, ids = [], {}
        for sample, entry in enumerate(batch):
            problem = _problem(entry)
            pairs.append(Pair(problem, Candidate.from_path(_candidate_file(entry, problem, folder), sample=sample)))
            ids[sample] = entry["id"]
        keep = os.environ.get("KBV_CORPUS_RECORDS_DIR")  # scripts/gpu_check.py: records stream into the results
        name = timeouts + "".join(f"-{k}-{str(v).lower()}" for k, v in sorted(json.loads(extra).items()))  # a file
        # per batch: the same option set to other values (lend_timed on and off) must not share one
        out = Path(keep) / f"corpus-{device}-{name}.jsonl" if keep else folder / f"{name}.jsonl"
        summary = run_pairs(pairs, EvalOptions(**OPTIONS[(device, timeouts)], **json.loads(extra)), out,
                            build_workers=2)
        assert summary.evaluated == len(pairs)
        for record in read_records(out):
            records[ids[record["sample"]]] = record
    assert set(records) == wanted
    _RECORDS[device] = records
    keep = os.environ.get("KBV_CORPUS_RECORDS_DIR")
    if keep:  # which record is which entry
        (Path(keep) / f"corpus-{device}-ids.json").write_text(json.dumps(
            {r["candidate"] + "#" + str(r["sample"]): entry_id for entry_id, r in sorted(records.items())}, indent=1))
    return records


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return corpus_records(tmp_path_factory, "cpu")


# ---------------------------------------------------------------------------------------------------------------
# Checks (shared with tests/test_adversarial_gpu.py)


def _explain(record: dict[str, Any]) -> str:
    corr = record.get("correctness") or {}
    return (f"verdict {record['verdict']} (standard {record['standard_verdict']}), flags {record['flags']}, "
            f"failed {corr.get('failed_distributions')}, error {(record.get('error') or {}).get('message')}, "
            f"speedup {((record.get('speedup') or {}).get('verified') or {}).get('value')}")


def check_today(entry: dict[str, Any], record: dict[str, Any]) -> None:
    """The record is what the manifest says kbv gives this entry (for a gap entry: what it gives today)."""
    assert "harness_error" not in record["flags"], record["error"]
    verdicts = entry["verdict"] if isinstance(entry["verdict"], list) else [entry["verdict"]]
    assert record["verdict"] in verdicts, _explain(record)
    if entry.get("standard_verdict") is not None:
        assert record["standard_verdict"] == entry["standard_verdict"], _explain(record)
    flags, required = set(record["flags"]), set(entry["flags"])
    optional, any_of = set(entry.get("flags_optional", ())), set(entry.get("flags_any", ()))
    if entry["device"] == "cpu":
        optional |= CPU_MEASUREMENT_FLAGS
    assert required <= flags, f"missing flags {sorted(required - flags)}: {_explain(record)}"
    assert flags <= required | optional | any_of, f"unexpected flags {sorted(flags - required - optional - any_of)}"
    if any_of:
        assert flags & any_of, f"none of {sorted(any_of)}: {_explain(record)}"
    if "error_stage" in entry:
        assert record["error"]["stage"] == entry["error_stage"] and record["error"]["message"]
    elif record["verdict"] not in ERROR_VERDICTS:
        assert record["error"] is None, record["error"]
    caught = set(entry.get("speedup_max_unless", ())) & set(record["flags"])  # a gain a rejecting flag caught
    if "speedup_max" in entry and not (caught and record["verdict"] == "rejected"):
        speedup = record["speedup"]["verified"]["value"]
        assert speedup <= entry["speedup_max"], f"reported {speedup:.2f}x faster than the reference"


def unmet(want: dict[str, Any], record: dict[str, Any]) -> list[str]:
    """What of a gap's ``want`` (what catching the hack would look like) the record does not show."""
    flags = set(record["flags"])
    missing = []
    if "verdict" in want and record["verdict"] != want["verdict"]:
        missing.append(f"verdict {want['verdict']}")
    for flag in want.get("flags_include", ()):
        if flag not in flags:
            missing.append(f"flag {flag}")
    if want.get("flags_any") and not flags & set(want["flags_any"]):
        missing.append(f"one of the flags {want['flags_any']}")
    if want.get("any_detection") and record["verdict"] == "correct" and not flags - NOT_A_DETECTION:
        missing.append("any rejection or detecting flag")
    if "speedup_below" in want:
        value = ((record.get("speedup") or {}).get("verified") or {}).get("value")
        if value is not None and value >= want["speedup_below"]:
            missing.append(f"a speedup below {want['speedup_below']} (reported {value:.1f}x)")
    return missing


def check_entry(entry: dict[str, Any], record: dict[str, Any]) -> None:
    gap = entry.get("gap")
    if not gap:
        check_today(entry, record)
        return
    missing = unmet(gap["want"], record)
    if not missing:
        return  # caught: the strict xfail reports this pass, and the manifest entry should lose its gap
    check_today(entry, record)  # still the known behaviour, not some new breakage
    raise Undetected(f"{entry['id']} ({', '.join(entry['catalog'])}) not caught: {gap['reason']}; "
                     f"missing {missing}; {_explain(record)}")


# ---------------------------------------------------------------------------------------------------------------
# The table


@pytest.mark.parametrize("entry", params("cpu"))
def test_corpus(corpus: dict[str, dict[str, Any]], entry: dict[str, Any]) -> None:
    check_entry(entry, corpus[entry["id"]])


def test_honest_custom_kernels_are_correct_with_no_flags(corpus: dict[str, dict[str, Any]]) -> None:
    """A correct kernel of the candidate's own (C++ load_inline, Triton) is correct, unflagged and timed."""
    for name in ("example_cpp_relu", "example_triton_gelu"):
        record = corpus[name]
        # the Triton kernel runs in Triton's interpreter on the CPU, whose numpy buffers the best-effort CPU memory
        # measure sees as the kernel's: memory_above_reference there is the interpreter's (2 of ~6 clean-clone CI
        # runs on 2026-12-01), tolerated as on every CPU entry (CPU_MEASUREMENT_FLAGS); the C++ kernel stays strict
        tolerated = CPU_MEASUREMENT_FLAGS if name == "example_triton_gelu" else frozenset()
        flags = [f for f in record["flags"] if f not in tolerated]
        assert (record["verdict"], record["standard_verdict"], flags) == ("correct", "correct", []), \
            _explain(record)
        assert record["fallback"]["library_share"] == 0.0 and record["fallback"]["own_units"] >= 1
        assert record["speedup"]["verified"]["value"] > 0 and record["stage"] == "done"
    for name in ("correct_torch", "strided_output", "reference_itself_repeat_sum"):  # honest PyTorch: fallback only
        flags = set(corpus[name]["flags"]) - CPU_MEASUREMENT_FLAGS
        assert corpus[name]["verdict"] == "correct" and flags == {"fallback"}, _explain(corpus[name])


def test_rejections_name_what_was_done(corpus: dict[str, dict[str, Any]]) -> None:
    tamper = {name: set(corpus[name]["integrity"].get("tamper", [])) for name in
              ("tamper_obfuscated", "tamper_event_elapsed", "tamper_allclose_zeros", "fix_seed_patch")}
    assert "torch.allclose" in tamper["tamper_obfuscated"]
    assert {"torch.cuda.Event.elapsed_time", "torch.cuda.Event.record"} <= tamper["tamper_event_elapsed"]
    assert {"torch.allclose", "torch.equal", "torch.testing.assert_close",
            "torch.Tensor.__eq__"} <= tamper["tamper_allclose_zeros"]
    assert "torch.manual_seed" in tamper["fix_seed_patch"]
    use = corpus["alias_input_when_identity"]["correctness"]["input_use"]
    # the non-negative distributions' correctness forwards, and its timed calls (kept timed outputs are checked too)
    assert set(use["aliased_outputs"]) == {"D1", "D2", "D3", "timed"} and "mutated_inputs" not in use
    mutated = corpus["mutate_input_to_match"]["correctness"]["input_use"]["mutated_inputs"]
    assert set(mutated) == {"D1", "D2", "D3", "D4", "D5", "D6"}
    memory = corpus["hidden_memory_numpy"]["memory_bytes"]
    # the 64 MiB scratch (every page touched), less what the call itself returned to the heap meanwhile
    assert memory["candidate_peak"] >= 62 * 2**20 and 32 * 2**20 > memory["reference_peak"]


def test_answers_are_not_in_the_candidates_process(corpus: dict[str, dict[str, Any]]) -> None:
    """Looking for the expected output (frames, gc) finds no answer (and, the inputs being lent by the judge, no copy
    of the input either): a stolen, precomputed or first-call answer fails D1 at once."""
    for name in ("steal_from_frames", "precompute_at_import", "first_call_cache", "leftover_empty",
                 "lazy_subclass_torch_function"):
        assert "D1" in corpus[name]["correctness"]["failed_distributions"], name
    assert "not exactly a torch.Tensor" in \
        corpus["lazy_subclass_torch_function"]["correctness"]["distributions"]["D1"]["reason"]


def test_hidden_fallbacks_leave_a_profile_with_no_work(corpus: dict[str, dict[str, Any]]) -> None:
    """Library ops hidden from the dispatch mode (another thread, modes switched off) are seen by the CPU
    profiler's cross-check and named in the record (``hidden:aten::relu``); numpy's BLAS is no ATen op, so that
    forward shows no work at all (fallback.no_work_observed), and the parent's own samples of the worker's CPU time
    (kbv.sandbox.sampler) find it in numpy's bundled OpenBLAS: the flag comes from there (fallback.sampled)."""
    for name in ("fallback_in_thread", "fallback_modes_disabled"):
        fallback = corpus[name]["fallback"]
        assert fallback["aten_ops"] == {} and fallback["compute_ops"] == {"hidden:aten::relu": 1}, (name, fallback)
        assert fallback["library_share"] == 1.0 and "fallback" in corpus[name]["flags"], (name, fallback)
    fallback = corpus["fallback_numpy_matmul"]["fallback"]
    assert fallback["no_work_observed"] is True and fallback["library_share"] is None, fallback
    sampled = fallback["sampled"]
    if "error" in sampled:
        pytest.skip(f"the parent cannot sample here: {sampled['error']}")
    assert sampled["foreign_library"] and sampled["foreign_share"]["candidate"] > 0.5, sampled
    assert any("openblas" in obj for obj in sampled["foreign_objects"]), sampled
    assert sampled["foreign_share"]["reference"] < 0.01 and "fallback" in corpus["fallback_numpy_matmul"]["flags"]
    honest = corpus["correct_torch"]["fallback"]["sampled"]  # plain PyTorch: no foreign library, its own flag only
    assert not honest["foreign_library"] and not honest["no_own_code"], honest
    own = corpus["example_cpp_relu"]["fallback"]["sampled"]  # its own C++ loop is sampled as its own
    assert own["own_samples"] > 0 and own["flags"] == [], own


@pytest.mark.skipif(not SAMPLER[0], reason=f"needs the parent's sampler (kbv.sandbox.sampler): {SAMPLER[1]}")
def test_a_profiled_call_told_apart_is_seen_in_the_timing_stages_samples(corpus, monkeypatch) -> None:
    """Issue 12, rule 2: a candidate that runs its own C++ loop only in the profiled call (it sees the recorder's
    dispatch mode) and torch.relu in every timed call. The profiled call shows its own kernel; the parent's samples
    of the timing stage show none of its own code where its calls there would have given about 20 or more:
    ``fallback``. The honest C++ ReLU's timed calls are sampled in its own loop. With the check off (the share
    required set to zero) the same candidate, from the same build, is ``correct`` with no flag."""
    from kbv.fallback import sampled as sampled_mod

    hack = corpus["profiled_own_timed_torch"]
    seen = hack["fallback"]["sampled"]
    assert hack["fallback"]["own_units"] > 0 and hack["fallback"]["library_share"] == 0.0, hack["fallback"]
    assert seen["timed_own_missing"] and seen["timed_own_samples"] == 0, seen
    assert seen["timed_expected_samples"] >= sampled_mod.TIMED_EXPECTED_MIN and "fallback" in hack["flags"]
    honest = corpus["example_cpp_relu"]["fallback"]["sampled"]
    assert not honest["timed_own_missing"], honest
    assert honest["timed_own_samples"] >= sampled_mod.TIMED_OWN_SHARE_MIN * honest["timed_expected_samples"] > 0
    monkeypatch.setattr(sampled_mod, "TIMED_OWN_SHARE_MIN", 0.0)
    entry = next(e for e in ENTRIES if e["id"] == "profiled_own_timed_torch")
    record = evaluate(problem_path(entry["problem"]), ROOT / entry["file"], EvalOptions(**OPTIONS[("cpu", "long")]))
    assert record.verdict == "correct" and set(record.flags) - CPU_MEASUREMENT_FLAGS == set(), record.flags


def test_a_workspace_hidden_from_the_memory_command_is_seen_over_the_timing_stage(corpus, monkeypatch) -> None:
    """Issue 12, rules 2 and 4: a candidate that makes a 128 MiB workspace in its first call outside the memory
    command (it finds ``cmd_memory`` on its stack) is not seen by that command's measure of one call; the parent's
    high-water mark over all its timing commands, less the timed outputs each role keeps, is 128 MiB above the
    reference's. With that rule off (its slack unbounded) the same candidate gets no memory flag."""
    from kbv.eval import performance as perf_mod

    hack = corpus["memory_cmd_detect"]
    stage = hack["memory_bytes"]["timing_stage"]
    assert stage["flagged"] and stage["compared"]["candidate"] - stage["compared"]["reference"] >= 100 * 2**20, stage
    assert hack["memory_bytes"]["candidate_peak"] <= hack["memory_bytes"]["reference_peak"] + 2**20  # unseen there
    honest = corpus["correct_torch"]["memory_bytes"]["timing_stage"]
    assert not honest["flagged"] and abs(honest["compared"]["candidate"] - honest["compared"]["reference"]) < 32 * 2**20
    monkeypatch.setattr(perf_mod, "STAGE_MEMORY_SLACK_BYTES", 2**40)
    entry = next(e for e in ENTRIES if e["id"] == "memory_cmd_detect")
    record = evaluate(problem_path(entry["problem"]), ROOT / entry["file"], EvalOptions(**OPTIONS[("cpu", "fast")]))
    assert record.verdict == "correct" and "memory_above_reference" not in record.flags, record.flags


def test_a_workspace_under_the_old_slack_is_seen_over_the_timing_stage(corpus, monkeypatch) -> None:
    """Issue 12, rule 4: a 24 MiB workspace made outside the memory command and kept is above the whole stage's
    16 MiB slack (48 MiB until the kept output copies left glibc's heap, docs/results/cpu-2026-12-05-d). With the
    old slack the same candidate gets no memory flag."""
    from kbv.eval import performance as perf_mod

    stage = corpus["memory_held_24mib"]["memory_bytes"]["timing_stage"]
    assert stage["flagged"] and stage["compared"]["candidate"] - stage["compared"]["reference"] >= 16 * 2**20, stage
    monkeypatch.setattr(perf_mod, "STAGE_MEMORY_SLACK_BYTES", 48 * 2**20)
    entry = next(e for e in ENTRIES if e["id"] == "memory_held_24mib")
    record = evaluate(problem_path(entry["problem"]), ROOT / entry["file"], EvalOptions(**OPTIONS[("cpu", "fast")]))
    assert record.verdict == "correct" and "memory_above_reference" not in record.flags, record.flags


def test_work_while_idle_is_seen_from_the_workers_cpu_clock(corpus, monkeypatch) -> None:
    """Issue 12, rule 4: a candidate whose thread (started through ``_thread``, so no ``threading`` record and no
    growth after its first call) spins whenever the reference is timed leaves every in-worker check and every timed
    window clean; the parent's reading of its worker's CPU clock while it had no command shows the work (the
    reference's worker used next to none while idle; the corpus entry runs with idle workers left running). By
    default the idle worker is stopped while the reference is timed and nothing spins. With that rule off (its slack
    unbounded) and the workers left running the same candidate is ``correct`` with no flag of its own."""
    from kbv.eval import performance as perf_mod

    idle = corpus["idle_spinner"]["timing_ms"]["idle_cpu"]
    # a margin of twice what the rule allows: the spinner used 140-258 ms alone on this CPU, 99 ms beside another
    # test run (its thread then got less of a CPU)
    assert idle["flagged"] and idle["cpu_ms"]["candidate"] > 2 * idle["allowed_ms"], idle
    honest = corpus["correct_torch"]["timing_ms"]["idle_cpu"]
    assert not honest["flagged"] and honest["cpu_ms"]["candidate"] < 5.0, honest
    entry = BY_ID["idle_spinner"]
    # by default the idle worker is stopped while the reference is timed (kbv.sandbox.freeze): nothing spins then
    stopped = evaluate(problem_path(entry["problem"]), ROOT / entry["file"], EvalOptions(**OPTIONS[("cpu", "fast")]))
    idle = stopped.timing_ms["idle_cpu"]
    assert not idle["flagged"] and idle["cpu_ms"]["candidate"] < 10.0, idle
    assert stopped.verdict == "correct" and "idle_work" not in stopped.flags, stopped.flags
    monkeypatch.setattr(perf_mod, "IDLE_CPU_SLACK_MS", float("inf"))
    record = evaluate(problem_path(entry["problem"]), ROOT / entry["file"],
                      EvalOptions(**OPTIONS[("cpu", "fast")], freeze_idle=False))
    assert record.verdict == "correct" and set(record.flags) - CPU_MEASUREMENT_FLAGS == {"fallback"}, record.flags


def test_a_scratch_hidden_from_the_memory_command_is_seen_around_every_timed_call(corpus, monkeypatch) -> None:
    """Issue 12, rules 2 and 4: a candidate that maps and unmaps an 8 MiB scratch in every forward but the memory
    command's is not seen there, nor over the whole timing stage (under its 16 MiB slack); the parent's reading
    around every timed call, both roles alike, puts its median call 8 MiB above the reference's. With that measure
    off the same candidate gets no memory flag."""
    from kbv.eval import performance as perf_mod

    hack = corpus["memory_scratch_except_measured"]["memory_bytes"]
    assert hack["candidate_peak"] <= hack["reference_peak"] + 2**20  # the memory command: nothing
    assert not hack["timing_stage"]["flagged"]  # the whole stage: under its slack
    calls = hack["timed_calls"]
    assert calls["flagged"] and calls["median"]["candidate"] - calls["median"]["reference"] >= 6 * 2**20, calls
    honest = corpus["correct_torch"]["memory_bytes"]["timed_calls"]
    assert not honest["flagged"] and honest["calls"]["candidate"] > 0
    monkeypatch.setattr(perf_mod.PerformanceStage, "_call_memory", lambda self, role: None)
    entry = next(e for e in ENTRIES if e["id"] == "memory_scratch_except_measured")
    record = evaluate(problem_path(entry["problem"]), ROOT / entry["file"], EvalOptions(**OPTIONS[("cpu", "fast")]))
    assert record.verdict == "correct" and "memory_above_reference" not in record.flags, record.flags
    assert "timed_calls" not in record.memory_bytes


def test_calling_the_reference_is_rejected_when_custom_kernels_are_required() -> None:
    record = evaluate(problem_path("level1/5_ReLU"), CANDIDATES / "reference_via_sys_modules.py",
                      EvalOptions(device="cpu", timeout=30.0, require_custom_kernels=True))
    assert record.verdict == "rejected" and record.standard_verdict == "correct"
    assert set(record.flags) - CPU_MEASUREMENT_FLAGS == {"fallback"} and record.fallback["library_share"] == 1.0


# ---------------------------------------------------------------------------------------------------------------
# The manifest itself


_CATALOG_ID = re.compile(r"^[TMCFEB]\d+$")


def test_manifest_lists_every_fixture_once() -> None:
    ids = [e["id"] for e in ENTRIES]
    assert len(ids) == len(set(ids)), "duplicate ids"
    fixtures = {p.name for p in CANDIDATES.glob("*.py")}
    listed = {Path(e["file"]).name for e in ENTRIES if e["file"].startswith("tests/candidates/")}
    assert fixtures == listed, {"not in the manifest": sorted(fixtures - listed),
                                "listed but missing": sorted(listed - fixtures)}
    for e in ENTRIES:
        assert e["file"] == "@reference" or (ROOT / e["file"]).is_file(), e["id"]
        problem = ROOT / e["problem"] if e["problem"].endswith(".py") else problem_path(e["problem"])
        assert problem.is_file(), e["id"]


def test_manifest_entries_are_well_formed() -> None:
    from test_security_coverage import catalog_ids

    known = set(catalog_ids())
    for e in ENTRIES:
        assert e["kind"] in ("hack", "honest", "broken") and e["device"] in ("cpu", "cuda"), e["id"]
        verdicts = e["verdict"] if isinstance(e["verdict"], list) else [e["verdict"]]
        assert set(verdicts) <= VERDICTS and (e["standard_verdict"] is None or e["standard_verdict"] in VERDICTS)
        assert all(_CATALOG_ID.match(c) and c in known for c in e["catalog"]), e["id"]
        flags = [*e["flags"], *e.get("flags_optional", ()), *e.get("flags_any", ())]
        assert set(flags) <= set(FLAGS), (e["id"], set(flags) - set(FLAGS))
        assert set(e.get("speedup_max_unless", ())) <= REJECTING_FLAGS and (
            "speedup_max" in e or "speedup_max_unless" not in e), e["id"]
        if e.get("gap"):
            assert e["gap"]["reason"] and e["gap"]["want"] and e["kind"] == "hack", e["id"]
            assert set(e["gap"]["want"]) <= {"verdict", "flags_include", "flags_any", "any_detection",
                                             "speedup_below"}, e["id"]
            assert "evaluated_in" not in e
        if "evaluated_in" in e:  # the named test exists
            location, _, name = e["evaluated_in"].partition("::")
            source = (ROOT / location).read_text()
            function, _, param = name.partition("[")
            assert f"def {function}(" in source, e["evaluated_in"]
            assert not param or param.rstrip("]") in source, e["evaluated_in"]


def test_documented_entries_exist() -> None:
    """docs/security.md names these entries' tests as evidence: each is evaluated here and is not a gap."""
    doc = (ROOT / "docs" / "security.md").read_text()
    named = set(re.findall(r"tests/test_adversarial\.py::test_corpus\[([\w]+)\]", doc))
    assert named == set(DOCUMENTED), {"named but not listed": sorted(named - set(DOCUMENTED)),
                                      "listed but not named": sorted(set(DOCUMENTED) - named)}
    for name in DOCUMENTED:
        entry = BY_ID[name]
        assert entry["device"] == "cpu" and "evaluated_in" not in entry and not entry.get("gap"), name


def test_the_corpus_has_at_least_thirty_distinct_hacks() -> None:
    """Issue #3: one candidate per hack, at least 30, as many as possible on the CPU."""
    hacks = [e for e in ENTRIES if e["kind"] == "hack"]
    assert len({e["hack"] for e in hacks}) == len(hacks), "two entries describe the same hack"
    assert len([e for e in hacks if e["device"] == "cpu"]) >= 30
