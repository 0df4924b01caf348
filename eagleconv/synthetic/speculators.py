"""vLLM speculators' Eagle3Speculator config: the decoder nested in transformer_layer_config, a speculators_config
naming the verifier, embed_tokens shipped."""

from __future__ import annotations

from ..formats.speculators import speculators_config
from ..spec.drafter import Verifier
from ..support.jsonio import JSONObject
from .base import DrafterRecipe, Producer, flags31
from . import register


@register
class Speculators(Producer):
    name = "speculators"
    embed_tokens = True

    @classmethod
    def config(cls, recipe: DrafterRecipe, decoder: JSONObject) -> JSONObject:
        d = recipe.dims
        return {
            "architectures": ["Eagle3Speculator"],
            "speculators_model_type": "eagle3",
            "speculators_version": "0.9.0",
            "speculators_config": speculators_config(Verifier(name_or_path="meta-llama/Llama-3.1-8B-Instruct",
                                                              architectures=("LlamaForCausalLM",))),
            "transformer_layer_config": decoder,
            "draft_vocab_size": d.draft_vocab,
            "target_hidden_size": d.target_hidden,
            "norm_before_residual": False,
            "norm_before_fc": recipe.norm_before_fc,
            **flags31(recipe),
            "eagle_aux_hidden_state_layer_ids": list(d.aux_ids),
            "embed_requires_grad": False,
            "torch_dtype": recipe.dtype,
        }
