"""NVIDIA Model-Optimizer's EAGLE export (``hf_spec_export.py``), the "official" layout.

``layers.0.*`` keys under a strict allow-list: no ``embed_tokens``, no ``t2d``
and no ``fc_norm``.  Aux ids and ``norm_before_fc`` live only in the nested
``eagle_config`` (NVIDIA's gpt-oss drafters ship ``input_norm.weight``).
ModelOpt's exporter asserts that every key is in its allow-list (``_check_valid_sd``,
modelopt/torch/export/plugins/hf_spec_export.py; still so in later exporters), so no ModelOpt export is
EAGLE-3.1: fc_norm can never be held here, and ``eagleconv.synthetic`` refuses the recipe.
"""

from __future__ import annotations

from ..architectures.base import InLayout
from . import register
from .base import Seen, Capability, Layout, has_prefix
from .base.fields import ConfigField, SameAs, hf_fields

MODELOPT_EAGLE_KEYS = {"use_input_layernorm_in_first_layer", "use_last_layernorm", "use_mtp_layernorm",
                       "next_layer_regular", "parallel_draft_step", "parallel_draft_heads_num_layers"}


@register
class ModelOptLayout(Layout):
    name = "modelopt"
    producer = "NVIDIA Model-Optimizer"
    description = "layers.0.* keys, nested eagle_config, no t2d / embed_tokens / fc_norm"
    holds = {"llama": InLayout(("LlamaForCausalLMEagle3",)),
             "deepseek_mla": InLayout(("Eagle3DeepseekV2ForCausalLM",))}
    fields = hf_fields(
        aux_layer_ids=ConfigField(("eagle_config.eagle_aux_hidden_state_layer_ids",)),
        norm_before_fc=ConfigField(("eagle_config.norm_before_fc",)),
        num_aux_hidden_states=None, fc_norm=None, norm_output=None, norm_before_residual=None,
    )
    flags = frozenset({"norm_before_fc", "use_aux_hidden_state"})
    defaults = {"target_hidden_size": SameAs("hidden_size"), "num_aux_hidden_states": 3,
                "norm_before_fc": False, "use_aux_hidden_state": True}
    cannot_hold = (
        Capability(r"t2d", "derive", "ModelOpt's allow-list has no t2d; it is re-derived exactly from d2t"),
        Capability(r"embed_tokens\.weight", "drop", "ModelOpt's allow-list has no embed_tokens (engines use the target's)"),
        Capability(r"fc_norm\.\d+\.weight", "never", "ModelOpt's allow-list has no EAGLE-3.1 fc_norm"),
    )

    @classmethod
    def looks_like(cls, seen: Seen):
        config, names = seen.config, seen.names
        eagle_config = config.get("eagle_config")
        keys = set(eagle_config) & MODELOPT_EAGLE_KEYS if isinstance(eagle_config, dict) else set()
        if names and any(n.startswith("fc_norm.") for n in names):  # TorchSpec/Kimi configs carry the same keys
            return 0, []  # ModelOpt's allow-list has no fc_norm: an EAGLE-3.1 checkpoint is never its export
        if keys and names is None:
            return 50, [f"ModelOpt eagle_config keys {sorted(keys)}"]
        if keys and names and "fc.weight" in names and has_prefix(names, "layers."):
            return 50, [f"layers.N.* tensors with ModelOpt eagle_config keys {sorted(keys)}"]
        return 0, []
