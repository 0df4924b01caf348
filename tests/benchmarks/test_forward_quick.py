"""benchmarks/forward.py --quick: validate --forward runs on the benchmark's (tiny) drafter and reports finite steps."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

FORWARD = Path(__file__).resolve().parents[2] / "benchmarks" / "forward.py"


@pytest.mark.skipif(shutil.which("eagleconv") is None, reason="needs the installed eagleconv command")
def test_quick_forward_benchmark_is_correct(capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location("eagleconv_forward_bench", FORWARD)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)
    spec.loader.exec_module(bench)
    assert bench.main(["--quick", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "forward: compute float32, 2 steps" in out and "synthetic rows" in out
    assert "| `validate --forward` |" in out
