"""benchmarks/teardown_contention.py's windows (its measure needs CUDA; the GPU script runs it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "teardown_contention.py"
_SPEC = importlib.util.spec_from_file_location("teardown_contention", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def test_each_kernel_falls_in_the_window_of_the_other_processs_life_it_started_in() -> None:
    marks = {"alloc": 2.0, "written": 3.0, "reaped": 5.0}
    assert [bench.window(t, marks) for t in (1.0, 2.5, 4.0, 5.1, 5.5, 7.0)] == list(bench.WINDOWS)
    assert bench.window(9.0, {"alloc": 2.0}) == "allocating"  # the child never said it had written


def test_a_window_reports_its_kernels_median_and_maximum_and_none_where_empty() -> None:
    marks = {"alloc": 2.0, "written": 3.0, "reaped": 5.0}
    found = bench.summary([(1.0, 2.0), (1.5, 4.0), (5.1, 9.0)], marks)
    assert found["before"] == {"n": 2, "median_ms": 3.0, "max_ms": 4.0}
    assert found["reaped_0_250ms"] == {"n": 1, "median_ms": 9.0, "max_ms": 9.0}
    assert found["holding"] is None and found["later"] is None
