"""The "vllm 0.32" profile against the real vLLM 0.32.0 sources (see eagleconv/engines/VLLM_0_32_AUDIT.md).

One test per rule the audit corrected; each names the 0.32.0 code it replays.
"""

from __future__ import annotations

import json

import torch

import eagleconv
from eagleconv.synthetic import DrafterRecipe, TinyDims, canonical_tensors, make_drafter, producer_config

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
    return Subject(cfg, None, None, set(), False)


# -- 6. load_weights ---------------------------------------------------------------------------

# -- 4. speculators translation ------------------------------------------------------------------

SPECULATORS = producer_config(DrafterRecipe(producer="speculators", dims=SERVABLE))


# -- 7. capture layers (gpu_model_runner.py:5251-5285, gpu/spec_decode/eagle/eagle3_utils.py:100-137) --
