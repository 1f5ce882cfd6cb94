"""Shared test set-up: GPU tests skip without CUDA; one build cache per test session (C++ builds happen once)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = ROOT / "tests" / "candidates"
SUITE = ROOT / "src" / "kbv" / "suites" / "builtin"
EXAMPLES = ROOT / "src" / "kbv" / "examples"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With ``KBV_PYTEST_REPORT`` set (scripts/gpu_check.py's pytest stage), each failure's report is appended to that
    file as it happens, so a run cut by its time limit still says what failed and why."""
    path = os.environ.get("KBV_PYTEST_REPORT")
    if path and report.failed:
        with open(path, "a") as out:
            out.write(f"== {report.nodeid} ({report.when})\n{report.longreprtext[-8000:]}\n")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def kbv_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache (extension builds, reference timings) for the whole session, unless the caller chose one."""
    if "KBV_CACHE_DIR" not in os.environ:
        os.environ["KBV_CACHE_DIR"] = str(tmp_path_factory.mktemp("kbv-cache"))
    return Path(os.environ["KBV_CACHE_DIR"])


@pytest.fixture(scope="session", autouse=True)
def kbv_record_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One record key (kbv.attest) for the session, outside the user's home, unless the caller chose one."""
    if "KBV_RECORD_KEY_FILE" not in os.environ:
        os.environ["KBV_RECORD_KEY_FILE"] = str(tmp_path_factory.mktemp("kbv-key") / "keys" / "record.key")
    return Path(os.environ["KBV_RECORD_KEY_FILE"])


def problem_path(key: str) -> Path:
    """``level1/5_ReLU`` -> the built-in problem file."""
    return SUITE / f"{key}.py"
