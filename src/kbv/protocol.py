"""What kbv checks and how: the single place for every constant a user can see.

Distributions, tolerances, baselines, verdicts and their precedence, flag vocabulary and timing rules are defined
here and nowhere else; the README's tables are written from this module (``kbv protocol`` prints them).
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from typing import Final

SCHEMA: Final = "kbv.result/1"

# ---------------------------------------------------------------------------------------------------------------
# Input distributions. D1 is the problem's own get_inputs() (torch.rand); the others map its floating inputs
# affinely, x * scale + shift (integer inputs and a problem's KBV_UNSCALED positions are left as drawn).


@dataclass(frozen=True)
class Distribution:
    name: str
    scale: float
    description: str
    shift: float = 0.0


DISTRIBUTIONS: Final = (
    Distribution("D1", 1.0, "get_inputs() as the problem draws it (torch.rand: uniform [0, 1))"),
    Distribution("D2", 3.0, "D1 x 3.0: larger magnitudes (overflow, saturation, range-limited approximations)"),
    Distribution("D3", 0.01, "D1 x 0.01: tiny magnitudes (missing eps, absolute-tolerance loopholes)"),
    Distribution("D4", -1.0, "D1 x -1.0: negated inputs (identity-on-positive shortcuts, sign bugs)"),
    Distribution("D5", 2.0, "2 D1 - 1: both signs in one tensor, uniform [-1, 1) (kernels that decide from one "
                 "element's sign or assume one-signed data)", shift=-1.0),
    Distribution("D6", 200.0, "100 (2 D1 - 1): large magnitudes of both signs, uniform [-100, 100) (exp without "
                 "max subtraction, naive log-sum-exp, overflow in fp32 intermediates)", shift=-100.0),
)
DISTRIBUTION_NAMES: Final = tuple(d.name for d in DISTRIBUTIONS)
STANDARD_DISTRIBUTION: Final = "D1"
TIMED_DISTRIBUTION: Final = "D1"  # the problem's own inputs, on which kbv times kernels (kbv lint's findings)
DEFAULT_TRIALS_PER_DISTRIBUTION: Final = 3

# ---------------------------------------------------------------------------------------------------------------
# Tolerance policy: two criteria, both must hold for every floating output tensor.
#
# (1) Elementwise: each element c passes against reference element r when
#         |c - r| <= atol_eff + rtol * |r|,   atol_eff = max(atol_scale * scale(ref), atol_floor)
#     where scale(ref) is the root-mean-square of the reference's finite values, computed in float64. Scaling the
#     absolute term by the output's own magnitude keeps the policy able to fail under D3, whose outputs are ~100x
#     smaller (a fixed atol=1e-2 would accept all-zeros there). A reference that is exactly zero has scale 0 and
#     falls back to atol_floor, so zeros pass only where the reference really is zero (ReLU under D4).
# (2) Centred relative error: ||c - r||_2 / ||r - mean(r)||_2 <= centred_rtol. An output whose variation is small
#     against its magnitude (sigmoid or softmax under D3, a sum of 4096 sigmoids) would otherwise accept a constant:
#     the best constant scores exactly 1.0 here, zeros and the input score more. The criterion applies when the
#     output has more than one element and its variation is resolvable at the output's precision:
#     std(r) > resolution_factor * eps(dtype) * rms(r).
#
# Non-finite values: where the reference is NaN the candidate must be NaN, where it is +/-inf the candidate must be
# the same inf; where the reference is finite the candidate must be finite. Integer and bool outputs must be equal.


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol_scale: float
    atol_floor: float
    centred_rtol: float
    resolution_factor: float


TOLERANCES: Final = {
    "fp32": Tolerance(rtol=1e-2, atol_scale=1e-2, atol_floor=1e-6, centred_rtol=2e-2, resolution_factor=16.0),
    "bf16": Tolerance(rtol=2e-2, atol_scale=2e-2, atol_floor=1e-4, centred_rtol=5e-2, resolution_factor=16.0),
}
PRECISIONS: Final = tuple(TOLERANCES)
# A trial that fails the tolerance is judged again against the reference's own run of its inputs in strict IEEE
# float32 (TF32 and reduced-precision paths off), with both criteria widened to this factor times how far the
# reference's judged run lies from that strict run (kbv.judge.recheck_with_noise): an honest kernel with the
# reference's own rounding errs about as much again. Without it the reference failed as its own candidate:
# level2/5 (ConvTranspose2d, tanh) under D6 on an H100, TF32 convolutions of another cuDNN algorithm in each
# process, 0.033 against 0.0098 allowed where the output crosses zero (h100-2026-12-06-d).
PRECISION_NOISE_FACTOR: Final = 2.0

# KernelBench's standard protocol: D1 only, torch.allclose(out, ref, atol=tol, rtol=tol), tol by version and
# precision: "v0" is KernelBench v0/v0.1 (1e-2 everywhere, the default: the published results used it); "current"
# is KernelBench's current code (get_tolerance_for_precision: 1e-4 for fp32, 1e-2 for bf16).
STANDARD_TOLERANCES: Final = {"v0": {"fp32": 1e-2, "bf16": 1e-2}, "current": {"fp32": 1e-4, "bf16": 1e-2}}
DEFAULT_STANDARD_TOLERANCE: Final = "v0"
STANDARD_ATOL: Final = STANDARD_TOLERANCES[DEFAULT_STANDARD_TOLERANCE]["fp32"]
STANDARD_RTOL: Final = STANDARD_ATOL

# ---------------------------------------------------------------------------------------------------------------
# Baselines. Both the reference and the candidate are timed under each, in one run, on the same device.


@dataclass(frozen=True)
class Baseline:
    name: str
    float32_matmul_precision: str  # legacy API: torch.set_float32_matmul_precision
    matmul_fp32_precision: str  # new API: torch.backends.cuda.matmul.fp32_precision
    cudnn_allow_tf32: bool  # legacy API: torch.backends.cudnn.allow_tf32
    cudnn_conv_fp32_precision: str  # new API: torch.backends.cudnn.conv.fp32_precision
    description: str


BASELINES: Final = {
    "standard": Baseline(
        "standard", "highest", "ieee", True, "tf32",
        "KernelBench's: fp32 matmuls in true fp32 (TF32 off), cuDNN at PyTorch defaults (conv TF32 on)",
    ),
    "verified": Baseline(
        "verified", "high", "tf32", True, "tf32",
        "what a practitioner runs: TF32 matmuls (set_float32_matmul_precision('high')) and cuDNN TF32 on",
    ),
}
PROTOCOLS: Final = {"verified": ("verified",), "standard": ("standard",), "both": ("standard", "verified")}

# ---------------------------------------------------------------------------------------------------------------
# Verdicts, most severe first. The record's verdict is the first that applies.

VERDICT_PRECEDENCE: Final = ("compile_error", "timeout", "runtime_error", "incorrect", "rejected", "correct")
VERDICTS: Final = frozenset(VERDICT_PRECEDENCE)


def worst_verdict(*verdicts: str) -> str:
    """The most severe of the given verdicts (timeout and runtime_error rank equal; the first given wins)."""
    rank = {v: i for i, v in enumerate(VERDICT_PRECEDENCE)}
    rank["runtime_error"] = rank["timeout"]
    return min(verdicts, key=lambda v: rank[v])


# ---------------------------------------------------------------------------------------------------------------
# Flags: the documented vocabulary of the record's "flags" list.

FLAGS: Final = {
    "unmatched_params": "some candidate or reference parameters/buffers had no same-name, same-shape partner; "
    "those kept their seeded initialisation (names in correctness.unmatched)",
    "buffer_mismatch": "buffers the reference updates in forward (e.g. BatchNorm running stats) differ from the "
    "candidate's after the correctness trials",
    "memory_above_reference": "the candidate's peak memory for one forward exceeds the reference's (beyond the "
    "measurement slack of kbv.protocol.MEMORY_SLACK_BYTES: in the memory command's call, or by the median over "
    "every timed call, memory_bytes.timed_calls), or on CUDA its device memory in use (cudaMemGetInfo) "
    "exceeds the reference's by more than DEVICE_IN_USE_SLACK_BYTES or DEVICE_IN_USE_SLACK_REL of the reference's, "
    "whichever is more (the driver's figure per process where NVML gives one for both roles)",
    "reference_timing_cached": "the reference median comes from the timing cache; a short re-measure is recorded",
    "reference_error": "the reference itself failed (load, construction or forward); the candidate was not judged",
    "harness_error": "kbv itself failed on this pair (a bug to report; or its GPU correctness or timing stage ran out of "
    "device memory where the candidate had held no more than the reference: error.out_of_memory); the verdict is "
    "runtime_error",
    "input_mutated": "forward wrote into an input tensor (the reference does not); outputs may be right: rejected",
    "output_aliases_input": "an output shares storage with an input (the reference's does not): rejected",
    "imported_kernelbench": "the record was converted from a KernelBench eval_results.json (kbv import-kernelbench)",
    "tamper": "the candidate changed its worker's environment (torch or time functions, tensor methods, kbv's own "
    "functions, numeric flags); the names are in integrity.tamper: rejected",
    "idle_work": "the candidate's timing worker used CPU while it had no command, as the reference was timed, more "
    "than the reference's worker did while the candidate was (timing_ms.idle_cpu, read by the parent): work beside "
    "the reference's timing or outside every timed call: rejected",
    "reference_slowed": "on a GPU the reference's timing commands that came right after one of the candidate's were "
    "all slower than all its others by more than REFERENCE_AFTER_CANDIDATE_MAX (timing_ms.reference_after_candidate), "
    "or the pair's pooled reference median beside the candidate's process (the figure its speedup reads) was slower "
    "than its clean command, timed once that process was gone, by more than REFERENCE_CLEAN_MAX "
    "(timing_ms.reference_clean; a finding of at most REFERENCE_CLEAN_REJECT_ABOVE is not flagged: the pair's "
    "reference times are capped at REFERENCE_CLEAN_MAX times the clean commands' instead; nor is one whose pair's "
    "speedup is within REFERENCE_CLEAN_MAX of the clean speedup of the pairs with no finding: excused, the "
    "candidate's own calls as slow), each in the pairs timed "
    "and again in a fresh pair that confirmed it: "
    "device work the candidate left queued ran beside the reference's timed calls: rejected",
    "background_threads": "the candidate's thread count grew across a forward call (after the first) where the "
    "reference's did not, or its import or __init__ left Python threads running (correctness.input_use."
    "started_threads): work can run past the call's end: rejected",
    "degenerate_output": "an output has a zero stride along a dimension longer than 1 (an expanded view) where the "
    "reference's has none: rejected",
    "fallback": "the forward's work is library code (PyTorch/ATen ops, at::cpu::*/at::native::*, cuBLAS, cuDNN, "
    "BLAS, oneDNN) with no own kernel beside it: library share >= kbv.fallback.FALLBACK_THRESHOLDS"
    "['fallback'] (details in the record's fallback field); rejected under --require-custom-kernels",
    "partial_fallback": "own kernels ran and so did library compute (library share above FALLBACK_THRESHOLDS"
    "['partial_fallback'] and below 'fallback'); rejected under --require-custom-kernels",
    "above_roofline": "a timed median beats the problem's roofline bound (attainment above 1): a counting bug or a "
    "kernel that skips work, never a win; the names are in roofline.above_roofline",
    "speedup_above_bound": "a speedup above the configured bound (--speedup-bound): never reported unflagged",
    "timed_output_mismatch": "the output of a timed call (one per process pair, picked at random inside the "
    "timer's loop, every timed call reading fresh contents) was wrong against the reference on the same inputs "
    "(outputs cached, deferred, or skipped while timed): incorrect",
    "deferred_output": "a timed call's output changed after the call returned (DEFERRED_WRITE_WAIT_S later): work "
    "finished outside the timed window by a thread or queue: rejected",
    "skipped_distribution": "the problem declared a distribution not applicable; it is recorded as skipped",
    "uninitialized_read": "the outputs change with the contents of freed memory: the poisoned D1 trial (freed "
    "blocks filled with POISON_BYTES[1] instead of POISON_BYTES[0]) failed where the others passed: incorrect",
    "nondeterministic": "two D1 calls on the same inputs under different poison both passed but differ bit for bit "
    "(atomics, races or uninitialised reads below tolerance); details in correctness.poison",
    "out_of_bounds_write": "forward wrote into the guard band around an input (bytes before or after its data): "
    "rejected",
    "low_precision": "against a float64 reference the candidate's error is above PRECISION_CHECK's factor times "
    "the verified (TF32) baseline's own error; details in correctness.precision; rejected under --strict-precision",
    "timer_inconsistent": "the timed calls' reported times add up to more than the evaluator's own clock measured "
    "around them: the worker's timer cannot be trusted: rejected",
    "untimed_work": "the evaluator's own clock around each timed call (from handing over the call's inputs to "
    "receiving its output's commitment: kbv.eval.pacing) shows the candidate spending more untimed time per call "
    "than the reference by more than UNTIMED_WORK_FLOOR_MS, UNTIMED_WORK_REL of the reference's own untimed time, "
    "UNTIMED_WORK_SHARE of the per-call time its timer says it saves and UNTIMED_WORK_OWN of its own timed median: "
    "work done outside the timed window "
    "(precomputed while the inputs were loaded, finished before the output was kept) or times forged: rejected",
    "wall_clock_mismatch": "the worker's timer and the evaluator's own clock disagree on back-to-back calls "
    "(timing_ms.burst, the one clock cross-check): a claimed speedup of BURST_MIN_CLAIM (BURST_MIN_CLAIM_CPU on the "
    "CPU) or more (the lower end of the record's interval, over every pair) shows as at most "
    "BURST_MAX_WALL_SPEEDUP while the reference's wall time is its timed work, or, whatever the claim, the "
    "candidate's wall time per call is over BURST_MAX_WALL_OVER_TIMED times its timed median beyond the reference's own ratio (time taken off the timer, or "
    "host overhead that eats the kernel's gain)",
    "timing_truncated": "the candidate is far slower than the reference (its time per call above "
    "TIMING_TRUNCATE_FACTOR times the reference's median, its trials longer than TIMING_TRUNCATE_MIN_MS): it was "
    "timed with few trials, once, and its speedup is an upper bound (speedup.<baseline>.bound = 'upper': the "
    "reference's median over the candidate's fastest trial); the parent takes the worker's cut only where every "
    "reported trial took at least TIMING_TRUNCATE_CONFIRM of the slow bound (else timing_ms.truncation_refused and "
    "every check runs)",
    "resources_changed": "the candidate widened the CPUs the parent pinned its worker to (the same CPUs as the "
    "reference's, read from /proc by the parent): rejected",
    "gpu_unhealthy": "the GPU failed kbv's health check after this candidate (a CUDA error): later pairs moved to "
    "other GPUs or were not run",
}

# Flags that make a correct kernel "rejected" only under --require-custom-kernels.
FALLBACK_FLAGS: Final = frozenset({"fallback", "partial_fallback"})

# A speedup above this is flagged (KernelBench flags above 10x too); --speedup-bound changes it.
DEFAULT_SPEEDUP_BOUND: Final = 10.0

# Flags that turn an otherwise correct kernel into "rejected" (its outputs are right but it breaks a rule).
REJECTING_FLAGS: Final = frozenset({"input_mutated", "output_aliases_input", "tamper", "background_threads",
                                    "degenerate_output", "out_of_bounds_write", "timer_inconsistent",
                                    "deferred_output", "resources_changed", "untimed_work", "idle_work",
                                    "reference_slowed"})
# Work while idle (``idle_work``): the CPU time a candidate's timing worker may use while the reference's timing
# command runs (it has no command then), beyond what the reference's worker used while the candidate's ran: the larger
# of this many milliseconds over the stage and this share of the time it was idle.
IDLE_CPU_SLACK_MS: Final = 25.0
IDLE_CPU_SLACK_REL: Final = 0.05
# On a GPU the parent also reads the driver's per-process utilisation samples (NVML, about six a second) of each
# idle timing worker and records them (``timing_ms.idle_gpu``): recorded only. On the H100
# (docs/results/h100-2026-12-05) honest idle workers were named in none, but a worker loading the GPU at about half
# duty while idle was named in none either (its CPU clock caught it), and an honest idle process was once named with
# 1 % SM: the samples are too coarse to decide on. The samples that saw SM use are kept, up to IDLE_GPU_KEPT_SAMPLES per role.
IDLE_GPU_KEPT_SAMPLES: Final = 64
# Work queued on a GPU before a reply runs beside the other role's next timing command, and in ABBA rounds the
# reference's second and fourth commands come right after one of the candidate's (the candidate knows the round from
# its command). On a GPU, the least median of those commands over the most of the reference's others above this is
# ``reference_slowed``. The first reference command of each pair is in neither group: it follows the candidate's
# setup and memory command, where a candidate could queue work too (counted among the others, it would hide
# work queued at every reply). Honest pairs on the H100 read 0.78-1.02 so over 59 records (the reward batches and
# the GPU corpus of docs/results/h100-2026-12-05-c: KernelBench levels 1-2, the reference timed beside 10 real
# kernels and itself); the least over the most keeps a slow process pair or a drifting clock below 1. But with one
# timing pair the rule reads two commands against one, and the reference timed against itself read 1.26 on a matmul
# whose calls took 0.34 or 0.49 ms (docs/results/h100-2026-12-06-d): a finding is confirmed on a fresh pair, as the
# clean command's is (kbv.eval.performance.PerformanceStage._confirm_reference_slowed). Recorded only on the CPU,
# where idle_work reads the idle worker's clock and honest ratios were 0.95-1.0.
REFERENCE_AFTER_CANDIDATE_MAX: Final = 1.2
# Work the candidate's process queued on a GPU in the instant between a reply and its stop (kbv.sandbox.freeze) runs
# on once the process is stopped, and long enough work slows every reference command of the pair alike, which the
# rule above cannot see (on the H100 a graph of 120 matmuls replayed at each reply read 7.34x with ratios of 0.9995
# and 1.0001: docs/results/h100-2026-12-06). Stopping a process does not stop its queued kernels; ending it does
# (its context goes with it). So once a pair's candidate is timed, its processes are killed and waited for, and the
# reference runs one more timing command, the clean command, with no process of the candidate's left: the pair's
# pooled reference median (the figure its speedup reads) over the clean command's median above REFERENCE_CLEAN_MAX
# (per pair and baseline) is a finding; a fresh pair, cleaned as any other, decides it: flagged there too, it is
# ``reference_slowed``, rejected (timing_ms.reference_clean); clear there, the flagged pairs' times are dropped. The
# pooled median, not the least command: on the H100 a candidate that slowed two of a pair's four reference
# commands tenfold read 1.00 by the least command and claimed 2.65x. The confirmation: one honest pair of 54 read
# 1.20 there when the GPU's state changed between its commands; 48 honest pairs of a first batch read 0.75-1.03
# (docs/results/h100-2026-12-06-b). Run wherever the pair's reference times count (not for
# a cached reference's short re-measure, whose cache entry was itself written only from clean pairs), by default
# on a GPU only (CLEAN_REFERENCE_DEFAULT; KBV_CLEAN_REFERENCE=1 or 0 always or never): on the CPU the stopped
# worker leaves nothing running, and there the ratio is recorded only.
CLEAN_REFERENCE_DEFAULT: Final[dict[str, bool]] = {"cpu": False, "cuda": True}
# Sub-ms matmul references timed against themselves read above it and were confirmed by their fresh pair on an
# H100, 2 of 150 evaluations (level1/14: 1.27, then 1.23; level1/12: 1.26, then 1.47; h100-2026-12-07), false
# `reference_slowed`; every reading above 1.1 there (8 of 47) was one of level1/12-16. The cause (h100-2026-12-07-b,
# benchmarks/distribution_cost.py and neighbour_cost.py): whole commands of one process run at one of two speeds,
# level1/14 at 0.41 or 0.50 ms, level1/15 0.39 or 0.45, level1/12 0.09 or 0.11, with no other process on the GPU;
# an idle or stopped neighbour process did not slow them (stopped over alone 0.85 and 1.00), and fresh processes
# differed by 1.01-1.02. The pooled median beside the candidate spans four commands, one clean command only one.
REFERENCE_CLEAN_MAX: Final = 1.2
# So a finding (a ratio above REFERENCE_CLEAN_MAX) is read again over this many clean commands, their calls pooled as
# the four beside the candidate are (kbv.eval.performance.PerformanceStage._clean_reference): the reference's own
# two speeds then weigh alike on both sides. The clean commands are the trusted reference's with no process of the
# candidate's left, so more of them can clear only what the reference's own spread explains: a candidate that slows
# every reference command beside it is read against four clean ones as against one. On an H200 (h200-2026-12-07-c)
# level1/10 read 1.210 by one clean command and 1.191 pooled: cleared; level3/3, all four clean commands at the
# faster of its two speeds, 1.452 and 1.451, was cleared by its fresh pair.
REFERENCE_CLEAN_POOLED_COMMANDS: Final = 4
# A finding no larger than this once pooled is not judged but capped: on a GPU the pair's reference times beside the
# candidate are scaled down until their median is REFERENCE_CLEAN_MAX times its pooled clean commands' (trusted: no
# process of the candidate's left), so a candidate that slowed the reference there gains what one that slowed it
# just under REFERENCE_CLEAN_MAX gains with no finding, and no fresh pair runs (``timing_ms.reference_clean``
# ``substituted``, ``scaled_by``). Above it, the fresh pair decides as before. Launch-bound pairs read inside it
# honestly: on an H100 the fixed pair (64x2048 ReLU, calls of 0.06-0.11 ms) read 1.14-1.19 in two runs and 1.35,
# then 1.33 in its fresh pair, in a third, a false ``reference_slowed`` (h100-2026-12-07-g); the queued-work entry
# of the GPU corpus (``cuda_queue_after_reply``) reads 5.7-8.5 pooled. The cap, not the clean calls themselves: the
# fixed pair read 1.21 in two of three runs when both processes sped up in the pair's last round and the clean
# commands followed at that speed, and with the clean calls in place of its reference's the honest candidate read
# 0.864 (h100-2026-12-07-h); capped, an honest pair just above the bound loses as little as it is above it. A
# capped reference's times are never cached (they are scaled, not timed). A finding above it whose pair's candidate
# ran as slow is excused, not judged: its speedup (the pair's pooled reference median over its pooled candidate
# median) no more than REFERENCE_CLEAN_MAX times the median clean speedup (clean commands over the pooled candidate)
# of the stage's pairs with no finding (``reference_clean`` ``excused``). On an H100 the fixed pair's two processes
# ran whole commands at 0.04 or 0.07 ms a call together, and two of its four pairs read 1.72-1.78 with every clean
# command at the faster speed, their speedups 0.97-1.01: a false ``reference_slowed`` (h100-2026-12-07-i). A
# candidate that slows the reference and not itself keeps its gain and is judged; one that slows itself as much
# gains what the bound allows with no finding. A stage with no pair free of a finding (the reward preset's one
# pair and its fresh pair) excuses nothing.
REFERENCE_CLEAN_REJECT_ABOVE: Final = 1.5
# A clean command can read slow with nothing of the candidate's left: on the H100 honest pairs read 0.43-1.07 by the
# ratio above (level1/29's clean command 10.0 ms against 4.3 beside the candidate, as its pair's first command also
# read; docs/results/h100-2026-12-06-c), and a slow clean reading hides a real slowdown up to its factor. Where any
# baseline's ratio is below REFERENCE_CLEAN_RETRY_BELOW, the reference runs a second clean command right after the
# first (no candidate process exists for either), and each baseline's faster clean median counts: a second reading
# can only make the clean figure faster and the rule more sensitive, never clear a flag the first would have set.
REFERENCE_CLEAN_RETRY_BELOW: Final = 0.9

# Flags that make a correct kernel "rejected" only under --strict-precision.
PRECISION_FLAGS: Final = frozenset({"low_precision"})

# ---------------------------------------------------------------------------------------------------------------
# Memory and precision probes of the correctness stage.

# Freed memory in the candidate's correctness worker is filled with the first byte before every forward (0xFF:
# NaN in every float format, -1 in every integer one); one extra D1 call uses the second (0x4B: ~1.3e7 in float32
# and bfloat16, ~15 in float16), so a kernel that reads memory it never wrote gives NaN or a different answer.
POISON_BYTES: Final = (0xFF, 0x4B)
# Bytes of guard band before and after every input in correctness trials (filled from the trial's seed).
GUARD_BYTES: Final = 64 * 1024
# Timed calls whose lent inputs or bands the judge found written to, kept in the record (correctness.input_use.
# timed_lent); the flag needs one.
LENT_CHECKS_KEPT: Final = 8
# On a GPU the parent pins both roles' timing workers to the same this many CPUs, a set of their own for each GPU
# (the last of the parent's CPUs for GPU 0, the ones below them for GPU 1, and so on), and every other worker of the
# run (correctness, lenders) to the CPUs left; a candidate that widens its set is resources_changed, as on the CPU.
# The trusted side's choice for both roles alike (issue 12's rule 5), not a speed-up: on one H100 start, pinned to
# one CPU, level3/3's verified commands held at 0.55-0.71 ms and three pairs' timing stages were faster (3.74 against
# 4.26 s for level3/3); on another, three launch-bound pairs took 9.10 s a pair pinned against 7.95 unpinned, and one
# pinned process switched between 0.72-0.77 and 1.04-1.26 ms from command to command at an SM clock of 1,980 MHz
# throughout (one run each, docs/results/h100-2026-12-07-e). 0 leaves them unpinned (KBV_GPU_TIMING_CPUS=N sets N).
GPU_TIMING_CPUS: Final = 1
# Both roles' timed inputs are lent by a third process, the lender (kbv.eval.lent_timing), by default on these
# devices (KBV_LEND_TIMED=1 or 0: always or never). Lending the candidate's alone moved its timings: on this project's
# 2-core CPU the reference as its own candidate fell to 0.36-0.68 at 25-50 us per call (docs/results/cpu-2026-12-04,
# cpu-2026-12-04-c), on the H200 it rose to 1.75-2.20 at a few microseconds (h200-2026-12-04). Both roles lent alike
# came back to 0.96-1.05 on the CPU (cpu-2026-12-04-c); on the GPU not yet measured, so not yet on by default there.
LEND_TIMED_DEFAULT: Final[dict[str, bool]] = {"cpu": True, "cuda": False}
# Every forward of every timing command of both roles can run with a device-only recording of what it launched
# (kbv.worker.kernel_record; KBV_RECORD_TIMED=1 or 0: always or never): a GPU's profiled call would no longer be the
# one recorded call, and a fallback in the timed calls is flagged from them (fallback.timed_calls). Off by default
# on both: on the H100 with torch 2.11 and CUDA 13 (docs/results/h100-2026-12-06) a CUDA-only session whose
# collection was switched on around each forward recorded no kernel in any role; the session now records throughout
# and keeps each forward's window by time, which records there and caught both GPU corpus gaps with the honest Triton
# GELU clean (h100-2026-12-06-e), and again with the whole GPU corpus clean (h100-2026-12-06-f, -g). Over a 50-pair
# reward batch there (h100-2026-12-06-f) it made every timed call slower by about 90 us (geometric mean 1.057,
# 1.22-1.26 for the 0.35-0.40 ms matmuls) and the reference's clean command, not recorded, then flagged 4 of 50
# honest pairs (`reference_slowed`). The clean command is recorded too since: 20 of 20 level-1 pairs correct, those
# four among them (h100-2026-12-06-g). But a recorded call still read 1.115 times an unrecorded one's time (geometric
# mean over those 20 pairs, up to 1.40 for the sub-ms matmuls), which pushes a fast kernel's speedup toward 1; with
# the window opened by a spin kernel (RECORD_LEAD_CYCLES, below) still 1.078 for the candidate and 1.111 for the
# reference over the same 20 pairs, against the same machine's unrecorded batch just before, up to 1.41
# (h100-2026-12-06-h), so it stays off; on the CPU the parent's samples decide rule 2, and the recording of CPU
# operators is a stand-in for tests.
RECORD_TIMED_DEFAULT: Final[dict[str, bool]] = {"cpu": False, "cuda": False}
# Where a GPU timing command records (kbv.worker.timer), each call's window opens on an idle GPU (the harness's input
# draws finish first, so they stay out of it); unrecorded, those draws keep the GPU busy while the forward is
# launched. Opened with the flush alone, the recorded calls of h100-2026-12-06-g still read 8-240 us slower (the
# sub-ms matmuls up to 1.40 times) than the same machine's unrecorded ones: likely the forward's launch, timed on an
# idle GPU. So a recorded trial's window opens with a spin kernel of this many GPU cycles (torch.cuda._sleep: about
# 0.1 ms at the H100's and H200's 1.98 GHz) before the flush, which keeps the GPU busy while the forward is launched;
# the recording leaves both out (kbv.worker.kernel_record.LEAD_NAMES). Measured on an H100 (h100-2026-12-06-h), it
# did not remove the cost: benchmarks/recording_cost.py read recorded over plain at a median 1.027 (reference) and
# 1.031 (candidate) with it, 1.027 and 1.039 without, and the 20 level-1 pairs above 1.078 and 1.111. The cause is
# not found.
RECORD_LEAD_CYCLES: Final = 200_000
# Where a lender lends the timed inputs, it draws the next call's inputs into its own memory right after it has put
# this call's in the slot (the parent hands it the next seed with the fill: kbv.eval.lent_timing), so a call's
# answer waits for the read-back and a copy, not the draw (0.25 ms of 0.62 per fill on this CPU's 5_ReLU,
# docs/results/cpu-2026-12-05-c). The next call's inputs then exist in the lender (trusted) before the current call's
# output is committed, never in either borrower. Only where the lender has CPUs the timing workers do not
# (kbv.eval.context.PairContext.lender_cpus); not on a GPU, where the draw would run beside the timed kernel.
LEND_PREDRAW: Final[dict[str, bool]] = {"cpu": True, "cuda": False}


@dataclass(frozen=True)
class PrecisionCheck:
    factor: float  # low_precision when the candidate's error exceeds factor x the baseline's error ...
    floor: float  # ... with the baseline's error taken as at least this (reordered sums are not low precision)


# Error = ||out - out64||_2 / ||out64||_2 against the reference run in float64 on the same inputs (one D1 trial).
PRECISION_CHECK: Final = {"fp32": PrecisionCheck(factor=5.0, floor=1e-5),
                          "bf16": PrecisionCheck(factor=5.0, floor=4e-3)}
# The error is summed this many elements at a time (64 Mi: 512 MiB of float64 per chunk) so the judge does not hold
# float64 copies of a whole output (kbv.worker.precision.relative_l2).
PRECISION_CHUNK: Final = 2**26
# On the CPU the judge's passes over an output (comparison, standard check, precision error, digest of a kept output)
# work this many elements at a time instead: a CPU worker's C allocator maps every block of 32 MiB or more afresh
# (kbv.worker.memory.timing_allocator), so larger temporaries pay a page fault per 4 KiB page on every chunk. On this
# project's CPU, for a 256 MiB float32 output: the comparison 1.6-1.7 s at 2**24 elements against 0.4-0.6 s at 2**20,
# the precision error 1.05 s at 2**26 against 0.21 s, a digest 0.4 s against 0.04-0.14 s (docs/results/cpu-2026-12-05-b).
CPU_CHUNK: Final = 2**20

# ---------------------------------------------------------------------------------------------------------------
# Timing rules (CUDA events with a device-wide synchronize before the end event; perf_counter_ns on CPU).


@dataclass(frozen=True)
class TimingRule:
    warmup_ms: float
    min_warmup_calls: int
    budget_ms: float  # target total measured time per (model, baseline)
    min_trials: int
    max_trials: int
    flush_l2_factor: float  # flush buffer = factor x L2 size, written between trials
    process_pairs: int  # fresh (reference, candidate) worker pairs per measurement; the budget is split among them
    # a worker's later commands under a baseline warm up for this long by its estimate (at least one call, at most
    # min_warmup_calls): it has run the forward before. At min_warmup_calls a slow kernel's later warm-ups were most
    # of its timing: level2/2 (12.7 ms a call) spent 935 of its reference's 1,371 ms before the trials on them, 3
    # calls in each of 24 commands, for 25 timed trials (docs/results/h100-2026-12-07-e)
    rewarm_ms: float = 5.0


TIMING_RULES: Final = {
    # max_trials 300 (1000 until 2026-12-02, then 500 until 2026-12-02-c): the interval is set by the spread between
    # processes, not by the trials within one (a 64x2048 ReLU on the H200: process medians 10-45 % apart; a median's
    # standard error 3-5 % at 1000 trials, 4-7 % at 500: docs/results/h200-2026-12-02), and each trial costs
    # 0.4-0.7 ms of harness beside the kernel (docs/results/h200-2026-12-02-b). 300 trials over 3 process pairs x 4
    # rounds is three times KernelBench's 100 in one process. budget_ms 300 (600 until 2026-12-02-c): a kernel of
    # milliseconds is stable between processes (19 KernelBench pairs, the reference's kernels of 1-21 ms: process
    # medians within 0.2-4.6 %), and at 600 ms per role and baseline timing took 4.6-7.3 s of a 9-12 s pair
    # (docs/results/h200-2026-12-02-b).
    "cuda": TimingRule(warmup_ms=25.0, min_warmup_calls=3, budget_ms=300.0, min_trials=100, max_trials=300,
                       flush_l2_factor=2.0, process_pairs=3),
    "cpu": TimingRule(warmup_ms=20.0, min_warmup_calls=2, budget_ms=300.0, min_trials=10, max_trials=100,
                      flush_l2_factor=2.0, process_pairs=1),
}
# A candidate far slower than the reference (its estimated time per call above this many times the reference's
# median in the same pair) whose trials would take more than TIMING_TRUNCATE_MIN_MS in one timing call is cut to
# TIMING_TRUNCATED_TRIALS trials, timed once (no further rounds or pairs), and flagged timing_truncated.
TIMING_TRUNCATE_FACTOR: Final = 8.0
TIMING_TRUNCATE_MIN_MS: Final = 2000.0
TIMING_TRUNCATED_TRIALS: Final = 3
# The cut is the candidate worker's word: it shortens the stage and skips the checks that need many calls (untimed
# work, the burst), so the parent takes it only where every trial the worker reports took at least this share of the
# slow bound it sent (the speedup's upper bound then at most 1 / (TIMING_TRUNCATE_FACTOR x this share) against the
# reference's median of the pair). A claim the times do not bear out is refused (timing_ms.truncation_refused): no
# later command is offered the cut, and the stage goes on with every round, pair and check.
TIMING_TRUNCATE_CONFIRM: Final = 0.5
# torch's extension lock file (``<ext>/lock``) older than this, found by a compile stage that holds the build's guard
# (so no compile of the same source runs elsewhere), was left by a killed process and is removed (kbv.eval.workspace)
STALE_BUILD_LOCK_S: Final = 30.0
# A precompiled torch/extension.h for the C++ half of load_inline builds (kbv.eval.pch): one per flag set in
# PCH_VARIANTS (torch's own flags, and with -O3, which also serves -O2: GCC uses the first variant that is valid).
# With KBV_PCH=auto (the default) kbv builds it, once per toolchain, when one run has at least PCH_MIN_BUILDS
# load_inline candidates to build, and offers it to every later build once it exists; KBV_PCH=on builds it for one
# build, off neither builds nor offers it. A variant that takes longer than PCH_BUILD_TIMEOUT_S is left out.
PCH_VARIANTS: Final = ((), ("-O3",))
PCH_MIN_BUILDS: Final = 8
PCH_BUILD_TIMEOUT_S: Final = 600.0
# The input sets of one timing command, by call index: 3 the one set the estimate calls and every warm-up call
# read (0-2 are handed over with it, unused since cpu-2026-12-05-b: the estimates had a set each), FIRST_TIMED_CALL
# onwards one fresh set per timed trial (kbv.worker.timer.time_calls).
FIRST_TIMED_CALL: Final = 4
# Untimed calls at the start of a timing command whose median sets its trial count, where the parent sends no
# estimate. It sends one (the median per call of the worker's previous command under the same baseline) to a worker
# that has already timed that baseline: there the estimate calls were 3 of the 6 untimed calls before each command's
# trials, the most of a slow kernel's timing stage (level2/2 on h200-2026-12-07-c: 168 forwards a role for 24 timed).
ESTIMATE_CALLS: Final = 3
# While a timing command runs, each end of a request for a timed call's inputs (the worker waiting for its answer,
# the parent waiting for the next request) polls without sleeping for up to this long before it blocks: on the H200
# the parent's answer took 0.25-0.30 ms inside a run against 0.09 ms to an echo process that never slept
# (docs/results/h200-2026-12-02-d), the wake-up of an idle core. Not on the CPU, whose few cores run the workers.
# Not yet measured on the GPU: KBV_ASK_SPIN=0 (passed to every worker) turns it off for the comparison.
ASK_SPIN_S: Final = {"cuda": 0.002 if os.environ.get("KBV_ASK_SPIN", "1") != "0" else 0.0, "cpu": 0.0}


def ask_spin_s(device: str) -> float:
    """``ASK_SPIN_S`` for a device name ("cuda", "cuda:1" or "cpu")."""
    return ASK_SPIN_S["cuda" if device.startswith("cuda") else "cpu"]


DEFERRED_WRITE_WAIT_S: Final = 0.002  # after a kept timed output is copied: a later change means deferred work
BURST_TARGET_MS: Final = 60.0  # the parent-timed burst of back-to-back calls lasts about this long per role
BURST_MAX_CALLS: Final = 2000
BURST_MIN_CLAIM: Final = 1.5  # the burst check judges claims of at least this speedup (on a GPU)...
BURST_MIN_CLAIM_CPU: Final = 2.0  # ...and on the CPU, where one core times microsecond kernels with more noise
BURST_DEVICE_BOUND: Final = 1.5  # ...when the reference's burst time per call is at most this times its timed median
BURST_MAX_WALL_SPEEDUP: Final = 1.1  # ...and flags them when the burst shows at most this speedup
# Second rule, for any claim: the candidate's burst wall time per call above this many times its own timed median
# (beyond the reference's own ratio) means time was taken off its timer
BURST_MAX_WALL_OVER_TIMED: Final = 4.0
TIMING_ROUNDS: Final = 4  # within a process pair, reference and candidate alternate in this many rounds (ABBA)
REFERENCE_REMEASURE_TRIALS: Final = 10  # trials of the short re-measure when a cached reference time is reused
# A cached reference time that its short re-measure finds more than this share too slow (the re-measure's median
# below the cached median by more than this share) is not used: it was measured in a slow process, and every later
# evaluation of the problem would read an inflated speedup against it. The cache is set aside at once and dropped,
# and the reference is timed in full in the pair's remaining rounds beside the candidate, as with nothing cached, the
# cache taking that figure. On the H100, in two cached 50-pair reward batches (docs/results/h100-2026-12-07-d and
# h100-2026-12-07-f), 8 pairs of the reference against itself re-measured 7-18 % below a cache that was kept (the
# rule was 20 % then) and 7 of them read 1.145-1.262; the one pair beyond 20 % took the re-measure's ten trials alone
# as the reference's time (on the H200 a cached median 48 % above its re-measure had given 1.53:
# docs/results/h200-2026-12-05).
REFERENCE_CACHE_SLOW_MAX: Final = 0.05
# A re-measure more than this share slower than the cache is not used alone (ten trials can run slow: up to 3.2x the
# cached median on the H200, and taking them would inflate the candidate's speedup), nor is the cache: the reference
# is timed in full in the pair's remaining rounds and the cache takes that (on the H100 a cached time 0.70x of the
# machine's then gave the reference against itself 0.70: docs/results/h100-2026-12-05-b).
REFERENCE_DRIFT_MAX: Final = 0.2
# ...and for a slower re-measure to set the cache aside, this share of its trials must also be slower than nine in ten
# of the cached trials (a shift of the whole distribution, not a few slow trials: by chance 7 of 10 past the tail has
# odds of about 1 in 100,000)
REFERENCE_SHIFTED_SHARE: Final = 0.7
# A re-measure that would set the cache aside is followed at once by a second short one in the same process, up to
# this many in all, and the cache is set aside only where the last one would set it aside too. The first timing
# command of a reference process often read slow where its later commands did not: in 10 of 14 set-asides on the
# H100 (docs/results/h100-2026-12-06-b to h100-2026-12-07-b) the process's next command's median was within
# REFERENCE_DRIFT_MAX of the cache, and each set-aside cost the reference's full timing and a second process pair.
# Only the trusted reference's own commands run in between, and keeping the cache keeps a time once measured in full
# (a pair flagged reference_slowed never writes one).
REFERENCE_REMEASURE_COMMANDS: Final = 2
# Each timed call's seed is handed over by the parent when the worker is about to load that call's inputs, and, for
# a timed call after the first, only once the previous call's output was committed (kbv.eval.pacing). The parent's
# clock from handing over a call's seed to receiving its commitment (the call's window) bounds every piece of work
# done for that call; the window minus the reported time is the call's untimed time, the same harness work in both
# roles, though a kernel that disturbs the machine (caches, garbage, threads) slows it too. The candidate's median
# untimed time may exceed the reference's by the largest of these, else untimed_work:
UNTIMED_WORK_FLOOR_MS: Final = {"cuda": 0.05, "cpu": 0.1}  # milliseconds per call
# of the reference's own median untimed time per call: the harness's spread between processes (on the CPU the
# reference against itself differed by up to 0.2 ms of about 1 ms, most of it drawing the inputs)
UNTIMED_WORK_REL: Final = {"cuda": 0.25, "cpu": 0.4}
UNTIMED_WORK_SHARE: Final = 0.5  # of the per-call time the candidate's timer says it saves (reference - candidate)
UNTIMED_WORK_OWN: Final = 0.25  # of the candidate's own timed median (a slow kernel's cold caches and garbage)

# Timed inputs come from every distribution, in these proportions (a problem's declared skips left out): each block
# of consecutive timed calls holds each distribution this many times, in an order drawn from the command's key.
# The speedup is therefore the ratio of medians over this mix, not over D1 alone.
TIMED_DISTRIBUTION_WEIGHTS: Final = {"D1": 5, "D2": 1, "D3": 1, "D4": 1, "D5": 1, "D6": 1}
# Outputs of the timed calls a worker keeps until the parent has drawn the judged ones (after the pair's last round):
# at most this many bytes over the pair; a command's trials are capped to what fits.
RING_BYTES: Final = {"cuda": 8 * 2**30, "cpu": 256 * 2**20}
RING_DEVICE_FRACTION: Final = 0.15  # on a GPU, at least this share of its memory per worker (both roles keep alike)
CHANGED_KEPT_MAX: Final = 20  # kept outputs a worker names as changed since their commitment, at most
COMMITS_MAX: Final = 100_000  # kept-output digests one worker may send (kbv.worker.commit): more is a protocol failure
# Timed calls judged per process pair, drawn by the parent after its rounds: a kernel wrong on a fraction f of its
# timed calls escapes one pair with probability (1 - f)^k. Calls after the first only while the judged outputs
# total at most JUDGED_TIMED_BYTES_PER_PAIR (a large output's judging costs seconds on a shared GPU).
JUDGED_TIMED_CALLS_PER_PAIR: Final = 3
JUDGED_TIMED_BYTES_PER_PAIR: Final = 2**30
BURST_INPUT_SETS: Final = 8  # distinct input sets a burst cycles through (one output of them is judged)


def timed_call(key: int, index: int, names: tuple[str, ...]) -> tuple[int, str]:
    """The seed and distribution of timed call ``index`` of the command whose key is ``key``, over the allowed
    distribution ``names`` (``TIMED_DISTRIBUTION_WEIGHTS``): both workers and the parent derive the same, and no
    worker holds a command's key before the command."""
    pool = [name for name in names for _ in range(TIMED_DISTRIBUTION_WEIGHTS.get(name, 0))] or ["D1"]
    block, slot = divmod(index, len(pool))
    return _derived(f"{key}:call:{index}"), pool[_block_order(key, block, len(pool))[slot]]


@functools.lru_cache(maxsize=256)
def _block_order(key: int, block: int, size: int) -> tuple[int, ...]:
    """The shuffled order of one block of ``size`` consecutive timed calls (computed once per block, not per call)."""
    rank = [hashlib.blake2b(f"{key}:{block}:{i}".encode(), digest_size=8).digest() for i in range(size)]
    return tuple(sorted(range(size), key=lambda i: rank[i]))


def baseline_key(key: int, baseline: str) -> int:
    """The key of one baseline's timed calls within a timing command whose key is ``key``: each baseline's calls
    get inputs of their own (a command times every baseline, each from call 0)."""
    return _derived(f"{key}:baseline:{baseline}")


def _derived(text: str) -> int:
    """A 63-bit number derived from ``text`` (seeds and keys both sides compute alike)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") % 2**63


BOOTSTRAP_RESAMPLES: Final = 2000
CONFIDENCE: Final = 0.95

# Peak memory: the candidate "raises peak memory" when its peak exceeds the reference's by more than the slack.
# CUDA's allocator statistics are exact; the CPU measure (resident-set high-water mark) moves in pages and with the
# C allocator's caching, so small differences there are noise: over two runs of the built-in suite with the
# reference as its own candidate (70 pairs) they spanned -276 to +320 KiB, and 256 KiB flagged level3/5_SmallCNN
# once (docs/results/cpu-2026-12-04-c). The whole timing stage's figure (STAGE_MEMORY_SLACK_*) sees larger ones.
MEMORY_SLACK_BYTES: Final = {"cuda": 0, "cpu": 2**20}
# Device memory in use (cudaMemGetInfo, after one call, beyond what the process held before the model existed):
# on the H200 reference and honest candidates matched to the byte (docs/results/h200-2026-11-29-b), except that on
# cuBLAS GEMMs the reference against itself differed by exactly 90 MiB, either way, on 3 of 27 KernelBench pairs
# (docs/results/h200-2026-12-01-d: the driver's reservations, not an allocation); this much more in the candidate
# is flagged memory_above_reference too (buffers from __init__, raw cudaMalloc workspaces).
DEVICE_IN_USE_SLACK_BYTES: Final = 128 * 2**20
# On the CPU the parent also reads each worker's resident-set high-water mark over all the first pair's timing
# commands (the memory-measured call cannot be singled out of those), less the timed outputs each role was handed
# inputs for and so keeps (on the CPU both roles keep every round's until the pair ends); the candidate's rise above
# the reference's by more than this, or this share of the reference's, is memory_above_reference too. The reference
# against itself had differed by -24 to +18 MiB over two runs of the built-in suite on this project's CPU (2026-12-02),
# and the honest C++ ReLU by up to 41 MiB: where glibc put the kept output copies (docs/results/cpu-2026-12-05-d).
# With the copies in blocks of their own (kbv.worker.session.KeptStore) the roles were at most 4.2 MiB apart over the
# suite and 2.1 MiB over ten runs of that ReLU, so the slack went from 48 MiB to this.
STAGE_MEMORY_SLACK_BYTES: Final = 16 * 2**20
STAGE_MEMORY_SLACK_REL: Final = 0.25
# On the CPU the high-water mark above also sees the harness's own buffers between calls (estimate calls' outputs,
# drawn inputs, copies of kept outputs), and where they peak together moves between processes of the same code: the
# reference against itself differed by up to 2.34 outputs' bytes with outputs of 64 MiB (flagged in 3 of 20 runs) and
# by one output with 256 MiB (flagged in 1 of 2) (docs/results/cpu-2026-12-05-b). The rule's slack therefore adds this
# many of one call's output bytes: a workspace held over the stage below that is not seen by this rule (a workspace
# made in the timed calls still is, around every call: MEMORY_SLACK_BYTES).
STAGE_MEMORY_TRANSIENT_OUTPUTS: Final = 3
# ...or this share of the reference's own figure, if more: on cuBLAS GEMMs the same code held up to 314 MiB more
# (level1/3: 2.53 against 2.86 GB per process, NVML) and 480 MiB less (level1/6) than itself
# (docs/results/h200-2026-12-02-c, h200-2026-12-02-b); the 1 GiB workspace of cuda_hidden_workspace stays far above
DEVICE_IN_USE_SLACK_REL: Final = 0.25
CPU_MEMORY_REPEATS: Final = 3  # the parent's resident-set measure of one call on the CPU: the least of this many

# Fast_p thresholds printed by `kbv report`.
FAST_P_THRESHOLDS: Final = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)

# ---------------------------------------------------------------------------------------------------------------
# What the evaluator accepts from a worker (kbv.wire, kbv.sandbox.launch). A reply is refused (the candidate's
# record gets a protocol error) when its header declares more tensor bytes than the caller's budget, before any of
# them is allocated; a tensor sent once and referenced many times counts once. Worker.call's default budget:
REPLY_BYTES_DEFAULT: Final = 16 * 2**30
REPLY_HEADER_BYTES_MAX: Final = 16 * 2**20  # the JSON header of one message
REPLY_TENSORS_MAX: Final = 65536  # tensors in one message
# A reply that has begun must be complete by the call's deadline plus this grace (a worker that stalls part-way
# through a reply is a timeout, not a hang of the evaluator; the grace keeps a large honest transfer from failing).
REPLY_TRANSFER_GRACE_S: Final = 60.0
# A killed worker is waited for until every process of it has exited (its device memory released before the
# next worker's memory-in-use baseline), at most this long.
WORKER_EXIT_WAIT_S: Final = 10.0
# Every file a worker writes, its stage's stdout/stderr log included, is capped at this size (RLIMIT_FSIZE, set in
# the worker): far above any build's output, so builds are not killed by SIGXFSZ. The parent reads only a log's tail.
WORKER_FILE_BYTES_MAX: Final = 2 * 2**30
LOG_TAIL_BYTES: Final = 4000

# Roofline counting rules (kbv.worker.flops): bump when a rule changes; part of the counts cache key (2: the
# intermediate tensors' peak bytes counted too).
COUNT_RULES_VERSION: Final = 2

# Named rule sets (--preset). "reward" is for scoring samples in a training loop: the verified baseline only, cached
# reference timings with the short re-measure, one timing pair; every correctness check as always.
PRESETS: Final = {"reward": {"protocol": "verified", "reuse_reference_timing": True, "timing_pairs": 1}}
# A candidate reply's tensor bytes: outputs at most REPLY_OUTPUT_FACTOR times the reference's outputs (plus
# REPLY_SLACK_BYTES), replies that carry no outputs at most REPLY_SLACK_BYTES; a reply over its budget is refused
# before anything is allocated (a runtime_error of the candidate, with the reason).
REPLY_OUTPUT_FACTOR: Final = 2
REPLY_SLACK_BYTES: Final = 4 * 2**20
# A candidate's output of this size or more reaches the judge as a file descriptor that the parent relays unread
# (kbv.worker.handoff): a sealed memfd for CPU outputs; for CUDA outputs a VMM allocation that never passes through
# host memory (on by default since its H200 runs, docs/results/h200-2026-12-01-b; KBV_CUDA_HANDOFF=0 or
# EvalOptions.cuda_handoff=False sends them through the pipe as smaller ones are; so does a worker whose export
# fails, and its record says why: env.output_handoff.<stage>.export_failed).
HANDOFF_MIN_BYTES: Final = 1 * 2**20
# Correctness trials are pipelined (the reference runs the next trial's forward and judges the last while the
# candidate runs one: kbv.eval.correctness) where one trial's inputs and outputs, by the reference's first forward,
# come to at most this many bytes; above it, one trial at a time (a pipelined reference holds two trials: on the H200
# under --gpu-share 2, 11 of 50 reward pairs with 6 GiB outputs ran out of device memory and ran their correctness
# again alone, against 4 one trial at a time: docs/results/h200-2026-12-03).
PIPELINE_MAX_BYTES: Final = 1 * 2**30
# --gpu-share: before any run of its problem taught the gate (kbv.eval.memory_needs), a correctness stage is expected
# to hold these many times one forward's inputs, outputs and intermediate tensors (the problem's roofline counts:
# the most its ops' outputs held at once beyond the outputs, on the meta device) plus its parameters and buffers
# twice on the device (both workers: the trial's tensors, the copies the judge lends, the candidate's outputs handed
# over and imported, blocks freed to be poisoned, the libraries' workspaces), and joins other pairs' only while their
# expected needs fit GATE_MEMORY_FRACTION of the GPU's memory (kbv.eval.gate). Six times the inputs and outputs
# alone (until h100-2026-12-06-h) covered what both processes held for 24 of the 55 problems of the H100's reward
# batches (convolutions with large intermediates up to 3.4 times over it, matmuls with a 4 GiB output 1.35 times),
# and those stages ran out of memory beside other pairs and ran again alone; these factors and the base below,
# fitted to the same 55, cover 53, expecting 1.33 times what was held on average, at most 2.13 times
# (docs/results/h100-2026-12-06-h/memory_estimates.py). First run in a batch on an H100 (h100-2026-12-07, 30 reward
# pairs, nothing cached): every one of the 30 held no more than expected (expected over held 1.04-1.65, mean 1.33)
# and no correctness stage ran again (e0bf4a0's six times, on another machine: 14 of 30 held more, 1 ran again).
SHARED_CORRECTNESS_MEMORY_FACTORS: Final = {"inputs": 5, "outputs": 9, "intermediates": 3}
# ... plus this much for the two processes themselves (CUDA contexts, the allocators' first blocks, the libraries'
# workspaces): the least any of 50 reward pairs' correctness stages held on the H200 was 2.2 GiB, for 0.15 GiB
# expected (h200-2026-12-04); on the H100 the small matmuls' held 2.9-3.2 GiB (h100-2026-12-06-f to -h; 2 GiB until
# then).
SHARED_CORRECTNESS_BASE_BYTES: Final = 3 * 2**30
# Once a problem's correctness stage has run on a GPU, the gate expects the most both processes were seen to hold
# together (NVML, sampled every 50 ms: a peak between samples is missed) times this instead (kbv.eval.memory_needs).
GATE_MEASURED_MARGIN: Final = 1.25
GATE_MEMORY_FRACTION: Final = 0.9
# A correctness stage expected to need more than this share of that capacity runs alone (kbv.eval.gate): beside it
# there is room for less than other pairs and the idle workers started ahead take (on the 80 GB H100 the two pairs
# at 0.86 ran out of memory beside small pairs and ten idle workers, in both batches of h100-2026-12-06-e, and ran
# again alone at about 25 s each; none at 0.72 or less did). With it, in h100-2026-12-06-f, level1/25 did not and
# level1/30 did once, beside other pairs' idle and exiting workers: such a run now closes and waits for them first.
GATE_ALONE_FRACTION: Final = 0.8
# Where a pair's correctness workers start while an earlier pair's correctness runs (kbv.eval.lookahead): on a GPU,
# where starting CUDA took the stage's two processes 1.14 s per pair in the H200's reward batch
# (docs/results/h200-2026-12-04); not on the CPU, where a worker forks from a warm zygote in about 0.03 s.
LOOKAHEAD_DEVICES: Final = {"cpu": False, "cuda": True}
# ... kept topped up to this many pairs whose workers wait (at most --gpu-share's): a pair that fills the GPU closes
# every idle worker for its timing, and with one start per stage the count never came back (7 of 50 reward pairs
# found workers waiting on the H100, h100-2026-12-06-e; 13 with topping up, h100-2026-12-06-f, so such a timing now
# tops them up again itself). Two pairs' four processes hold about 2.2 GiB of CUDA contexts.
LOOKAHEAD_DEPTH: Final = 2
