"""validate --forward --backend triton: the reference drafter with eagleconv.kernels, against the torch backend.

On CPU the kernels run through Triton's interpreter (conftest.py sets TRITON_INTERPRET=1); with a GPU, on it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from eagleconv import kernels
from eagleconv.cli.main import cli
from eagleconv.forward import validate_forward

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(not kernels.triton_available() or kernels.path_for(DEVICE) == "torch",
                                reason="Triton (or its interpreter) unavailable")


@pytest.fixture
def launches(monkeypatch):
    """Counts the Triton launches per kernel, so a test knows the kernels ran (and not the torch path)."""
    module = kernels._triton_module()
    counts = {"fc_norm_concat": 0, "fused_add_rms_norm": 0}
    for name in counts:
        real = getattr(module, name)

        def counted(*args, _real=real, _name=name, **kw):
            counts[_name] += 1
            return _real(*args, **kw)

        monkeypatch.setattr(module, name, counted)
    return counts


@pytest.mark.parametrize("fixture", ["specforge-llama-eagle31", "vllm-qwen3-eagle31", "torchspec-kimi-mla-eagle31",
                                     "specforge-llama-eagle3"])
@pytest.mark.parametrize("dtype", ["float32", "checkpoint"])
def test_triton_backend_agrees_with_torch(fixture, dtype, launches):
    report = validate_forward(FIXTURES / fixture, backend="triton", dtype=dtype, steps=3, device=DEVICE,
                              allow_pickle=True)
    assert report.backend == "triton" and report.kernels == ("interpreter" if DEVICE == "cpu" else "triton")
    assert [s.step for s in report.against_torch] == [1, 2, 3]
    # Every norm of the drafter went through the kernels: plain norms and fc_norm_concat share one kernel.
    assert launches["fc_norm_concat"] > 0 and launches["fused_add_rms_norm"] > 0
    # The same recipe, so only reduction order separates the backends: float32 to ~1e-6, bf16 to a few ulps.
    limit = 1e-4 if dtype == "float32" else 0.05
    for step in report.against_torch:
        assert step.max_abs_err <= limit, (fixture, dtype, step)
        assert step.top1_agreement >= 0.9, (fixture, dtype, step)
    assert all(s.finite for s in report.steps)


def test_fc_norm_is_one_launch(monkeypatch):
    """An EAGLE-3.1 drafter's N fc_norms are one fc_norm_concat launch with N inputs, not N norms and a cat."""
    from eagleconv.forward import inputs_for, load

    drafter = load(FIXTURES / "specforge-llama-eagle31", backend="triton", device=DEVICE)
    assert drafter.spec.flags.fc_norm and drafter.spec.aux.count == 3
    module = kernels._triton_module()
    real, calls = module.fc_norm_concat, []

    def spy(xs, *args, **kw):
        calls.append(len(xs))
        return real(xs, *args, **kw)

    monkeypatch.setattr(module, "fc_norm_concat", spy)
    combined = drafter.combine(inputs_for(drafter, seed=1).aux)
    assert calls == [3] and torch.isfinite(combined).all()


def test_cli_reports_per_step_agreement(tmp_path):
    fixture = FIXTURES / "vllm-qwen3-eagle31"
    result = CliRunner().invoke(cli, ["validate", str(fixture), "--forward", "--backend", "triton", "--steps", "2",
                                      "--device", DEVICE, "--json"])
    assert result.exit_code == 0, result.output
    forward = json.loads(result.output)["forward"]
    assert forward["backend"] == "triton" and len(forward["against_torch"]) == 2
    assert forward["against_torch"][0]["top1_agreement"] >= 0.9
    human = CliRunner().invoke(cli, ["validate", str(fixture), "--forward", "--backend", "triton", "--steps", "1",
                                     "--device", DEVICE])
    assert human.exit_code == 0 and "against the torch backend" in human.output


def test_cli_refuses_what_cannot_run(monkeypatch):
    fixture = str(FIXTURES / "vllm-qwen3-eagle31")
    result = CliRunner().invoke(cli, ["validate", fixture, "--forward", "--backend", "triton", "--dtype", "float64"])
    assert result.exit_code == 2 and "--dtype float64 is the torch reference" in result.output
    assert "Traceback" not in result.output
    if not torch.cuda.is_available():
        result = CliRunner().invoke(cli, ["validate", fixture, "--forward", "--device", "cuda"])
        assert result.exit_code == 2 and "no CUDA device" in result.output
    monkeypatch.setattr(kernels, "path_for", lambda device: "torch")  # as without TRITON_INTERPRET on a CPU
    result = CliRunner().invoke(cli, ["validate", fixture, "--forward", "--backend", "triton"])
    assert result.exit_code == 2 and "TRITON_INTERPRET=1" in result.output
