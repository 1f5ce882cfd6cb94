"""A digest of a kept timed output, sent to the parent the moment its trial ends: the output the call returned is
then on record outside the candidate's process, and a kept copy rewritten later (by a thread, or by a later
untimed call that did the work the timed one skipped) no longer matches what the judge is shown.

The digest is exact integer arithmetic on the output's bits, so the candidate's worker and the judge (the reference
worker, on the same device) compute the same numbers. An output under ``GRID_MIN_BYTES``: the words of the tensor
(its elements' bytes read as integers), summed and summed with position weights, modulo 2**64. A larger one (its
bytes a multiple of 8): its 8-byte words laid out in rows of ``GRID_COLS``, the sum of every word, the row sums
weighted by row number, the column sums weighted by column number, and the words past the last full row weighted
by position, each modulo 2**64: the linear position-weighted sum follows from those, and the two reductions read
the output twice with no temporary of its size (the small rule's products and casts read and wrote about seven
times its size: 27 ms for each 4 GiB output on an H100, docs/results/h100-2026-12-07-d). Matching a committed digest
with different contents that still pass the judge would need those contents before the commitment, that is, the
work done when the call ended (the time the burst's wall clock then sees).
"""

from __future__ import annotations

from typing import Any

import torch

from kbv.protocol import CPU_CHUNK

CHUNK = 1 << 24  # words per step: bounds the temporaries on large outputs (one int32 product per word)
STACK_MAX_WORDS = 1 << 20  # on a GPU, a chunk of fewer words is summed stacked (``_device_sums``)
GRID_MIN_BYTES = 1 << 24  # outputs of this many bytes or more (a multiple of 8) are digested by rows and columns
GRID_COLS = 4096  # 8-byte words per row of that layout
_WORD = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
_MASK = (1 << 64) - 1


def tensor_digest(t: torch.Tensor) -> list[int]:
    """[sum of the words, sum of word x position (each product modulo 2**32)], both modulo 2**64 (unsigned); the
    words are the tensor's 4-byte words (2 or 1 bytes for narrower elements), positions count from 1 in each
    chunk, plus the chunk's number. From ``GRID_MIN_BYTES`` on (a multiple of 8 bytes) ``_grid_digest``'s four
    numbers instead."""
    flat = torch.Tensor.reshape(torch.Tensor.detach(t), -1).contiguous()
    size = flat.element_size()
    if flat.numel() * size >= GRID_MIN_BYTES and flat.numel() * size % 8 == 0:
        try:
            return _grid_digest(flat.view(torch.uint8).view(torch.int64))
        except RuntimeError:  # a view whose offset is no multiple of 8 bytes: its words read from a copy
            return _grid_digest(flat.clone().view(torch.uint8).view(torch.int64))
    words = flat.view(_WORD[4] if size % 4 == 0 else _WORD.get(size, torch.uint8))
    sums = []
    for k, start in enumerate(range(0, words.numel(), CHUNK)):
        part = words[start:start + CHUNK]
        weights = _positions(part.numel(), part.device)
        if _on_device(part):
            sums.append(_device_sums(part, weights, k))
            continue
        # memory-bound: no copy of the pair, and the product taken CPU_CHUNK words at a time (the same sums)
        for sub in range(0, part.numel(), CPU_CHUNK):
            piece, w = part[sub:sub + CPU_CHUNK], weights[sub:sub + CPU_CHUNK]
            weighted = ((w + k) if k else w).mul(piece)
            sums.append(torch.stack((piece.sum(dtype=torch.int64), weighted.sum(dtype=torch.int64))))
    if not sums:
        return [0, 0]
    total = sums[0] if len(sums) == 1 else torch.stack(sums).sum(dim=0)
    return [int(v) & _MASK for v in total.tolist()]


def _grid_digest(words: torch.Tensor) -> list[int]:
    """[sum of the words, sum of row sum x row number, sum of column sum x column number, sum of word x position
    past the last full row], each modulo 2**64 (int64 arithmetic wraps): ``words`` (8-byte) in rows of
    ``GRID_COLS``, numbers and positions from 1. Two reductions over the words, no temporary of their size."""
    rows_n = words.numel() // GRID_COLS
    body = words[:rows_n * GRID_COLS].view(rows_n, GRID_COLS)
    tail = words[rows_n * GRID_COLS:]
    rows, cols = body.sum(dim=1), body.sum(dim=0)
    total = rows.sum() + tail.sum()
    weighted = [(rows * _positions(rows_n, words.device, torch.int64)).sum(),
                (cols * _positions(GRID_COLS, words.device, torch.int64)).sum(),
                (tail * _positions(tail.numel(), words.device, torch.int64)).sum()]
    return [int(v) & _MASK for v in torch.stack([total, *weighted]).tolist()]


def warm(device: str) -> None:
    """Digest one small output of each word width, by both chunk paths and the grid's, once, before any timed call:
    CUDA loads a kernel's module at its first launch, and a timing worker's first digests came inside its first
    timed command. In h100-2026-12-07-h the candidate's timing workers spent more on their digests than the
    reference's, by a one-off amount whatever the calls (13-355) and output size (0 to 6 GiB): 20-86 ms over each of
    50 pairs of one process pair, 61-211 ms over 18 pairs of three (``benchmarks/pair_cost.py`` ``digest_excess``);
    the reference's judge had loaded most of those kernels as it started (``kbv.judge.warm``). Run by both roles'
    timing workers as they start, before their hello; what it allocated is given back to the device."""
    for dtype in (torch.float32, torch.float16, torch.uint8):  # 4-, 2- and 1-byte words
        for words in (GRID_COLS, STACK_MAX_WORDS):  # stacked in one sum, and summed where it lies
            tensor_digest(torch.zeros(words, dtype=dtype, device=device))
    _grid_digest(torch.zeros(2 * GRID_COLS + 3, dtype=torch.int64, device=device))  # a row layout and its tail
    _POSITIONS.clear()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def _on_device(part: torch.Tensor) -> bool:
    """Whether a chunk's sums are taken the GPU's way (``_device_sums``)."""
    return part.is_cuda


def _device_sums(part: torch.Tensor, weights: torch.Tensor, k: int) -> torch.Tensor:
    """A chunk's two sums on a GPU, as a 2-vector (no read back): a small chunk is launch-bound, so its words and
    products are stacked and summed in one kernel (three in all); from ``STACK_MAX_WORDS`` on the copy the stack makes
    costs more than a launch, so each is summed where it lies (four kernels, one pass over twice the chunk fewer)."""
    weighted = ((weights + k) if k else weights).mul(part)
    if part.numel() < STACK_MAX_WORDS:
        return torch.stack((part.to(weighted.dtype), weighted)).sum(dim=1, dtype=torch.int64)
    return torch.stack((part.sum(dtype=torch.int64), weighted.sum(dtype=torch.int64)))


def digest(items: list[Any]) -> list[list[int]]:
    """The digests of the tensors among a described output's items (``kbv.worker.session._describe_output``), in
    order; other items have none."""
    return [tensor_digest(item["tensor"]) for item in items
            if isinstance(item, dict) and isinstance(item.get("tensor"), torch.Tensor)]


_POSITIONS: dict[tuple[int, str, torch.dtype], torch.Tensor] = {}


def _positions(n: int, device: torch.device, dtype: torch.dtype = torch.int32) -> torch.Tensor:
    """1..n as ``dtype`` on ``device``, made once per size (every trial of a command has the same output sizes)."""
    key = (n, str(device), dtype)
    if key not in _POSITIONS:
        if len(_POSITIONS) > 8:
            _POSITIONS.clear()
        _POSITIONS[key] = torch.arange(1, n + 1, dtype=dtype, device=device)
    return _POSITIONS[key]
