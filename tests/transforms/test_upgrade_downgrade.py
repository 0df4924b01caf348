"""upgrade / downgrade: byte identity with the flags off, exact folds checked by tensor math, lossy refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import save_file

import eagleconv
from eagleconv.cli.main import cli
from eagleconv.errors import ConversionError, FormatError
from eagleconv.readers.loading import load_drafter
from eagleconv.eagle31.transforms import scale_preserving_weight, unnormalising_scale
from tests.support.loaded import EPS, canonical, rms64

K, HT = 3, 32  # TinyDims: three aux states of width 32


def stored_bytes(path: Path) -> dict[str, bytes]:
    """Every tensor's exact stored bytes, by canonical name."""
    loaded = load_drafter(path)
    try:
        return {c: loaded.store.read_bytes(n) for c, n in loaded.read.canonical.items()}
    finally:
        loaded.close()


def combine(t: dict[str, torch.Tensor], aux: torch.Tensor, *, fc_norm: bool, norm_before_fc: bool = False) -> torch.Tensor:
    """vLLM's combine_hidden_states (llama_eagle3.py) in float64, written here from the formula."""
    chunks = [aux[:, i, :].double() for i in range(aux.shape[1])]
    if fc_norm:
        chunks = [rms64(c) * t[f"fc_norm.{i}.weight"].double() for i, c in enumerate(chunks)]
    x = torch.cat(chunks, -1)
    if norm_before_fc:
        x = rms64(x) * t["input_norm.weight"].double()
    return x @ t["fc.weight"].double().T


def constant_rms_states(n: int, rms: float, seed: int = 0) -> torch.Tensor:
    """[n, K, HT] aux states whose every row has RMS exactly ``rms`` (so a fitted norm is exact on them)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, K, HT, generator=g, dtype=torch.float64) * torch.linspace(0.5, 2.0, HT, dtype=torch.float64)
    return x / x.pow(2).mean(-1, keepdim=True).sqrt() * rms


def write_calibration(path: Path, states: torch.Tensor) -> Path:
    save_file({"aux_hidden_states": states.reshape(states.shape[0], -1).float().contiguous()}, str(path))
    return path


# -- upgrade ----------------------------------------------------------------------------------

@pytest.mark.parametrize("producer,architecture", [("vllm", "llama"), ("vllm", "qwen3"), ("vllm", "deepseek_mla"),
                                                    ("specforge", "llama"), ("speculators", "llama")])
def test_flag_off_upgrade_is_byte_identical_and_exact(drafter, tmp_path, producer, architecture):
    src = drafter(producer=producer, architecture=architecture)
    report = eagleconv.upgrade(src, tmp_path / "out", fc_norm=False, norm_output=False)
    assert report.exact is True and report.divergence == [] and report.changes == []
    assert {r.action for r in report.plan} <= {"copy", "derive", "drop"}
    assert stored_bytes(tmp_path / "out") == {k: v for k, v in stored_bytes(src).items()
                                              if k in stored_bytes(tmp_path / "out")}
    assert set(stored_bytes(src)) - set(stored_bytes(tmp_path / "out")) <= {"t2d"}  # a layout that cannot hold t2d
    assert report.eagle_version_after == "3"
    written = load_drafter(tmp_path / "out")
    assert written.require_spec().flags == load_drafter(src).require_spec().flags
    written.close()


def test_upgrade_adds_fc_norm_and_norm_output(drafter, tmp_path):
    src = drafter(producer="vllm")
    report = eagleconv.upgrade(src, tmp_path / "out")
    spec = load_drafter(tmp_path / "out").require_spec()
    assert spec.flags.fc_norm and spec.flags.norm_output and spec.eagle_version == "3.1"
    assert report.exact is False and report.initialisation == "unit"
    assert report.eagle_version_before == "3" and report.eagle_version_after == "3.1"
    computed = {r.destination for r in report.plan if r.action == "computed"}
    assert computed == {f"fc_norm.{i}.weight" for i in range(K)}
    out = canonical(tmp_path / "out")
    assert all(torch.equal(out[f"fc_norm.{i}.weight"], torch.ones(HT, dtype=torch.bfloat16)) for i in range(K))
    before = stored_bytes(src)
    after = stored_bytes(tmp_path / "out")
    assert all(after[n] == b for n, b in before.items())  # every existing tensor copied unchanged


@pytest.mark.parametrize("style", ["fc_norm", "norm_before_fc"])
def test_calibrated_norms_preserve_the_scale_fc_was_trained_on(drafter, tmp_path, style):
    """On states whose rows share one RMS, a scale-preserving norm is the identity: combine is unchanged.

    Bound: the new weights are rounded to bf16 once (relative error <= 2^-8), so
    |g_upgraded - g_source| <= 2^-8 * sum_j |fc_ij x_j| row by row.
    """
    src = drafter(producer="vllm", dtype="bfloat16")
    states = constant_rms_states(64, rms=37.0)
    calibration = write_calibration(tmp_path / "calib.safetensors", states)
    report = eagleconv.upgrade(src, tmp_path / "out", style=style, norm_output=False, calibration=calibration)
    assert report.initialisation == "calibrated" and report.style == style and "64 tokens" in report.calibration
    before, after = canonical(src), canonical(tmp_path / "out")
    probe = constant_rms_states(16, rms=37.0, seed=1)
    g0 = combine(before, probe, fc_norm=False)
    g1 = combine(after, probe, fc_norm=style == "fc_norm", norm_before_fc=style == "norm_before_fc")
    bound = 2.0 ** -8 * (probe.reshape(16, -1).abs() @ before["fc.weight"].double().abs().T) + 1e-9
    assert bool(((g1 - g0).abs() <= bound).all())
    # and the calibration mattered: unit weights are far off on the same states
    unit = dict(after)
    for name in [n for n in after if n.startswith(("fc_norm.", "input_norm."))]:
        unit[name] = torch.ones_like(after[name])
    g_unit = combine(unit, probe, fc_norm=style == "fc_norm", norm_before_fc=style == "norm_before_fc")
    assert float((g_unit - g0).abs().max()) > 10 * float(bound.max())


def test_scale_preserving_weight_is_the_least_squares_fit():
    g = torch.Generator().manual_seed(3)
    states = torch.randn(200, HT, generator=g, dtype=torch.float64) * torch.rand(200, 1, generator=g) * 5
    w = scale_preserving_weight(states, EPS)
    normed = states / (states.pow(2).mean(-1, keepdim=True) + EPS).sqrt()

    def loss(weight: torch.Tensor) -> float:
        return float((normed * weight - states).pow(2).sum())

    best = loss(w)
    for _ in range(20):  # any perturbation of the closed-form optimum fits worse
        assert loss(w + 1e-3 * torch.randn(HT, generator=g, dtype=torch.float64)) > best
    c = unnormalising_scale(states, EPS)
    assert float((states * c - normed).pow(2).sum()) < float((states * c * 1.01 - normed).pow(2).sum())
    assert float((states * c - normed).pow(2).sum()) < float((states * c * 0.99 - normed).pow(2).sum())


def test_upgrade_refuses_a_layout_without_3_1_flags_and_writes_nothing(drafter, tmp_path):
    src = drafter(producer="eagle")  # SafeAILab layout: no fc_norm / norm_output
    with pytest.raises(ConversionError, match="cannot express fc_norm, norm_output; pass --to"):
        eagleconv.upgrade(src, tmp_path / "out", allow_pickle=True)
    assert not (tmp_path / "out").exists()
    report = eagleconv.upgrade(src, tmp_path / "out", allow_pickle=True, to="vllm")
    assert report.destination_format == "vllm" and report.eagle_version_after == "3.1"


def test_bad_calibration_file_is_one_clear_error(drafter, tmp_path):
    src = drafter(producer="vllm")
    bad = tmp_path / "bad.safetensors"
    save_file({"aux_hidden_states": torch.zeros(4, 7)}, str(bad))
    with pytest.raises(FormatError, match=r"shape \[4, 7\]; this drafter needs \[\.\.\., 96\]"):
        eagleconv.upgrade(src, tmp_path / "out", calibration=bad)
    assert not (tmp_path / "out").exists()


# -- downgrade --------------------------------------------------------------------------------

def test_exact_fold_agrees_with_the_unfolded_drafter(drafter, tmp_path):
    """Folding fc_norm weights into fc, norms kept at weight 1, computes the same combine.

    Bound: float32 drafter, one rounding of the folded fc to float32:
    |g_fold - g_ref| <= 2^-24 * sum_j |fc_ij w_j x_j| (+ float64 noise).
    """
    from eagleconv.eagle31.transforms import fold_columns

    src = drafter(producer="vllm", eagle31=True, dtype="float32")
    t = canonical(src)
    scale = torch.cat([t[f"fc_norm.{i}.weight"].double() for i in range(K)])
    folded = dict(t, **{"fc.weight": fold_columns(t["fc.weight"], scale)})
    for i in range(K):
        folded[f"fc_norm.{i}.weight"] = torch.ones(HT, dtype=torch.float32)
    aux = torch.randn(8, K, HT, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 20
    g_ref = combine(t, aux, fc_norm=True)
    g_fold = combine(folded, aux, fc_norm=True)
    x = torch.cat([rms64(aux[:, i]) * t[f"fc_norm.{i}.weight"].double() for i in range(K)], -1)
    bound = 2.0 ** -24 * (x.abs() @ t["fc.weight"].double().abs().T) + 1e-12
    assert bool(((g_fold - g_ref).abs() <= bound).all())
    assert not torch.equal(folded["fc.weight"], t["fc.weight"])  # it did change fc


def test_lossy_downgrade_exits_1_and_writes_nothing(drafter, tmp_path):
    src = drafter(producer="vllm", eagle31=True)
    result = CliRunner().invoke(cli, ["downgrade", str(src), str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "changes what the drafter computes" in result.output and "--allow-lossy" in result.output
    assert "Traceback" not in result.output
    assert [p.name for p in tmp_path.iterdir()] == [src.name]  # no output, no staging left behind


def test_allowed_lossy_downgrade_folds_and_removes(drafter, tmp_path):
    src = drafter(producer="vllm", eagle31=True)
    report = eagleconv.downgrade(src, tmp_path / "out", allow_lossy=True)
    spec = load_drafter(tmp_path / "out").require_spec()
    assert spec.eagle_version == "3" and not spec.flags.fc_norm and not spec.flags.norm_output
    assert report.exact is False
    assert [c.exact for c in report.changes] == [True, False, False]
    assert {r.source for r in report.plan if r.action == "drop"} >= {f"fc_norm.{i}.weight" for i in range(K)}
    t, out = canonical(src), canonical(tmp_path / "out")
    scale = torch.cat([t[f"fc_norm.{i}.weight"].double() for i in range(K)])
    assert torch.equal(out["fc.weight"], (t["fc.weight"].double() * scale).to(torch.bfloat16))


def test_calibrated_downgrade_is_exact_on_states_of_one_scale(drafter, tmp_path):
    """Removing fc_norm with the typical 1/RMS folded in reproduces fc_norm on states of that RMS."""
    src = drafter(producer="vllm", eagle31=True, dtype="float32")
    calibration = write_calibration(tmp_path / "c.safetensors", constant_rms_states(32, rms=12.0))
    eagleconv.downgrade(src, tmp_path / "out", allow_lossy=True, calibration=calibration)
    t, out = canonical(src), canonical(tmp_path / "out")
    probe = constant_rms_states(8, rms=12.0, seed=2)
    g_ref = combine(t, probe, fc_norm=True)
    g_new = combine(out, probe, fc_norm=False)
    x = probe.reshape(8, -1).abs() / 12.0 * torch.cat([t[f"fc_norm.{i}.weight"].double().abs() for i in range(K)])
    bound = 2.0 ** -24 * 4 * (x @ t["fc.weight"].double().abs().T) + 1e-9  # f32 rounding of fc, w/R and the eps
    assert bool(((g_new - g_ref).abs() <= bound + 1e-6 * g_ref.abs()).all())


def test_downgrade_of_an_eagle3_drafter_is_exact(drafter, tmp_path):
    src = drafter(producer="vllm")
    result = CliRunner().invoke(cli, ["downgrade", str(src), str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["exact"] is True and report["operation"] == "downgrade" and report["changes"] == []
    assert stored_bytes(tmp_path / "out") == stored_bytes(src)


def test_upgrade_cli_json(drafter, tmp_path):
    src = drafter(producer="vllm")
    result = CliRunner().invoke(cli, ["upgrade", str(src), str(tmp_path / "out"), "--no-fc-norm", "--no-norm-output",
                                      "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["exact"] is True and report["operation"] == "upgrade" and report["style"] is None
    assert report["flags_after"]["fc_norm"] is False


@pytest.mark.parametrize("command,recipe,extra", [("upgrade", dict(producer="vllm"), []),
                                                   ("downgrade", dict(producer="vllm", eagle31=True), ["--allow-lossy"])])
def test_max_shard_size_splits_the_output_into_the_same_tensors(drafter, tmp_path, command, recipe, extra):
    """--max-shard-size as convert reads it: an indexed multi-shard output holding exactly the one-file output's
    tensors; a size that does not parse is a usage error (exit 2) and nothing is written."""
    src = drafter(**recipe)
    whole = CliRunner().invoke(cli, [command, str(src), str(tmp_path / "whole"), *extra])
    assert whole.exit_code == 0, whole.output
    sharded = CliRunner().invoke(cli, [command, str(src), str(tmp_path / "sharded"), *extra, "--max-shard-size", "4KB"])
    assert sharded.exit_code == 0, sharded.output
    shards = sorted(p.name for p in (tmp_path / "sharded").glob("*.safetensors"))
    assert len(shards) > 1
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == shards
    assert stored_bytes(tmp_path / "sharded") == stored_bytes(tmp_path / "whole")
    bad = CliRunner().invoke(cli, [command, str(src), str(tmp_path / "bad"), *extra, "--max-shard-size", "lots"])
    assert bad.exit_code == 2 and "lots" in bad.output and not (tmp_path / "bad").exists()


# -- measured divergence (the reference forward, eagleconv.forward) ---------------------------------

def synthetic_calibration(path: Path, ids=(2, 8, 13), seed: int = 7) -> Path:
    """Aux states from the same distribution as the forward's synthetic inputs, another seed."""
    from eagleconv.forward.inputs import synthetic_aux

    states = torch.cat([synthetic_aux(seed, i, 8, 16, HT) for i in ids], -1)  # [8, 16, K*HT]: 8 sequences
    save_file({"aux_hidden_states": states.contiguous()}, str(path))
    return path


@pytest.mark.parametrize("architecture,to", [("llama", "speculators"), ("qwen3", "vllm"), ("deepseek_mla", "torchspec")])
def test_flag_off_upgrade_is_identical_under_diff(drafter, tmp_path, architecture, to):
    src = drafter(producer="vllm", architecture=architecture)
    eagleconv.upgrade(src, tmp_path / "out", fc_norm=False, norm_output=False, to=to)
    report = eagleconv.diff(src, tmp_path / "out")
    assert report.identical and all(s.top1_agreement == 1.0 and s.max_abs_err == 0.0 for s in report.steps)


def test_norm_output_changes_only_the_recursion(drafter, tmp_path):
    """norm_output feeds back the post-norm state: step 1 is bit-identical, later steps are not."""
    src = drafter(producer="vllm")
    report = eagleconv.upgrade(src, tmp_path / "out", fc_norm=False)
    assert report.exact is False and report.compute_dtype == "float32"
    steps = report.divergence
    assert [s.step for s in steps] == [1, 2, 3, 4]
    assert steps[0].max_abs_err == 0.0 and steps[0].top1_agreement == 1.0
    assert all(s.max_abs_err > 0 for s in steps[1:])
    # the report's numbers are diff's numbers for the written drafter
    assert eagleconv.diff(src, tmp_path / "out").steps == steps


@pytest.mark.parametrize("architecture", ["llama", "qwen3", "deepseek_mla"])
def test_calibration_buys_agreement(drafter, tmp_path, architecture):
    src = drafter(producer="vllm", architecture=architecture, dtype="float32")
    calibration = synthetic_calibration(tmp_path / "calib.safetensors")
    report = eagleconv.upgrade(src, tmp_path / "out", norm_output=False, calibration=calibration)
    calibrated, unit = report.divergence[0], report.divergence_unit_weights[0]
    # the synthetic states' outlier channels make each token's RMS vary, so no norm is exact on them; the
    # scale-preserving weights still keep far more of the source's draft tokens than unit weights do (on these
    # states: llama 0.72 against 0.59, the smallest margin of the three)
    assert calibrated.top1_agreement >= unit.top1_agreement + 0.1
    # measured on those states (the ones the weights were fitted to), not on diff's synthetic inputs
    assert "on the calibration states (all 128 tokens, 8 sequence(s)" in " ".join(report.notes)


def test_lossy_downgrade_reports_measured_divergence(drafter, tmp_path):
    src = drafter(producer="vllm", eagle31=True)
    report = eagleconv.downgrade(src, tmp_path / "out", allow_lossy=True)
    assert report.exact is False and len(report.divergence) == 4
    assert any(s.max_abs_err > 0 for s in report.divergence)
    assert eagleconv.diff(src, tmp_path / "out").steps == report.divergence
    result = CliRunner().invoke(cli, ["downgrade", str(src), str(tmp_path / "again"), "--allow-lossy"])
    assert result.exit_code == 0 and "divergence from the source per draft step (float32)" in result.output
    assert "step 4: top-1 agreement" in result.output


def test_mla_has_no_norm_before_fc_style(drafter, tmp_path):
    src = drafter(producer="vllm", architecture="deepseek_mla")
    with pytest.raises(ConversionError, match="use --style fc_norm"):
        eagleconv.upgrade(src, tmp_path / "out", style="norm_before_fc")


def test_upgrade_calibrates_from_a_transformers_target(drafter, tmp_path, monkeypatch):
    """--target + --prompts: the target is run, its aux states at the drafter's layers set the new weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from eagleconv.forward import Target

    loads: list[Path] = []
    real_init = Target.__init__

    def counting_init(self, directory):
        loads.append(Path(directory))
        real_init(self, directory)

    monkeypatch.setattr(Target, "__init__", counting_init)

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(hidden_size=HT, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                                 num_hidden_layers=16, vocab_size=128, max_position_embeddings=256,
                                 rms_norm_eps=1e-5)).save_pretrained(str(tmp_path / "target"), safe_serialization=True)
    prompts = [[1, 5, 9, 17, 33, 40], [2, 4, 8, 16, 32, 64, 100]]
    (tmp_path / "prompts.json").write_text(json.dumps(prompts))
    src = drafter(producer="vllm")  # aux ids (2, 8, 13), hidden-state-index numbering
    result = CliRunner().invoke(cli, ["upgrade", str(src), str(tmp_path / "out"), "--target", str(tmp_path / "target"),
                                      "--prompts", str(tmp_path / "prompts.json"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["initialisation"] == "calibrated" and "13 tokens, layers [2, 8, 13]" in report["calibration"]
    assert "target" in " ".join(report["notes"])  # divergence measured on the target's own states
    assert loads == [tmp_path / "target"]  # calibration and the divergence measurement share one load
    captured = eagleconv.capture_aux_states(tmp_path / "target", prompts, [2, 8, 13])
    out = canonical(tmp_path / "out")
    for i, layer in enumerate((2, 8, 13)):
        states = torch.cat([c[layer] for c in captured], 0)
        assert torch.equal(out[f"fc_norm.{i}.weight"], scale_preserving_weight(states, EPS).to(torch.bfloat16))
