"""benchmarks/build_rate.py's reading of where a build's time went: each cold build's ``.ninja_log``, its last entry
per output, grouped by kind of step (the build itself is timed on the GPU machine, not here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _build_rate():
    spec = importlib.util.spec_from_file_location("build_rate", ROOT / "benchmarks" / "build_rate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_rate"] = module
    spec.loader.exec_module(module)
    return module


def test_each_builds_ninja_steps_are_read_once_per_output_by_kind(tmp_path: Path, monkeypatch) -> None:
    build_rate = _build_rate()
    logs = {"a": "0\t30000\t1\tcuda.cuda.o\th\n0\t9000\t1\tmain.o\th\n30000\t30500\t1\ta.so\th\n",
            # built twice: only the last entry of each output counts
            "b": "0\t1000\t1\tmain.o\th\n0\t40000\t1\tcuda.cuda.o\th\n0\t11000\t1\tmain.o\th\n40000\t40300\t1\tb.so\th\n"}
    folders = {}
    for name, text in logs.items():
        log = tmp_path / name / "torch_extensions" / f"ext_{name}" / ".ninja_log"
        log.parent.mkdir(parents=True)
        log.write_text("# ninja log v7\n" + text)
        folders[name] = tmp_path / name
    paths = [tmp_path / "a.py", tmp_path / "b.py"]
    for path in paths:
        path.write_text(f"# {path.stem}\n")
    monkeypatch.setattr(build_rate, "build_folders",
                        lambda candidate, device, cache: [folders[Path(candidate.path).stem], tmp_path / "none"])
    steps = build_rate.ninja_steps(paths, "cuda", tmp_path)
    assert steps == {".so": {"steps": 2, "median_s": 0.4, "total_s": 0.8},
                     "cuda.cuda.o": {"steps": 2, "median_s": 35.0, "total_s": 70.0},
                     "main.o": {"steps": 2, "median_s": 10.0, "total_s": 20.0}}
