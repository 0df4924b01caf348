"""SpecForge's SGLang export: midlayer.* names, no embed_tokens, aux ids as layer outputs in eagle_config."""

from __future__ import annotations

from ..support.jsonio import JSONObject
from .base import DrafterRecipe, Producer, flags31, layer_output_ids
from . import register
from .eagle import midlayer


@register
class SpecForge(Producer):
    name = "specforge"

    @classmethod
    def config(cls, recipe: DrafterRecipe, decoder: JSONObject) -> JSONObject:
        d = recipe.dims
        return {"architectures": ["LlamaForCausalLMEagle3"], **decoder, "draft_vocab_size": d.draft_vocab,
                "target_hidden_size": d.target_hidden, **flags31(recipe), "torch_dtype": recipe.dtype,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": layer_output_ids(recipe)}}

    @classmethod
    def stored_name(cls, canonical: str) -> str:
        return midlayer(canonical)
