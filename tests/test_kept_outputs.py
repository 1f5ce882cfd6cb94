"""Where a timing worker keeps its timed calls' output copies on the CPU (``kbv.worker.session.KeptStore``).

Copies made by ``clone`` lived in glibc's heap between the outputs each forward allocates and frees; the freed
outputs' holes then could not be reused by the next 64-byte-aligned output, and a worker's resident set rose by up
to one more ring of outputs, at random and in either role. The whole timing stage's memory rule read that as a held
workspace and flagged honest C++ ReLUs (docs/results/cpu-2026-12-05-d: 8-67 MiB compared per role before, 8-13
after). The heap's behaviour without the store is random (51-76 MiB in this file's pattern on this project's CPU),
so the bound below is asserted for the store only.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from kbv.worker.session import KEPT_BLOCK_BYTES, KeptStore, _copied


def test_copies_hold_the_values_at_the_time_and_share_a_block_outside_the_heap():
    store = KeptStore()
    a, b = torch.randn(3, 5), torch.arange(7, dtype=torch.int16)
    ca, cb = store.copy(a), store.copy(b.t() if b.dim() > 1 else b)
    a.zero_()
    b.zero_()
    assert torch.equal(cb, torch.arange(7, dtype=torch.int16)) and ca.abs().sum() > 0
    assert ca.untyped_storage().data_ptr() == cb.untyped_storage().data_ptr()  # one block
    assert cb.data_ptr() % 64 == 0 and ca.is_contiguous() and ca.shape == (3, 5)
    big = torch.empty(KEPT_BLOCK_BYTES // 4, dtype=torch.float32)  # a block of its own: a plain clone
    assert store.copy(big).untyped_storage().data_ptr() != ca.untyped_storage().data_ptr()


def test_a_non_contiguous_output_is_kept_contiguous_with_its_values():
    out = torch.randn(4, 6).t()
    structure, copies, aliased = _copied(out, None, KeptStore())
    assert structure == "single" and aliased == []
    assert copies[0]["tensor"].is_contiguous() and torch.equal(copies[0]["tensor"], out)


def test_a_new_block_starts_when_one_is_full_and_clear_lets_go():
    store = KeptStore()
    piece = torch.ones(KEPT_BLOCK_BYTES // 3 // 4)  # three fit less their alignment: the fourth needs a new block
    storages = {store.copy(piece).untyped_storage().data_ptr() for _ in range(4)}
    assert len(storages) == 2
    store.clear()
    assert store.block is None and store.used == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_keeping_every_output_raises_the_resident_set_by_the_kept_bytes_alone():
    """200 outputs of 256 KiB, each kept and the previous one freed, as a timing command does: the resident set
    rises by the kept copies plus a few outputs, not by another ring."""
    code = textwrap.dedent("""
        import torch
        from kbv.worker.session import KeptStore
        def rss():
            return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1]) * 1024
        x = torch.randn(64 * 1024)
        t = torch.empty(300 * 1024, dtype=torch.uint8); del t  # a freed mapping raises glibc's mmap threshold
        store, ring, last = KeptStore(), [], None
        start = rss()
        for _ in range(200):
            out = torch.relu(x)
            ring.append(store.copy(out))
            last = out
        print(rss() - start)
    """)
    rise = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    kept = 200 * 256 * 1024
    assert kept <= rise <= kept + 8 * 2**20, rise / 2**20
