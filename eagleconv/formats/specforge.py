"""SpecForge's SGLang export (``specforge export --to sglang``).

``midlayer.*`` keys, exactly three aux states (``fc_norm`` is built by
``chunk(3)``), no embeddings (the exporter drops every ``embed`` key and SGLang
uses the target's), and ``t2d``/``d2t`` always present (the exporter asserts
them).  Aux ids, when a config carries them, use SpecForge's ``layer_output``
numbering (default [1, L//2-1, L-4]).  Before SpecForge PR #879,
``norm_output: true`` meant plain EAGLE-3 feedback; validation reports that.
"""

from __future__ import annotations

from ..architectures.base import InLayout
from . import register
from .base import Seen, Capability, Layout, architectures_of, has_prefix
from .base.fields import ConfigField, SameAs, hf_fields
from .base.renames import Rename


@register
class SpecForgeLayout(Layout):
    name = "specforge"
    producer = "SpecForge (sgl-project)"
    description = "midlayer.* keys, LlamaForCausalLMEagle3, t2d+d2t, no embed_tokens, exactly 3 aux states"
    holds = {"llama": InLayout(("LlamaForCausalLMEagle3",))}
    renames = (Rename("midlayer.{rest}", "layers.0.{rest}"), Rename("{rest}", "{rest}"))
    fields = hf_fields(
        aux_layer_ids=ConfigField(("eagle_config.eagle_aux_hidden_state_layer_ids",)),
        num_aux_hidden_states=None, norm_before_fc=None, norm_before_residual=None, use_aux_hidden_state=None,
    )
    aux_convention = "layer_output"
    flags = frozenset({"fc_norm", "norm_output"})
    fixed_aux_count = 3
    max_layers = 1
    defaults = {"target_hidden_size": SameAs("hidden_size"), "fc_norm": False, "norm_output": False}
    cannot_hold = (
        Capability(r"embed_tokens\.weight", "drop", "SpecForge's SGLang export carries no embeddings (SGLang uses the target's)"),
        Capability(r"input_norm\.weight", "never", "SpecForge EAGLE-3 drafters have no norm_before_fc input_norm"),
    )
    requires = ("d2t", "t2d", "lm_head.weight")

    @classmethod
    def looks_like(cls, seen: Seen):
        config, names = seen.config, seen.names
        if names is None:  # a SpecForge config alone looks like vLLM's; --from specforge says otherwise
            return 0, []
        if "fc.weight" in names and has_prefix(names, "midlayer."):
            if "LlamaForCausalLMEagle3" in architectures_of(config):
                return 30, ["midlayer.* tensors with architectures LlamaForCausalLMEagle3"]
            return 15, ["midlayer.* tensors in safetensors"]
        return 0, []
