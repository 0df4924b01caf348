"""TorchSpec's HF export (``tools/convert_to_hf.py``): ``layers.0.*`` keys, version-stamped.

Aux ids live in ``eagle_config`` and K in ``num_aux_hidden_states``.  TorchSpec's
``--vllm`` export adds +1 to the ids of kimi_k2 (MLA) drafters only, so the MLA
architecture states ``layer_output`` numbering for this layout; others are read as vLLM's.
"""

from __future__ import annotations

from ..architectures.base import InLayout
from . import register
from .base import Seen, Capability, Layout
from .base.fields import ConfigField, SameAs, hf_fields


@register
class TorchSpecLayout(Layout):
    name = "torchspec"
    producer = "TorchSpec (lightseekorg)"
    description = "layers.0.* keys, _torchspec_version stamp, eagle_config ids, fc_norm / norm_output"
    holds = {
        "llama": InLayout(("LlamaForCausalLMEagle3",)),
        "phi3": InLayout(("Phi3ForCausalLMEagle3",)),
        # TorchSpec's --vllm export adds +1 to the aux ids of kimi_k2 (MLA) drafters only: layer_output numbering
        "deepseek_mla": InLayout(("Eagle3DeepseekV2ForCausalLM",), aux_convention="layer_output"),
    }
    fields = hf_fields(
        aux_layer_ids=ConfigField(("eagle_config.eagle_aux_hidden_state_layer_ids",)),
        norm_before_fc=None, norm_before_residual=None,
    )
    flags = frozenset({"fc_norm", "norm_output", "use_aux_hidden_state"})
    defaults = {"target_hidden_size": SameAs("hidden_size"), "num_aux_hidden_states": 3,
                "fc_norm": False, "norm_output": False}
    cannot_hold = (Capability(r"input_norm\.weight", "never", "TorchSpec drafters have no norm_before_fc input_norm"),)
    meta_keys = Layout.meta_keys | {"_torchspec_version"}

    @classmethod
    def looks_like(cls, seen: Seen):
        config = seen.config
        if "_torchspec_version" in config:
            return 100, [f"config.json _torchspec_version = {config['_torchspec_version']!r}"]
        if "torchspec_version" in seen.metadata:
            return 100, [f"safetensors metadata torchspec_version = {seen.metadata['torchspec_version']!r}"]
        return 0, []
