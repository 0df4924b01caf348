"""TorchSpec's export: layers.0.* names, embed_tokens shipped, eagle_config ids, a ``_torchspec_version`` stamp."""

from __future__ import annotations

from ..support.jsonio import JSONObject, JSONValue
from .base import DrafterRecipe, Producer, flags31, layer_output_ids
from . import register


@register
class TorchSpec(Producer):
    name = "torchspec"
    embed_tokens = True
    metadata = {"torchspec_version": "0.2.0"}
    overrides = {
        # TorchSpec's --vllm export numbers the aux ids of kimi_k2 (MLA) drafters as layer outputs (+1 in vLLM's)
        "deepseek_mla": {"layer_output_ids": True, "eagle_config": {
            "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True, "use_mtp_layernorm": False}},
    }

    @classmethod
    def config(cls, recipe: DrafterRecipe, decoder: JSONObject) -> JSONObject:
        d, overrides = recipe.dims, cls.overrides_for(recipe)
        ids: list[JSONValue] = layer_output_ids(recipe) if overrides.get("layer_output_ids") else list(d.aux_ids)
        eagle_config: JSONObject = {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True,
                                    **overrides.get("eagle_config", {})}
        return {"architectures": [cls.class_name(recipe)], **decoder, "draft_vocab_size": d.draft_vocab,
                "target_hidden_size": d.target_hidden, "num_aux_hidden_states": len(d.aux_ids), **flags31(recipe),
                "eagle_config": eagle_config, "torch_dtype": recipe.dtype, "_torchspec_version": "0.2.0"}
