"""The "vllm 0.32" profile against the real vLLM 0.32.0 sources (see eagleconv/engines/VLLM_0_32_AUDIT.md).

One test per rule the audit corrected; each names the 0.32.0 code it replays.
"""

from __future__ import annotations

import json

import torch

import eagleconv
from eagleconv.synthetic import (
    DrafterRecipe,
    TinyDims,
    canonical_tensors,
    make_drafter,
    producer_config,
)

SERVABLE = TinyDims(target_hidden=32)
V032 = "vllm 0.32"


def found(report, code, engine=V032, severity=None):
    return [f for f in report.findings if f.code == code and f.engine == engine
            and (severity is None or f.severity == severity)]


def state(recipe: DrafterRecipe | None = None, **changes):
    """Canonical tensors and vLLM-layout config; a change of None drops the tensor."""
    recipe = recipe or DrafterRecipe(producer="vllm", dims=SERVABLE)
    t = canonical_tensors(recipe)
    for k, v in changes.items():
        if v is None:
            t.pop(k, None)
        else:
            t[k] = v
    return t, producer_config(recipe)


# -- 1. method auto-detection (config/speculative.py:1131-1139, 1327-1391) --------------------

def test_plain_path_is_served_as_draft_model(tmp_path):
    """method defaults to 'draft_model' before the path test, so a path with neither 'eagle-' nor 'eagle3' is not EAGLE-3."""
    plain = make_drafter(tmp_path / "drafter", DrafterRecipe(producer="vllm", dims=SERVABLE))
    [f] = found(eagleconv.validate(plain), "EC041")
    assert f.severity == "info" and "draft_model" in f.message
    named = make_drafter(tmp_path / "llama-EAGLE3-drafter", DrafterRecipe(producer="vllm", dims=SERVABLE))
    assert not found(eagleconv.validate(named), "EC041")
    dashed = make_drafter(tmp_path / "my-eagle-3.1-drafter", DrafterRecipe(producer="vllm", dims=SERVABLE))
    [f] = found(eagleconv.validate(dashed), "EC041")
    assert f.severity == "warning" and "'eagle'" in f.message


# -- 3. flags: key presence wins, a null reads as false ----------------------------------------

def test_null_nested_flag_is_read_as_false():
    """``"use_aux_hidden_state" in eagle_config`` then its value (llama_eagle3.py:180-183); null means no fc."""
    t, cfg = state()
    cfg["eagle_config"] = {"use_aux_hidden_state": None}
    [f] = found(eagleconv.validate(t, cfg), "EC022")
    assert "use_aux_hidden_state" in f.message and "false" in f.message
    t, cfg = state()
    cfg["eagle_config"] = {"norm_before_fc": None}
    cfg["norm_before_fc"] = True  # eagle_config.get('norm_before_fc', top) returns the nested None
    view = eagleconv.engines.engine_view(eagleconv.engines.PROFILES[V032], _subject(cfg))
    assert view.flags["norm_before_fc"][0] is False


def _subject(cfg):
    from eagleconv.engines.base import Subject
    return Subject(cfg, layout=None, read=None, names=set(), has_tensors=False)


# -- 6. load_weights ---------------------------------------------------------------------------

def test_d2t_with_full_draft_vocab_raises():
    """draft_id_to_target_id exists only when draft_vocab_size != the target's vocab (llama_eagle3.py:338-345)."""
    full = DrafterRecipe(producer="vllm", dims=TinyDims(target_hidden=32, draft_vocab=128))
    t, cfg = state(full)
    t["d2t"] = torch.zeros(128, dtype=torch.int64)
    errors = found(eagleconv.validate(t, cfg), "EC003", severity="error")
    assert any("draft_id_to_target_id" in f.message for f in errors), [f.message for f in errors]
    t, cfg = state(full, d2t=None, t2d=None)
    assert not any("draft_id_to_target_id" in f.message for f in found(eagleconv.validate(t, cfg), "EC003"))
    t, cfg = state()  # a pruned vocab keeps its d2t
    assert not found(eagleconv.validate(t, cfg), "EC003")


def test_mask_hidden_dropped_by_llama_but_not_deepseek():
    """Only Eagle3Llama/Qwen3 load_weights skip mask_hidden (llama_eagle3.py:431-442); deepseek_eagle3.py has no such branch."""
    t, cfg = state(mask_hidden=torch.zeros(1, 96))
    assert not found(eagleconv.validate(t, cfg), "EC003")
    mla = DrafterRecipe(producer="vllm", architecture="deepseek_mla", dims=SERVABLE)
    t, cfg = state(mla, mask_hidden=torch.zeros(1, 96))
    assert any("mask_hidden" in f.message for f in found(eagleconv.validate(t, cfg), "EC003", severity="error"))


def test_rotary_pos_emb_inv_freq_is_dropped():
    """AutoWeightsLoader.REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER also drops rotary_pos_emb.inv_freq (utils.py:233-240)."""
    t, cfg = state(**{"layers.0.self_attn.rotary_pos_emb.inv_freq": torch.zeros(4)})
    assert not found(eagleconv.validate(t, cfg), "EC003")


def test_unknown_bias_is_ignored_only_under_an_existing_module():
    """A '.bias' is ignored only as a missing parameter of a module that exists (utils.py:431-448)."""
    t, cfg = state(**{"layers.0.self_attn.o_proj.bias": torch.zeros(32, dtype=torch.bfloat16)})
    assert [f.severity for f in found(eagleconv.validate(t, cfg), "EC003")] == ["warning"]
    t, cfg = state(**{"fc_norm.0.bias": torch.zeros(32, dtype=torch.bfloat16)})  # fc_norm off: no fc_norm module
    assert found(eagleconv.validate(t, cfg), "EC003", severity="error")
    t, cfg = state(**{"layers.1.mlp.down_proj.bias": torch.zeros(32, dtype=torch.bfloat16)})  # one layer only
    assert found(eagleconv.validate(t, cfg), "EC003", severity="error")


# -- 4. speculators translation ------------------------------------------------------------------

SPECULATORS = producer_config(DrafterRecipe(producer="speculators", dims=SERVABLE))


def test_speculators_without_transformer_layer_config_is_built_from_nothing():
    """extract_transformers_pre_trained_config starts from {} (speculators/base.py:59); 'Must provide ...' is only
    validate_speculators_config, which the drafter path never calls."""
    cfg = {k: v for k, v in json.loads(json.dumps(SPECULATORS)).items() if k != "transformer_layer_config"}
    [f] = [f for f in found(eagleconv.lint(cfg), "EC040") if "transformer_layer_config" in f.message]
    assert "Must provide" not in f.message and "hidden_size" in f.message


def test_speculators_config_with_model_type_is_not_read_as_speculators():
    """HFConfigParser picks SpeculatorsConfig only when model_type is absent (transformers_utils/config.py:315-320)."""
    cfg = {**json.loads(json.dumps(SPECULATORS)), "model_type": "llama"}
    assert any("model_type" in f.message and "Eagle3Speculator" in f.message
               for f in found(eagleconv.lint(cfg), "EC040", severity="error"))
    cfg = {k: v for k, v in json.loads(json.dumps(SPECULATORS)).items() if k != "speculators_config"}
    assert any("speculators_config" in f.message for f in found(eagleconv.lint(cfg), "EC040", severity="error"))
    assert not found(eagleconv.lint(SPECULATORS), "EC040")


# -- 7. capture layers (gpu_model_runner.py:5251-5285, gpu/spec_decode/eagle/eagle3_utils.py:100-137) --

def test_eagle_config_layer_ids_read_by_v2_runner_only():
    t, cfg = state()
    ids = cfg.pop("eagle_aux_hidden_state_layer_ids")
    cfg["eagle_config"] = {"layer_ids": ids}
    [f] = found(eagleconv.validate(t, cfg), "EC010")
    assert f.severity == "warning" and "eagle_config.layer_ids" in f.message and "V1 runner" in f.message
    cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids}
    [f] = found(eagleconv.validate(t, cfg), "EC010")
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in f.message
