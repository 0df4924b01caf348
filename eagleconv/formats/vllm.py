"""vLLM's own layout: what ``--speculative-config '{"method": "eagle3"}'`` loads without renames.

Tensors have no ``model.`` prefix and the decoder is ``layers.N.*``
(vLLM's Eagle3 ``load_weights``).  The config writes every synonym vLLM, SGLang, TRT-LLM
and tokenspeed read, so one artifact means the same thing to all of them:
aux ids at the top level (target capture) *and* in ``eagle_config`` plus
``num_aux_hidden_states`` (fc width); ``norm_before_fc`` at the top level and
in ``eagle_config`` (TRT-LLM reads only the nested one); ``norm_output`` and
TRT-LLM's ``eagle_config.return_hidden_post_norm``.
"""

from __future__ import annotations

from ..architectures.base import InLayout
from . import register
from .base.fields import ConfigField, FromArchitecture, SameAs, hf_fields
from .base import Layout, Seen, architectures_of, has_prefix
from .base.renames import Rename

VLLM_ARCHITECTURES = {
    "LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3Qwen3ForCausalLM",
    "Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM",
}


# The MLA model_types `convert --to vllm` rewrites to deepseek_v2 (see ``holds`` below).
VLLM_REWRITTEN = ("kimi_k2", "deepseek_v3", "deepseek_v32")


@register
class VllmLayout(Layout):
    name = "vllm"
    producer = "vLLM (serving layout)"
    description = "layers.N.* without model. prefix; LlamaForCausalLMEagle3 / Eagle3Qwen3ForCausalLM / Eagle3DeepseekV2ForCausalLM"
    holds = {
        "llama": InLayout(("LlamaForCausalLMEagle3",)),
        "qwen3": InLayout(("Eagle3Qwen3ForCausalLM",)),
        "phi3": InLayout(
            ("Eagle3LlamaForCausalLM",), why="vLLM 0.32 has no Eagle3Phi3ForCausalLM; its Llama drafter loads the fused "
            "qkv_proj/gate_up_proj as its own stacked parameters (llama_eagle3.py:290-303), so the tensors are kept as "
            "they are"),
        # vLLM 0.32 runs a wrapped drafter as MLA only for deepseek model_types (kimi_k2 is not among them, vllm#45760)
        # and rewrites a deepseek_v3 / deepseek_v32 draft config into DeepSeek MTP, which it then refuses
        # (config/speculative.py:661-694): deepseek_v2 is the one model_type it both detects and serves.
        "deepseek_mla": InLayout(("Eagle3DeepseekV2ForCausalLM",), model_types=dict.fromkeys(VLLM_REWRITTEN, "deepseek_v2"),
                                 why="vLLM 0.32 detects deepseek_v2 as MLA and serves it; it rewrites deepseek_v3/deepseek_v32 "
                                 "draft configs into DeepSeek MTP and refuses them, and does not detect kimi_k2 as MLA "
                                 "(vllm#45760)"),
    }
    fields = hf_fields(
        aux_layer_ids=ConfigField(
            ("eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids"),
            write=("eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids"),
        ),
        norm_before_fc=ConfigField(("eagle_config.norm_before_fc", "norm_before_fc"),
                                   write=("norm_before_fc", "eagle_config.norm_before_fc")),
        norm_output=ConfigField(("norm_output", "eagle_config.return_hidden_post_norm"),
                                write=("norm_output", "eagle_config.return_hidden_post_norm")),
    )
    # vLLM 0.32's Eagle3 load_weights (llama, qwen3, deepseek) renames "midlayer." to "layers.0." before it maps a
    # name (eagleconv/engines/VLLM_0_32_AUDIT.md 6a, R10): a hand-renamed SpecForge export runs exactly as stated
    loader_aliases = (("midlayer.", "layers.0."),)
    # the decoder nested under model. as an HF LlamaForCausalLM state dict has it, fc and the rest at the top level:
    # llama.cpp's converter maps these names; vLLM prefixes its own model. and fails on them (its profile says so)
    spellings = (Rename("model.layers.{rest}", "layers.{rest}"),)
    defaults = {
        "target_hidden_size": SameAs("hidden_size"),
        "num_aux_hidden_states": 3,
        "fc_norm": False, "norm_before_fc": False, "norm_output": False,
        "norm_before_residual": False, "use_aux_hidden_state": True,
        # vLLM's EAGLEConfig falls back to its family's config class (LlamaConfig / DeepseekV3Config: eps 1e-6);
        # RoPE base 10000 when nothing is given, 1e6 for Qwen3 (set_default_rope_theta): each architecture states its own.
        "rms_norm_eps": FromArchitecture("default_rms_norm_eps"),
        "rope_theta": FromArchitecture("default_rope_theta"),
    }

    @classmethod
    def looks_like(cls, seen: Seen):
        config, names = seen.config, seen.names
        if names is None:  # a config alone: the HF-style fallback
            return 1, ["an HF-style EAGLE-3 config (pass --from specforge for SpecForge's aux-id numbering)"]
        if "fc.weight" in names and has_prefix(names, "layers."):
            archs = set(architectures_of(config)) & VLLM_ARCHITECTURES
            if archs:
                return 20, [f"layers.N.* tensors without model. prefix and architectures {sorted(archs)}"]
            return 10, ["layers.N.* tensors without model. prefix"]
        if "fc.weight" in names and has_prefix(names, "model.layers."):
            return 5, ["fc.weight with the decoder as model.layers.N.* (an HF state dict's spelling of layers.N.*)"]
        return 0, []
