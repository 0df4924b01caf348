"""NVIDIA Model-Optimizer's hf_spec_export.py: layers.0.* names, nested eagle_config, no t2d (its allow-list has
none), no embed_tokens."""

from __future__ import annotations

from ..support.jsonio import JSONObject
from .base import DrafterRecipe, Producer
from . import register


@register
class ModelOpt(Producer):
    name = "modelopt"
    without = ("t2d",)
    cannot_write = {"eagle31": "ModelOpt's exporter (hf_spec_export.py _check_valid_sd) asserts that every key is in "
                               "its allow-list, which has no fc_norm: it cannot write an EAGLE-3.1 drafter"}

    @classmethod
    def config(cls, recipe: DrafterRecipe, decoder: JSONObject) -> JSONObject:
        d = recipe.dims
        eagle_config: JSONObject = {
            "eagle_aux_hidden_state_layer_ids": list(d.aux_ids), "use_aux_hidden_state": True,
            "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True, "use_mtp_layernorm": False,
            "next_layer_regular": True, "parallel_draft_step": 1, "parallel_draft_heads_num_layers": 1}
        if recipe.norm_before_fc:
            eagle_config["norm_before_fc"] = True
        return {"architectures": [cls.class_name(recipe)], **decoder, "draft_vocab_size": d.draft_vocab,
                "target_hidden_size": d.target_hidden, "eagle_config": eagle_config, "torch_dtype": recipe.dtype}
