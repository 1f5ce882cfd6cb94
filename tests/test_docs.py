"""The README states the protocol's numbers; they must be the ones in kbv/protocol.py."""

from __future__ import annotations

import re

from conftest import ROOT
from kbv.protocol import BASELINES, DISTRIBUTIONS, FLAGS, TOLERANCES, VERDICT_PRECEDENCE

README = (ROOT / "README.md").read_text()


def _number(cell: str) -> float:
    return float(cell.strip())


def test_tolerance_table_matches_protocol() -> None:
    for precision, tol in TOLERANCES.items():
        row = re.search(rf"^\| {precision} \|(.+)\|$", README, re.M)
        assert row, precision
        cells = [_number(c) for c in row.group(1).split("|")]
        assert cells == [tol.rtol, tol.atol_scale, tol.atol_floor, tol.centred_rtol, tol.resolution_factor]


def test_distributions_baselines_flags_and_verdicts_are_documented() -> None:
    for d in DISTRIBUTIONS:
        assert re.search(rf"^\| {d.name} \|", README, re.M)
    for b in BASELINES.values():
        row = re.search(rf"^\| {b.name}[^|]*\|(.+)\|$", README, re.M)
        assert row and f"`{b.float32_matmul_precision}`" in row.group(1)
        assert f"`{b.matmul_fp32_precision}`" in row.group(1)
    for flag in FLAGS:
        assert f"`{flag}`" in README, flag
    assert " > ".join(f"`{v}`" for v in VERDICT_PRECEDENCE[:2]) in README
    for verdict in VERDICT_PRECEDENCE:
        assert f"`{verdict}`" in README
