"""Issue 15 item 3: the calibrated upgrade refits the weights its new norms make stale (fc; norm.weight with lm_head
for norm_output), by least squares on the captured states, and reports the fit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import eagleconv
from eagleconv.readers.loading import load_drafter
from eagleconv.eagle31.transforms import least_squares_refit, output_norm_refit, relative_residual
from tests.support.loaded import canonical, rms64  # the canonical tensors of a written drafter; float64 RMS

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "tiny-pair"
TARGET, PROMPTS, EAGLE3 = PAIR / "target", PAIR / "prompts.json", PAIR / "eagle3"
LAYERS = [1, 2, 3]  # what the tiny-pair drafters state
EPS = 1e-5


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([sys.executable, "-m", "eagleconv", *args], capture_output=True, text=True, env=env,
                          timeout=600)


@pytest.fixture(scope="module")
def calibration(tmp_path_factory) -> Path:
    """The tiny-pair target's aux states on its prompts, as capture_aux_states writes them."""
    path = tmp_path_factory.mktemp("calib") / "calibration.safetensors"
    eagleconv.capture_aux_states(TARGET, json.loads(PROMPTS.read_text()), LAYERS, save_to=path)
    return path


# -- the math ---------------------------------------------------------------------------------------------

def test_least_squares_refit_recovers_a_linear_map_and_holds_out_honestly():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 24, generator=g, dtype=torch.float64)
    true = torch.randn(8, 24, generator=g, dtype=torch.float64)
    prior = true + torch.randn(8, 24, generator=g, dtype=torch.float64)
    fitted, held = least_squares_refit(x, x @ true.T, prior, strength=1e-9)
    assert torch.allclose(fitted, true, atol=1e-6)
    assert held is not None and held < 1e-12
    # noise the map cannot explain shows up in the held-out residual, which is then worse than in-sample
    y = x @ true.T + 0.3 * torch.randn(400, 8, generator=g, dtype=torch.float64)
    fitted, held = least_squares_refit(x, y, prior)
    assert held is not None and held > relative_residual(x @ fitted.T, y) > 0
    # with fewer tokens than inputs the prior decides what the data leave free; too few to hold any out
    few, held = least_squares_refit(x[:5], (x @ true.T)[:5], prior)
    assert held is None
    assert float((few - prior).norm()) < float((true - prior).norm())


def test_output_norm_refit_keeps_the_logits_and_the_fed_back_scale():
    g = torch.Generator().manual_seed(1)
    scale = torch.linspace(0.2, 6.0, 32, dtype=torch.float64)
    pre = torch.randn(300, 32, generator=g, dtype=torch.float64) * scale * torch.rand(300, 1, generator=g).add(0.5)
    norm = torch.rand(32, generator=g, dtype=torch.float64) + 0.5
    head = torch.randn(50, 32, generator=g, dtype=torch.float64)
    new_norm, new_head, before, after = output_norm_refit(pre, norm, head, EPS)
    unit = rms64(pre)
    assert torch.allclose((unit * new_norm) @ new_head.T, (unit * norm) @ head.T, atol=1e-10)  # logits unchanged
    assert after < before / 4
    assert after == pytest.approx(relative_residual(unit * new_norm, pre))
    # pre-norm states of one RMS: the post-norm state reproduces them exactly
    same = pre / pre.pow(2).mean(-1, keepdim=True).sqrt() * 3.0
    _, _, _, exact = output_norm_refit(same, norm, head, 0.0)
    assert exact < 1e-24


# -- upgrade ----------------------------------------------------------------------------------------------

def test_refit_is_exact_when_every_aux_state_has_one_rms(drafter, tmp_path):
    """States whose rows share one RMS per aux state: the normalised inputs are a fixed rescaling of the old
    ones, so the refitted fc reproduces fc(a) to float32 rounding, and the report says the residual is ~0."""
    src = drafter(producer="vllm", dtype="float32")
    g = torch.Generator().manual_seed(2)
    states = torch.randn(200, 3, 32, generator=g, dtype=torch.float64) * torch.linspace(0.3, 3.0, 32,
                                                                                         dtype=torch.float64)
    states = states / states.pow(2).mean(-1, keepdim=True).sqrt() * torch.tensor([5.0, 40.0, 0.5])[:, None]
    path = tmp_path / "calib.safetensors"
    save_file({"aux_hidden_states": states.reshape(200, -1).float().contiguous()}, str(path))
    report = eagleconv.upgrade(src, tmp_path / "out", norm_output=False, calibration=path)
    (fc,) = report.refits
    assert fc.tensors == ["fc.weight"] and fc.tokens == 200
    assert fc.residual_after < 1e-12 and fc.residual_held_out is not None and fc.residual_held_out < 1e-12
    before, after = canonical(src), canonical(tmp_path / "out")
    probe = states[:16].float().double()
    g0 = probe.reshape(16, -1) @ before["fc.weight"].double().T
    x = torch.cat([rms64(probe[:, i]) * after[f"fc_norm.{i}.weight"].double() for i in range(3)], -1)
    g1 = x @ after["fc.weight"].double().T
    bound = 2.0 ** -20 * (probe.reshape(16, -1).abs() @ before["fc.weight"].double().abs().T)
    assert bool(((g1 - g0).abs() <= bound).all())


def test_refit_reduces_the_divergence_at_every_step(calibration, tmp_path):
    """On the tiny pair's own states: refitted < calibrated norms alone < unit norms, step by step."""
    refit = eagleconv.upgrade(EAGLE3, tmp_path / "refit", calibration=calibration, target=TARGET)
    plain = eagleconv.upgrade(EAGLE3, tmp_path / "plain", calibration=calibration, target=TARGET, refit=False)
    assert plain.refits == [] and [r.tensors for r in refit.refits] == [["fc.weight"],
                                                                        ["norm.weight", "lm_head.weight"]]
    for r, p, u in zip(refit.divergence, plain.divergence, refit.divergence_unit_weights, strict=True):
        assert r.max_abs_err < p.max_abs_err < u.max_abs_err
    assert refit.divergence[0].top1_agreement >= plain.divergence[0].top1_agreement  # step 1: all 48 rows
    assert refit.divergence_unit_weights == plain.divergence_unit_weights  # the same uncalibrated baseline
    for row in refit.refits:
        assert row.tokens == 48 and row.residual_after < row.residual_before


def test_norm_output_refit_leaves_the_first_step_alone(calibration, tmp_path):
    """norm_output changes only what steps >= 2 are fed; its refit moves norm.weight and divides lm_head, so step 1's
    logits stay those of the source (float32 rounding) while the recursion gets closer to it."""
    refit = eagleconv.upgrade(EAGLE3, tmp_path / "refit", fc_norm=False, calibration=calibration, target=TARGET)
    plain = eagleconv.upgrade(EAGLE3, tmp_path / "plain", fc_norm=False, calibration=calibration, target=TARGET,
                              refit=False)
    assert refit.divergence[0].top1_agreement == 1.0 and refit.divergence[0].max_abs_err < 1e-5
    assert all(r.max_abs_err < p.max_abs_err for r, p in zip(refit.divergence[1:], plain.divergence[1:]))
    src, out = canonical(EAGLE3), canonical(tmp_path / "refit")
    assert not torch.equal(src["norm.weight"], out["norm.weight"])
    assert torch.equal(src["fc.weight"], out["fc.weight"])


def test_norm_output_without_the_embedding_rows_is_not_compensated_and_says_why(calibration, tmp_path):
    report = eagleconv.upgrade(EAGLE3, tmp_path / "out", calibration=calibration)  # no --target: no embed rows
    assert [r.tensors for r in report.refits] == [["fc.weight"]]
    assert any("norm_output not compensated: embed_tokens is the target's" in n for n in report.notes)


def test_cli_reports_the_refit_and_writes_an_eagle31_drafter(tmp_path, capsys):
    out = tmp_path / "out"
    done = cli("upgrade", str(EAGLE3), str(out), "--target", str(TARGET), "--prompts", str(PROMPTS), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    fc, head = report["refits"]
    assert fc["tensors"] == ["fc.weight"] and fc["tokens"] == 48 and fc["residual_held_out"] is not None
    assert head["tensors"] == ["norm.weight", "lm_head.weight"]
    assert all(0 <= r["residual_after"] < r["residual_before"] for r in (fc, head))
    computed = {r["destination"] for r in report["plan"] if r["action"] == "computed"}
    assert {"fc.weight", "norm.weight", "lm_head.weight", "fc_norm.0.weight"} <= computed
    loaded = load_drafter(out)
    try:
        flags = loaded.require_spec().flags
        assert flags.fc_norm and flags.norm_output and loaded.require_spec().eagle_version == "3.1"
    finally:
        loaded.close()
    text = cli("upgrade", str(EAGLE3), str(tmp_path / "plain"), "--target", str(TARGET), "--prompts", str(PROMPTS),
               "--no-refit")
    assert text.returncode == 0, text.stderr
    assert "refit fc.weight" not in text.stdout and "changes the function: add fc_norm" in text.stdout
    assert torch.equal(canonical(tmp_path / "plain")["fc.weight"], canonical(EAGLE3)["fc.weight"])
    from eagleconv.cli.transform_cmds import _emit  # what the text mode prints for the refit report above
    from eagleconv.spec.report import TransformReport

    _emit(TransformReport.model_validate(report), as_json=False)
    assert f"refit fc.weight on 48 tokens: relative residual {fc['residual_before']:.3g} -> " in capsys.readouterr().out
