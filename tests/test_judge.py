"""The judge's comparisons work chunk by chunk (bounded temporaries on multi-GB outputs) with the same answers as
on whole tensors: a difference anywhere, in any chunk, is seen."""

from __future__ import annotations

import pytest
import torch

from kbv import judge


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(judge, "CHUNK", 7)


def reply(t: torch.Tensor) -> dict:
    return {"outputs": [{"tensor": t}]}


def one_far_off(where: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A reference of 100 values and a candidate within tolerance of it but for one element, 0.5 off."""
    ref = torch.randn(100)
    cand = ref + 1e-4 * torch.randn(100)
    cand[where] += 0.5
    return ref, cand


@pytest.mark.parametrize("where", [0, 6, 7, 29, 99])
def test_standard_check_sees_a_difference_in_any_chunk(small_chunks, where):
    ref = torch.rand(100)
    cand = ref.clone()
    assert judge.standard_check(reply(cand), reply(ref), 1e-2)
    cand[where] += 1.0
    assert not judge.standard_check(reply(cand), reply(ref), 1e-2)
    assert judge.standard_check(reply(cand.to(torch.float64)), reply(ref), 1e-2) is False  # cast per chunk


@pytest.mark.parametrize("where", [0, 8, 99])
def test_same_outputs_sees_a_difference_in_any_chunk_and_nan_equals_nan(small_chunks, where):
    a = torch.rand(100)
    a[3] = float("nan")
    b = a.clone()
    assert judge.same_outputs(reply(a), reply(b)) == (True, None)
    b[where] += 0.5
    identical, worst = judge.same_outputs(reply(a), reply(b))
    assert not identical and worst == pytest.approx(0.5)


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.parametrize("where", [0, 6, 7, 29, 99])
def test_compare_tensor_in_chunks_gives_the_whole_tensors_figures(monkeypatch, fast_path, where):
    """Every figure (non-finite count, elements over, the maxima, the centred error) summed or maximised over
    chunks, on the device and read once, equals the one-chunk answer, whichever chunk holds the NaN or the error;
    also through the masking path a GPU always takes (``fast_path`` False: as if on CUDA)."""
    tol = judge.TOLERANCES["fp32"]
    ref, cand = one_far_off(where)
    bad = cand.clone()
    bad[(where + 50) % 100] = float("nan")
    whole = [judge.compare_tensor(c, ref, tol) for c in (cand, bad)]
    monkeypatch.setattr(judge, "CHUNK", 7)
    if not fast_path:
        monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    chunked = [judge.compare_tensor(c, ref, tol) for c in (cand, bad)]
    for a, b in zip(whole, chunked):
        assert a.passed == b.passed and a.reason == b.reason
        assert a.max_abs_error == pytest.approx(b.max_abs_error) and a.error_ratio == pytest.approx(b.error_ratio)
        assert a.max_rel_error == pytest.approx(b.max_rel_error)
        assert (a.centred_error is None) == (b.centred_error is None)
    assert not chunked[0].passed and "1 of 100 elements outside tolerance" in chunked[0].reason
    assert chunked[1].reason.startswith("1 elements non-finite")


def test_the_judge_warms_its_kernels_on_a_comparison_that_meets_a_nan(monkeypatch):
    """``judge.warm`` runs the comparison and the standard check once, on an output holding a NaN (both ways
    through the non-finite policy), and they agree that it matches itself."""
    seen = []
    real_compare, real_standard = judge.compare_tensor, judge.standard_check
    monkeypatch.setattr(judge, "compare_tensor", lambda c, r, t: seen.append(real_compare(c, r, t)) or seen[-1])
    monkeypatch.setattr(judge, "standard_check", lambda c, r: seen.append(real_standard(c, r)) or seen[-1])
    judge.warm("cpu")
    assert len(seen) == 2 and seen[0].passed and seen[1] is False  # NaN never allclose: KernelBench's check


def test_on_the_cpu_the_judge_works_in_chunks_below_the_allocators_mapping_threshold(monkeypatch):
    """A CPU worker's C allocator maps every block of 32 MiB or more afresh, so the judge's temporaries on the CPU
    stay within ``CPU_CHUNK`` elements (a 256 MiB comparison: 1.6-1.7 s at 2**24 against 0.4-0.6 s): the chunks are at most
    that long, and the figures are the whole tensor's."""
    tol = judge.TOLERANCES["fp32"]
    ref, cand = one_far_off(57)
    whole = judge.compare_tensor(cand, ref, tol)
    monkeypatch.setattr(judge, "CPU_CHUNK", 9)
    assert max(c.numel() for c in judge._chunks(ref)) == 9 and sum(c.numel() for c in judge._chunks(ref)) == 100
    chunked = judge.compare_tensor(cand, ref, tol)
    assert chunked.reason == whole.reason and chunked.error_ratio == pytest.approx(whole.error_ratio)
    assert not judge.standard_check(reply(cand), reply(ref), 1e-2)
    assert judge.same_outputs(reply(cand), reply(cand.clone())) == (True, None)


def test_a_cpu_digest_taken_in_pieces_is_the_same_digest(monkeypatch):
    """On the CPU a kept output's digest takes its products ``CPU_CHUNK`` words at a time; the positions and chunk
    numbers are the digest's own (``CHUNK``), so the digest is unchanged (the judge and the candidate's worker must
    agree, and a GPU's digest is the CPU's)."""
    from kbv.worker import commit

    monkeypatch.setattr(commit, "CHUNK", 16)
    commit._POSITIONS.clear()
    t = torch.randn(70, generator=torch.Generator().manual_seed(3))
    words = [int(w) for w in t.view(torch.int32)]
    expected_sum = sum(words) & ((1 << 64) - 1)
    weighted = 0
    for i, w in enumerate(words):
        p = (w * (i % 16 + 1 + i // 16)) & 0xFFFFFFFF
        weighted += p - (1 << 32) if p >= 1 << 31 else p  # each product wraps as an int32
    expected = [expected_sum, weighted & ((1 << 64) - 1)]
    for piece in (5, 16, 1 << 20):
        monkeypatch.setattr(commit, "CPU_CHUNK", piece)
        assert commit.tensor_digest(t) == expected, piece
    t2 = t.clone()
    t2[40] += 1.0
    assert commit.tensor_digest(t2) != expected


def test_a_large_outputs_digest_is_its_words_by_rows_and_columns(monkeypatch):
    """From ``GRID_MIN_BYTES`` on, the digest is the sum of the output's 8-byte words, its row sums weighted by row
    number, its column sums by column number and the words past the last full row by position (modulo 2**64),
    computed here by hand; a view that starts 4 bytes into its storage reads the same words; one word changed, or
    two words swapped within a row, changes the digest."""
    from kbv.worker import commit

    monkeypatch.setattr(commit, "GRID_MIN_BYTES", 64)
    monkeypatch.setattr(commit, "GRID_COLS", 5)
    commit._POSITIONS.clear()
    t = torch.randn(47, generator=torch.Generator().manual_seed(1))[1:]  # 23 words: 4 rows of 5 and 3 past them
    words = [int(w) for w in t.clone().view(torch.int64)]
    mask = (1 << 64) - 1
    rows = [sum(words[r * 5:r * 5 + 5]) for r in range(4)]
    cols = [sum(words[r * 5 + c] for r in range(4)) for c in range(5)]
    expected = [sum(words) & mask, sum((r + 1) * v for r, v in enumerate(rows)) & mask,
                sum((c + 1) * v for c, v in enumerate(cols)) & mask,
                sum((i + 1) * v for i, v in enumerate(words[20:])) & mask]
    assert commit.tensor_digest(t) == expected
    changed, swapped = t.clone(), t.clone()
    changed[3] += 1e-6
    swapped[0], swapped[2] = t[2], t[0]
    assert commit.tensor_digest(changed) != expected != commit.tensor_digest(swapped)
    assert len(commit.tensor_digest(t[:15])) == 2  # 60 bytes: under GRID_MIN_BYTES, the small rule


def test_the_digest_warm_up_takes_every_path_a_gpu_digest_takes(monkeypatch):
    """``commit.warm`` (run by both roles' timing workers as they start) digests each word width by both of a GPU's
    chunk paths, stacked and not, and the grid's, so no digest kernel is first launched inside a timed command; it
    keeps no positions afterwards. Run here on CPU tensors taken the GPU's way."""
    from kbv.worker import commit

    taken: set[tuple[torch.dtype, bool]] = set()
    grids: list[int] = []
    device_sums, grid_digest = commit._device_sums, commit._grid_digest

    def spy_sums(part, weights, k):
        taken.add((part.dtype, part.numel() >= commit.STACK_MAX_WORDS))
        return device_sums(part, weights, k)

    def spy_grid(words):
        grids.append(words.numel())
        return grid_digest(words)

    monkeypatch.setattr(commit, "_on_device", lambda part: True)
    monkeypatch.setattr(commit, "_device_sums", spy_sums)
    monkeypatch.setattr(commit, "_grid_digest", spy_grid)
    commit.warm("cpu")
    assert taken == {(w, big) for w in (torch.int32, torch.int16, torch.uint8) for big in (False, True)}, taken
    assert grids and grids[0] > 2 * commit.GRID_COLS, grids  # full rows and a tail
    assert not commit._POSITIONS


@pytest.mark.parametrize("role", ["reference", "candidate"])
@pytest.mark.parametrize("stage", ["correctness", "performance"])
def test_both_roles_timing_workers_warm_the_digest_as_they_start(monkeypatch, role, stage):
    """A GPU worker's start (``Session.warm``, before its hello) loads the digest's kernels in both roles' timing
    workers alike, and in no correctness worker (which digests nothing); the judge's only in the reference's. The
    device is a stand-in here: the CPU's start warms nothing."""
    from conftest import CANDIDATES, problem_path
    from kbv.problems import load_problem
    from kbv.worker import commit, memory
    from kbv.worker.session import Session

    relu = problem_path("level1/5_ReLU")

    warmed: list[str] = []
    monkeypatch.setattr(commit, "warm", lambda device: warmed.append("digest"))
    monkeypatch.setattr(judge, "warm", lambda device, fused=False: warmed.append("judge"))
    monkeypatch.setattr(memory, "device_in_use", lambda device: 0)
    spec = {"device": "cpu", "precision": "fp32", "problem_path": str(relu), "profile": "small", "role": role,
            "mode": load_problem(relu).mode, "stage": stage, "candidate_path": str(CANDIDATES / "correct_torch.py")}
    assert Session(spec).warm() == 0.0 and warmed == []
    session = Session(spec)
    session.device = "cuda"
    session.warm()
    assert warmed == ["judge"] * (role == "reference") + ["digest"] * (stage == "performance"), warmed


def test_a_gpus_chunk_sums_stacked_or_not_are_the_cpus(monkeypatch):
    """On a GPU a chunk's two sums are taken stacked (small chunks, launch-bound) or each where it lies (from
    ``STACK_MAX_WORDS`` on, where the stack's copy costs more); run here on CPU tensors, both give the CPU path's
    digest for every word width and chunk number, so the judge and the candidate's worker still agree."""
    from kbv.worker import commit

    gen = torch.Generator().manual_seed(5)
    cases = [torch.randn(4099, generator=gen), torch.randn(333, generator=gen).half(),
             torch.randint(0, 255, (1001,), dtype=torch.uint8, generator=gen), torch.randn(2, 50, generator=gen).double()]
    monkeypatch.setattr(commit, "CHUNK", 1000)  # several chunks, so chunk numbers other than 0
    commit._POSITIONS.clear()
    expected = [commit.tensor_digest(t) for t in cases]  # the CPU's way
    monkeypatch.setattr(commit, "_on_device", lambda part: True)  # the GPU's way, on these CPU tensors
    for stack_max in (1 << 30, 1):  # always stacked, never stacked
        monkeypatch.setattr(commit, "STACK_MAX_WORDS", stack_max)
        for t, cpu_digest in zip(cases, expected):
            assert commit.tensor_digest(t) == cpu_digest, (stack_max, t.dtype)


def _count_reads(monkeypatch) -> dict[str, int]:
    """Count every read of a tensor's value back to the host (each one a wait for the device on a GPU)."""
    reads = {"n": 0}
    for name in ("tolist", "item", "__float__", "__int__", "__bool__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *a, _original=original, **k):
            reads["n"] += 1
            return _original(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, counted)
    return reads


def test_on_a_gpu_the_torch_path_reads_one_comparison_once(monkeypatch):
    """Below the fused kernels' size a GPU output is compared chunk by chunk with the tolerance, the figures and the
    output's scale all kept on the device, and read back once (each read waits for a time slice on a GPU shared with
    other pairs: 25-45 ms per judged call of a matmul pair beside four others on the H200). The same answer as the
    CPU's path, which reads as it goes (no wait there)."""
    tol = judge.TOLERANCES["fp32"]
    ref, cand = one_far_off(33)
    cpu = judge.compare_tensor(cand, ref, tol)
    monkeypatch.setattr(judge, "CHUNK", 7)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    reads = _count_reads(monkeypatch)
    gpu = judge.compare_tensor(cand, ref, tol)
    assert reads["n"] == 1
    assert gpu.reason == cpu.reason and gpu.error_ratio == pytest.approx(cpu.error_ratio)
    assert gpu.max_abs_error == pytest.approx(cpu.max_abs_error)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: False))
    reads["n"] = 0
    judge.compare_tensor(cand, ref, tol)
    assert reads["n"] > 1  # the CPU's path: read as it goes
