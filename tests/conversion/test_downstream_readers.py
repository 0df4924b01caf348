"""The five interop findings of issue 12, each checked on real files.

Each test was seen failing before its fix: loading eagleconv's outputs in
speculators 0.9.0 and transformers 4.57 / 5.x is what found them (the interop
tier in ``.ci/interop`` loads them there for real; these tests pin the files).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import eagleconv
from eagleconv.synthetic import DrafterRecipe, make_drafter
from tests.conftest import read_json


# -- finding 5: the modelopt EAGLE-3.1 generator --------------------------------------------------

def test_modelopt_generator_refuses_eagle31_like_modelopts_exporter(tmp_path):
    """ModelOpt's exporter asserts no key outside its allow-list (no fc_norm), so it cannot write EAGLE-3.1."""
    with pytest.raises(ValueError, match="ModelOpt.*fc_norm"):
        make_drafter(tmp_path / "m", DrafterRecipe(producer="modelopt", eagle31=True))
    assert not (tmp_path / "m").exists()


def test_every_drafter_the_generator_builds_validates_clean_of_errors(tmp_path):
    from eagleconv.synthetic import PRODUCERS

    for producer in PRODUCERS:
        for eagle31 in (False, True):
            recipe = DrafterRecipe(producer=producer, eagle31=eagle31)
            try:
                path = make_drafter(tmp_path / f"{producer}{int(eagle31)}", recipe)
            except ValueError:
                assert eagle31 and producer in ("modelopt", "eagle")
                continue
            errors = [f for f in eagleconv.validate(path, engines=(), numeric=False, allow_pickle=True).findings if f.severity == "error"]
            assert not errors, (producer, eagle31, [f.message for f in errors])


# -- finding 1: --verifier ----------------------------------------------------------------------

def _run(*args: str):
    from click.testing import CliRunner

    from eagleconv.cli.main import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_speculators_output_without_a_verifier_is_reported(drafter, tmp_path):
    report = eagleconv.convert(drafter(producer="specforge"), tmp_path / "out", "speculators")
    verifier = read_json(tmp_path / "out" / "config.json")["speculators_config"]["verifier"]
    assert verifier["name_or_path"] is None
    assert [f.code for f in report.findings if f.severity == "warning"] == ["EC043"]


def test_verifier_from_a_local_directory_fills_name_and_architectures(drafter, tmp_path):
    from eagleconv.synthetic import make_target_config

    target = make_target_config(tmp_path / "target")
    cfg = read_json(target / "config.json")
    cfg["architectures"] = ["LlamaForCausalLM", "SomethingElse"]
    (target / "config.json").write_text(json.dumps(cfg))
    result = _run("convert", str(drafter(producer="specforge")), str(tmp_path / "out"), "--to", "speculators",
                  "--verifier", str(target), "--json")
    assert result.exit_code == 0, result.output
    verifier = read_json(tmp_path / "out" / "config.json")["speculators_config"]["verifier"]
    assert verifier == {"name_or_path": str(target.resolve()), "architectures": ["LlamaForCausalLM", "SomethingElse"]}
    assert "EC043" not in result.output


def test_relative_verifier_directory_is_recorded_absolute(drafter, tmp_path, monkeypatch):
    from eagleconv.synthetic import make_target_config

    make_target_config(tmp_path / "target")
    monkeypatch.chdir(tmp_path)
    eagleconv.convert(drafter(producer="specforge"), tmp_path / "out", "speculators", verifier="./target")
    verifier = read_json(tmp_path / "out" / "config.json")["speculators_config"]["verifier"]
    assert verifier["name_or_path"] == str((tmp_path / "target").resolve())


def test_verifier_hub_id_replaces_the_sources_and_says_so(drafter, tmp_path):
    src = drafter(producer="speculators")
    report = eagleconv.convert(src, tmp_path / "out", "speculators", verifier="org/other-model")
    verifier = read_json(tmp_path / "out" / "config.json")["speculators_config"]["verifier"]
    assert verifier == {"name_or_path": "org/other-model", "architectures": []}
    assert any("replacing 'meta-llama/Llama-3.1-8B-Instruct'" in n for n in report.notes)


def test_verifier_path_that_is_not_a_model_directory_is_a_usage_error(drafter, tmp_path):
    result = _run("convert", str(drafter(producer="specforge")), str(tmp_path / "out"), "--to", "speculators",
                  "--verifier", str(tmp_path / "missing"))
    assert result.exit_code == 2
    assert "not a model directory" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


# -- finding 2: t2d for speculators under a compressed vocab ------------------------------------

def test_modelopt_to_speculators_derives_t2d_exactly_from_d2t(drafter, tmp_path):
    from safetensors.torch import load_file

    from eagleconv.synthetic import canonical_tensors

    recipe = DrafterRecipe(producer="modelopt", seed=7)
    src = make_drafter(tmp_path / "src", recipe)
    assert "t2d" not in load_file(str(src / "model.safetensors"))
    report = eagleconv.convert(src, tmp_path / "out", "speculators")
    written = load_file(str(tmp_path / "out" / "model.safetensors"))
    import torch

    want = canonical_tensors(recipe)["t2d"]
    assert written["t2d"].dtype == torch.bool and torch.equal(written["t2d"], want)
    assert int(written["t2d"].sum()) == recipe.dims.draft_vocab
    assert [r.action for r in report.plan if r.destination == "t2d"] == ["derive"]


def test_full_vocab_speculators_output_gets_no_vocab_mapping(drafter, tmp_path):
    """speculators registers no d2t/t2d buffer when draft vocab = target vocab: nothing to derive then."""
    from dataclasses import replace as dc_replace

    from safetensors.torch import load_file

    from eagleconv.synthetic import TinyDims

    src = make_drafter(tmp_path / "src", DrafterRecipe(producer="modelopt", dims=dc_replace(TinyDims(), draft_vocab=128)))
    eagleconv.convert(src, tmp_path / "out", "speculators")
    assert "t2d" not in load_file(str(tmp_path / "out" / "model.safetensors"))


# -- finding 4: every dropped config key is reported, and only those ----------------------------

def _speculators_source(tmp_path: Path, **top: object) -> Path:
    src = make_drafter(tmp_path / "src", DrafterRecipe(producer="speculators"))
    cfg = read_json(src / "config.json")
    cfg.update(top)
    cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = 5
    (src / "config.json").write_text(json.dumps(cfg))
    return src


def test_speculators_to_speculators_keeps_embed_requires_grad_and_reports_rewritten_proposals(tmp_path):
    src = _speculators_source(tmp_path, embed_requires_grad=True, tie_word_embeddings=False)
    report = eagleconv.convert(src, tmp_path / "out", "speculators")
    changes = "\n".join(report.config_changes)
    # issue 27 item 7: the destination has its place, so it is kept, not reported dropped
    assert "embed_requires_grad" not in changes
    assert read_json(tmp_path / "out" / "config.json")["embed_requires_grad"] is True
    assert "speculators_config.proposal_methods" in changes and "'speculative_tokens': 5" in changes
    # speculators keeps the decoder's tie_word_embeddings in transformer_layer_config: not dropped
    assert read_json(tmp_path / "out" / "config.json")["transformer_layer_config"]["tie_word_embeddings"] is False
    assert "tie_word_embeddings" not in changes


def test_nested_tie_word_embeddings_kept_is_not_reported_dropped(tmp_path):
    src = _speculators_source(tmp_path, tie_word_embeddings=False)
    report = eagleconv.convert(src, tmp_path / "out", "vllm")
    assert read_json(tmp_path / "out" / "config.json")["tie_word_embeddings"] is False
    changes = "\n".join(report.config_changes)
    assert "tie_word_embeddings" not in changes
    assert "embed_requires_grad = False" in changes  # speculators-only training switch: no place in vllm


def test_structure_of_the_source_layout_is_not_reported(tmp_path):
    src = make_drafter(tmp_path / "src", DrafterRecipe(producer="speculators"))
    report = eagleconv.convert(src, tmp_path / "out", "speculators")
    changes = "\n".join(report.config_changes)
    assert not any(k in changes for k in ("speculators_model_type", "speculators_version", "algorithm", "verifier",
                                          "proposal_methods", "transformer_layer_config"))


# -- finding 3: rope every reader reads the same ------------------------------------------------

def _rope_parameters_only(tmp_path: Path, producer: str = "specforge") -> Path:
    """A drafter whose rope is in transformers-5 style only, as speculators' own converter writes it."""
    src = make_drafter(tmp_path / "src", DrafterRecipe(producer=producer))
    cfg = read_json(src / "config.json")
    decoder = cfg["transformer_layer_config"] if producer == "speculators" else cfg
    theta = decoder.pop("rope_theta")
    decoder["rope_parameters"] = {"rope_type": "llama3", "rope_theta": theta, "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}
    (src / "config.json").write_text(json.dumps(cfg))
    return src


@pytest.mark.parametrize("producer, to", [("speculators", "vllm"), ("speculators", "specforge"),
                                          ("specforge", "torchspec"), ("specforge", "speculators")])
def test_rope_parameters_only_is_written_in_both_spellings(tmp_path, producer, to):
    src = _rope_parameters_only(tmp_path, producer)
    eagleconv.convert(src, tmp_path / "out", to, drop=["embed_tokens"] if to == "specforge" else ())
    cfg = read_json(tmp_path / "out" / "config.json")
    decoder = cfg["transformer_layer_config"] if to == "speculators" else cfg
    assert decoder["rope_theta"] == 500000.0
    assert decoder["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}
    assert decoder["rope_parameters"] == {**decoder["rope_scaling"], "rope_theta": 500000.0}
    codes = [f.code for f in eagleconv.validate(tmp_path / "out", engines=(), numeric=False).findings]
    assert "EC024" not in codes


def test_legacy_rope_gains_rope_parameters_equal_to_it(drafter, tmp_path):
    eagleconv.convert(drafter(producer="specforge"), tmp_path / "out", "vllm")
    cfg = read_json(tmp_path / "out" / "config.json")
    assert cfg["rope_theta"] == 500000.0 and "rope_scaling" not in cfg
    assert cfg["rope_parameters"] == {"rope_type": "default", "rope_theta": 500000.0}


def test_rope_only_some_readers_see_is_reported(tmp_path):
    src = _rope_parameters_only(tmp_path)
    warnings = [f for f in eagleconv.validate(src, engines=(), numeric=False).findings if f.code == "EC024"]
    assert [f.severity for f in warnings] == ["warning"] and "transformers 4.x" in warnings[0].message
    cfg = read_json(src / "config.json")
    cfg["rope_theta"] = 10000.0  # now the two spellings disagree
    (src / "config.json").write_text(json.dumps(cfg))
    errors = [f for f in eagleconv.lint(cfg, engines=()).findings if f.code == "EC024"]
    assert [f.severity for f in errors] == ["error"]


def test_a_theta_only_a_layout_default_gives_is_reported_when_transformers_reads_another(tmp_path):
    """vLLM runs a Qwen3 drafter without rope_theta at 1e6; transformers' Qwen3Config says 10000."""
    for arch, reported in (("qwen3", True), ("llama", False)):
        src = make_drafter(tmp_path / arch, DrafterRecipe(producer="vllm", architecture=arch))
        cfg = read_json(src / "config.json")
        del cfg["rope_theta"]
        (src / "config.json").write_text(json.dumps(cfg))
        found = [f for f in eagleconv.validate(src, engines=(), numeric=False).findings if f.code == "EC024"]
        assert [f.severity for f in found] == (["warning"] if reported else []), arch


@pytest.mark.parametrize("command, recipe, extra", [
    ("upgrade", DrafterRecipe(producer="speculators"), []),
    ("downgrade", DrafterRecipe(producer="speculators", eagle31=True), ["--allow-lossy"]),
])
def test_upgrade_and_downgrade_take_verifier_too(tmp_path, command, recipe, extra):
    src = make_drafter(tmp_path / "src", recipe)
    result = _run(command, str(src), str(tmp_path / "out"), "--verifier", "org/target-model", "--json", *extra)
    assert result.exit_code == 0, result.output
    verifier = read_json(tmp_path / "out" / "config.json")["speculators_config"]["verifier"]
    assert verifier["name_or_path"] == "org/target-model"
