"""Strict tensor accounting, refusals, and the atomic writer."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.conftest import edit_config, read_json
from eagleconv import convert, inspect
from eagleconv.errors import ConversionError, UsageError
from eagleconv.io.writer import CheckpointWriter, OutputTensor


def rewrite_tensors(directory, change) -> None:
    """Load model.safetensors, apply ``change(dict)``, save it back (test setup only)."""
    path = directory / "model.safetensors"
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def test_unmapped_tensor_is_an_error_naming_it(drafter, tmp_path):
    src = drafter(producer="specforge")
    rewrite_tensors(src, lambda t: t.__setitem__("mystery.weight", torch.zeros(2)))
    with pytest.raises(ConversionError, match="unmapped tensor 'mystery.weight'"):
        convert(src, tmp_path / "out", "vllm")
    assert not (tmp_path / "out").exists()


def test_mixed_layout_names_are_refused(drafter, tmp_path):
    src = drafter(producer="specforge")
    rewrite_tensors(src, lambda t: t.__setitem__("layers.0.mlp.up_proj.weight", t.pop("midlayer.mlp.up_proj.weight")))
    with pytest.raises(ConversionError, match="not a specforge name"):
        convert(src, tmp_path / "out", "vllm")


def test_automodel_prefix_collision_is_refused(drafter, tmp_path):
    src = drafter(producer="automodel")
    rewrite_tensors(src, lambda t: t.__setitem__("model.lm_head.weight", t["lm_head.weight"].clone()))
    with pytest.raises(ConversionError, match="model.lm_head.weight"):
        convert(src, tmp_path / "out", "vllm")


def test_shape_contradicting_config_is_refused_unless_force(drafter, tmp_path):
    src = drafter(producer="vllm")
    edit_config(src, intermediate_size=96)
    with pytest.raises(ConversionError, match=r"EC050.*gate_proj"):
        convert(src, tmp_path / "out", "speculators")
    assert not (tmp_path / "out").exists()
    report = convert(src, tmp_path / "forced", "speculators", force=True)
    assert any(f.code == "EC050" for f in report.findings)


def test_missing_shape_field_is_reported_not_guessed(drafter, tmp_path):
    src = drafter(producer="specforge")
    edit_config(src, num_attention_heads=None)
    with pytest.raises(ConversionError, match="num_attention_heads"):
        convert(src, tmp_path / "out", "vllm")


def test_draft_vocab_is_derived_from_lm_head_and_reported(drafter, tmp_path):
    src = drafter(producer="specforge")
    edit_config(src, draft_vocab_size=None)
    report = convert(src, tmp_path / "out", "vllm")
    assert any("draft_vocab_size = 64 (from lm_head.weight)" in n for n in report.notes)
    assert read_json(tmp_path / "out" / "config.json")["draft_vocab_size"] == 64


def test_specforge_needs_lm_head(drafter, tmp_path):
    src = drafter(producer="vllm")
    rewrite_tensors(src, lambda t: t.pop("lm_head.weight"))
    edit_config(src, draft_vocab_size=128, vocab_size=128)
    rewrite_tensors(src, lambda t: (t.pop("d2t"), t.pop("t2d")))
    with pytest.raises(ConversionError, match="requires lm_head.weight"):
        convert(src, tmp_path / "out", "specforge")


@pytest.mark.parametrize("recipe,to,match", [
    (dict(producer="specforge", eagle31=True), "modelopt", "allow-list has no EAGLE-3.1 fc_norm"),
    (dict(producer="torchspec", architecture="deepseek_mla"), "speculators", "cannot carry a deepseek_mla"),
    (dict(producer="vllm", norm_before_fc=True), "specforge", "cannot express norm_before_fc"),
    (dict(producer="specforge", eagle31=True), "eagle", "cannot express fc_norm"),
    (dict(producer="vllm", layers=2), "specforge", "holds 1 decoder layer"),
])
def test_destination_that_cannot_carry_the_drafter_refuses(drafter, tmp_path, recipe, to, match):
    src = drafter(**recipe)
    with pytest.raises(ConversionError, match=match):
        convert(src, tmp_path / "out", to)
    assert not (tmp_path / "out").exists()


def test_four_aux_states_cannot_go_to_a_three_state_layout(drafter, tmp_path):
    from eagleconv.synthetic import TinyDims

    src = drafter(producer="vllm", dims=TinyDims(aux_ids=(2, 5, 9, 13)))
    assert inspect(src).num_aux_hidden_states == 4
    with pytest.raises(ConversionError, match="exactly 3 aux hidden states"):
        convert(src, tmp_path / "out", "specforge")
    report = convert(src, tmp_path / "sp", "speculators")
    cfg = read_json(tmp_path / "sp" / "config.json")
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 5, 9, 13]
    assert cfg["transformer_layer_config"]["num_aux_hidden_states"] == 4  # vLLM sizes fc from this
    assert report.ok


def test_destination_inside_or_equal_to_source_is_refused(drafter):
    src = drafter(producer="specforge")
    before = sorted(p.name for p in src.rglob("*"))
    for dst in (src / "sub", src, src.parent):
        with pytest.raises(UsageError, match="never writes where it reads|contains the source"):
            convert(src, dst, "speculators")
    assert sorted(p.name for p in src.rglob("*")) == before


def test_symlinked_destination_into_source_is_refused(drafter, tmp_path):
    src = drafter(producer="specforge")
    (tmp_path / "link").symlink_to(src)
    with pytest.raises(UsageError):
        convert(src, tmp_path / "link" / "out", "vllm")
    assert not (src / "out").exists()


def test_existing_destination_needs_overwrite_and_is_replaced_atomically(drafter, tmp_path):
    src = drafter(producer="specforge")
    out = tmp_path / "out"
    convert(drafter(producer="torchspec"), out, "speculators")
    before = (out / "config.json").read_bytes()
    with pytest.raises(UsageError, match="already exists"):
        convert(src, out, "vllm")
    assert (out / "config.json").read_bytes() == before
    convert(src, out, "vllm", overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert read_json(out / "config.json")["eagleconv"]["layout"] == "vllm"
    assert not list(tmp_path.glob(".out.*"))


def test_dry_run_writes_nothing_and_plans_every_tensor(drafter, tmp_path):
    src = drafter(producer="specforge", eagle31=True)
    report = convert(src, tmp_path / "out", "vllm", dry_run=True)
    assert not (tmp_path / "out").exists()
    assert report.dry_run and report.files_written == []
    assert {r.source for r in report.plan} == set(inspect(src).model_dump()["tensors"][i]["name"]
                                                  for i in range(len(inspect(src).tensors)))
    assert all(r.action == "copy" for r in report.plan)
    assert ("midlayer.mlp.up_proj.weight", "layers.0.mlp.up_proj.weight") in {(r.source, r.destination) for r in report.plan}


def test_failure_mid_write_leaves_nothing_behind(tmp_path):
    def boom(fd):
        raise OSError("disk full")

    tensors = [OutputTensor("a", "F32", (1,), 4, lambda fd: __import__("os").write(fd, b"\0" * 4)),
               OutputTensor("b", "F32", (1,), 4, boom)]
    with pytest.raises(OSError, match="disk full"):
        CheckpointWriter(tmp_path / "out").write(tensors, {"config.json": "{}"})
    assert list(tmp_path.iterdir()) == []


def test_aux_layer_ids_can_be_stamped(drafter, tmp_path):
    src = drafter(producer="automodel")  # Automodel does not write ids
    assert inspect(src).aux_layer_ids is None
    report = convert(src, tmp_path / "out", "vllm", aux_layer_ids=[1, 7, 12], aux_convention="layer_output")
    cfg = read_json(tmp_path / "out" / "config.json")
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 8, 13]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 8, 13]
    assert any("--aux-layer-ids" in n for n in report.notes)
    with pytest.raises(UsageError, match="2 ids for 3"):
        convert(src, tmp_path / "bad", "vllm", aux_layer_ids=[1, 2])


def test_dropped_config_fields_are_reported(drafter, tmp_path):
    src = drafter(producer="modelopt")
    report = convert(src, tmp_path / "out", "specforge")
    # ModelOpt-only eagle_config keys survive as carried keys rather than vanishing
    cfg = read_json(tmp_path / "out" / "config.json")
    assert cfg["eagle_config"]["use_mtp_layernorm"] is False
    src2 = drafter(producer="speculators")
    report = convert(src2, tmp_path / "out2", "vllm")
    assert any("verifier 'meta-llama/Llama-3.1-8B-Instruct'" in c for c in report.config_changes)


def test_speculators_output_always_states_norm_before_residual(drafter, tmp_path):
    """vLLM defaults a missing norm_before_residual to true for speculators configs."""
    src = drafter(producer="specforge")
    convert(src, tmp_path / "out", "speculators")
    assert read_json(tmp_path / "out" / "config.json")["norm_before_residual"] is False


def test_vllm_output_writes_every_engine_synonym(drafter, tmp_path):
    src = drafter(producer="speculators", norm_before_fc=True)
    convert(src, tmp_path / "out", "vllm")
    cfg = read_json(tmp_path / "out" / "config.json")
    assert cfg["norm_before_fc"] is True and cfg["eagle_config"]["norm_before_fc"] is True  # TRT-LLM reads nested only
    assert cfg["num_aux_hidden_states"] == 3
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == cfg["eagle_aux_hidden_state_layer_ids"]
    assert json.dumps(cfg).count("input_norm") == 0


def test_drop_that_matches_nothing_is_a_usage_error(drafter, tmp_path):
    with pytest.raises(UsageError, match="--drop embed_token matches no tensor"):
        convert(drafter(producer="torchspec"), tmp_path / "out", "specforge", drop=["embed_token"])


def test_drop_cannot_publish_an_unloadable_drafter(drafter, tmp_path):
    """Dropping lm_head under a compressed vocab would make vLLM use the first draft-vocab target logits."""
    src = drafter(producer="vllm")
    with pytest.raises(ConversionError, match=r"EC030.*nothing was written"):
        convert(src, tmp_path / "out", "speculators", drop=["lm_head"])
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))
    with pytest.raises(ConversionError, match="EC050"):
        convert(src, tmp_path / "out", "speculators", drop=["fc"])
