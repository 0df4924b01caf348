"""The benchmark's --quick mode: every benchmarked command runs and its output is byte-identical (no timing)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench.py"


@pytest.mark.skipif(shutil.which("eagleconv") is None, reason="needs the installed eagleconv command")
def test_quick_benchmark_is_correct(capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location("eagleconv_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # dataclasses look their module up
    spec.loader.exec_module(bench)
    assert bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "all outputs byte-identical to the source" in out
    assert "convert --to vllm --no-fsync" in out and "validate (numeric scan)" in out
