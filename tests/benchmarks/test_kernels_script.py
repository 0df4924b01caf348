"""benchmarks/kernels.py: a clean "no GPU" exit without CUDA, and its whole logic in --smoke mode on the CPU."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels.py"


def load_script(monkeypatch):
    spec = importlib.util.spec_from_file_location("eagleconv_kernels_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the benchmark would run")
def test_no_gpu_says_so_and_exits_0(monkeypatch, capsys):
    assert load_script(monkeypatch).main([]) == 0
    out = capsys.readouterr().out
    assert "no GPU" in out and "Nothing measured" in out


def test_smoke_run_checks_and_tabulates(monkeypatch, capsys, tmp_path):
    """Every path the GPU run takes except the CUDA timers: correctness checks, byte accounting, table, JSON."""
    result = tmp_path / "kernels.json"
    code = load_script(monkeypatch).main(["--smoke", "--no-compile", "--tokens", "1", "37", "--hidden", "40",
                                          "--json", str(result)])
    assert code == 0
    out = capsys.readouterr().out
    assert "check T=37 H=40 fused vs eager" in out
    data = json.loads(result.read_text())
    assert data["failures"] == [] and [r["T"] for r in data["rows"]] == [1, 37]
    row = data["rows"][1]
    assert row["bytes"] == 2 * 37 * 3 * 40 * 2 + 3 * 40 * 2  # read + write N*T*H bf16, weights once
    assert row["fused_us"] > 0 and row["eager_us"] > 0 and row["copy_us"] > 0
