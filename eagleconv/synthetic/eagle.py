"""SafeAILab EAGLE's drafter: the hand-copied Llama config template (no aux ids, no head_dim), midlayer.* names,
pytorch_model.bin."""

from __future__ import annotations

from ..support.jsonio import JSONObject
from .base import DrafterRecipe, Producer
from . import register


@register
class Eagle(Producer):
    name = "eagle"
    cannot_write = {"eagle31": "SafeAILab EAGLE has no EAGLE-3.1 switch (fc_norm / norm_output)"}
    pickle = True

    @classmethod
    def config(cls, recipe: DrafterRecipe, decoder: JSONObject) -> JSONObject:
        d = recipe.dims
        decoder.pop("head_dim", None)
        return {"architectures": ["LlamaForCausalLM"], **decoder, "draft_vocab_size": d.draft_vocab,
                "target_hidden_size": d.target_hidden, "torch_dtype": recipe.dtype}

    @classmethod
    def stored_name(cls, canonical: str) -> str:
        return midlayer(canonical)


def midlayer(canonical: str) -> str:
    """SafeAILab's (and SpecForge's) one decoder layer is ``midlayer.*``."""
    return "midlayer." + canonical[len("layers.0."):] if canonical.startswith("layers.0.") else canonical
