"""NeMo Automodel's raw checkpoint: model.-prefixed names (lm_head, d2t, t2d unprefixed), LlamaEagle3DraftModel."""

from __future__ import annotations

from ..support.jsonio import JSONObject
from .base import DrafterRecipe, Producer, flags31
from . import register


@register
class Automodel(Producer):
    name = "automodel"
    embed_tokens = True

    @classmethod
    def config(cls, recipe: DrafterRecipe, decoder: JSONObject) -> JSONObject:
        d = recipe.dims
        return {"architectures": ["LlamaEagle3DraftModel"], **decoder, "draft_vocab_size": d.draft_vocab,
                "target_hidden_size": d.target_hidden, "num_aux_hidden_states": len(d.aux_ids), **flags31(recipe),
                "torch_dtype": recipe.dtype}

    @classmethod
    def stored_name(cls, canonical: str) -> str:
        return canonical if canonical.startswith("lm_head.") or canonical in ("d2t", "t2d") else "model." + canonical
