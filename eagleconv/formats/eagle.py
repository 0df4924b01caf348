"""SafeAILab/EAGLE, the reference implementation (``eagle/traineagle3``).

Training writes a DeepSpeed ``pytorch_model.bin`` with ``midlayer.*`` keys and
without the frozen embedding; ``config.json`` is a hand-copied template with
``architectures: ["LlamaForCausalLM"]``.  fc is hard-coded to 3 x hidden, and
no EAGLE-3.1 switch exists.  eagleconv writes this layout as
``model.safetensors``, which SafeAILab's loader also accepts.
"""

from __future__ import annotations

from ..architectures.base import InLayout
from . import register
from .base import Seen, Capability, Layout, architectures_of, has_prefix
from .base.renames import Rename
from .base.fields import SameAs, hf_fields


@register
class EagleLayout(Layout):
    name = "eagle"
    producer = "SafeAILab/EAGLE"
    description = "midlayer.* keys, pytorch_model.bin, LlamaForCausalLM, embeddings taken from the target"
    holds = {"llama": InLayout(("LlamaForCausalLM",))}
    renames = (Rename("midlayer.{rest}", "layers.0.{rest}"), Rename("{rest}", "{rest}"))
    fields = hf_fields(num_aux_hidden_states=None, norm_before_fc=None, norm_before_residual=None,
                       use_aux_hidden_state=None, fc_norm=None, norm_output=None)
    flags = frozenset()
    fixed_aux_count = 3
    max_layers = 1
    defaults = {"target_hidden_size": SameAs("hidden_size")}
    cannot_hold = (
        Capability(r"fc_norm\.\d+\.weight", "never", "SafeAILab EAGLE has no EAGLE-3.1 fc_norm"),
        Capability(r"input_norm\.weight", "never", "SafeAILab EAGLE has no norm_before_fc"),
    )

    @classmethod
    def looks_like(cls, seen: Seen):
        config, names = seen.config, seen.names
        if names is None:
            found = architectures_of(config) == ["LlamaForCausalLM"]
            return (25, ["architectures LlamaForCausalLM (SafeAILab template)"]) if found else (0, [])
        if "fc.weight" in names and has_prefix(names, "midlayer."):
            if seen.weights_kind == "pickle":
                return 30, ["midlayer.* tensors in a pytorch_model.bin pickle"]
            if architectures_of(config) == ["LlamaForCausalLM"]:
                return 25, ["midlayer.* tensors with architectures LlamaForCausalLM (SafeAILab template)"]
        return 0, []
