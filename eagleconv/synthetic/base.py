"""What a producer's synthetic recipe is: the data and the one config function that write a tiny drafter its way.

A producer's recipe is one module of this package with one :class:`Producer` subclass registered by ``@register``
(modules are discovered from the directory, as layouts and architectures are; a test or plugin registers its own
with :func:`eagleconv.synthetic.register`).  It writes what that producer's exporter writes, *independently* of
the layout tables in :mod:`eagleconv.formats`, so tests that read its drafters check the tables against the
producers rather than against themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from .. import architectures
from ..architectures.base import TinyDims
from ..support.jsonio import JSONObject, JSONValue


@dataclass(frozen=True)
class DrafterRecipe:
    """What to build.  ``eagle31`` turns on fc_norm + norm_output (the paper's EAGLE-3.1)."""

    producer: str = "specforge"
    architecture: str = "llama"  # a registered architecture (eagleconv.architectures.names())
    eagle31: bool = False
    norm_before_fc: bool = False
    embed_tokens: bool | None = None  # None: what the producer ships by default
    layers: int = 1
    dims: TinyDims = field(default_factory=TinyDims)
    dtype: str = "bfloat16"
    seed: int = 0


class Producer:
    """Base class of every producer's recipe.  Subclasses set data and write :meth:`config`."""

    name: ClassVar[str]  # the layout's name (``eagleconv.formats``) this producer writes
    embed_tokens: ClassVar[bool] = False  # whether it ships embed_tokens by default
    without: ClassVar[tuple[str, ...]] = ()  # canonical tensors it never stores
    # what its exporter cannot emit, by recipe switch ("eagle31"), and why: the recipe is refused, not faked
    cannot_write: ClassVar[dict[str, str]] = {}
    pickle: ClassVar[bool] = False  # pytorch_model.bin (torch.save) instead of model.safetensors
    metadata: ClassVar[dict[str, str]] = {}  # safetensors header metadata beside {"format": "pt"}
    # architecture name -> the config ``architectures[0]`` it writes for that family, when not the family's own
    # (``Architecture.synthetic_architecture``, which a family written after the producer keys by producer)
    classes: ClassVar[dict[str, str]] = {}
    # architecture name -> what it writes differently for that family: "model_type", "eagle_config" entries,
    # "layer_output_ids" (numbers aux ids as layer outputs); a later family says it in ``synthetic_overrides``
    overrides: ClassVar[dict[str, dict[str, Any]]] = {}

    @classmethod
    def config(cls, recipe: DrafterRecipe, decoder: JSONObject) -> JSONObject:
        """config.json as the producer writes it, around the ``decoder`` fields (:func:`decoder_config`)."""
        raise NotImplementedError

    @classmethod
    def stored_name(cls, canonical: str) -> str:
        """The name the producer stores a canonical tensor under."""
        return canonical

    # -- what the config functions share ------------------------------------------------
    @classmethod
    def class_name(cls, recipe: DrafterRecipe) -> str:
        arch = architectures.get(recipe.architecture)
        named = cls.classes.get(arch.name) or arch.synthetic_architecture.get(cls.name)
        return named or arch.synthetic_architecture["*"]

    @classmethod
    def overrides_for(cls, recipe: DrafterRecipe) -> dict[str, Any]:
        arch = architectures.get(recipe.architecture)
        return cls.overrides.get(arch.name) or arch.synthetic_overrides.get(cls.name, {})


def decoder_config(recipe: DrafterRecipe, producer: type[Producer]) -> JSONObject:
    """The decoder fields every producer writes (the family adds its own), with the producer's model_type."""
    d = recipe.dims
    arch = architectures.get(recipe.architecture)
    cfg: JSONObject = {
        "model_type": arch.synthetic_model_type,
        "hidden_size": d.hidden,
        "intermediate_size": d.intermediate,
        "num_attention_heads": d.heads,
        "num_hidden_layers": recipe.layers,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-05,
        "vocab_size": d.vocab,
        "max_position_embeddings": 4096,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
    }
    cfg.update(arch.synthetic_config(d))
    overrides = producer.overrides_for(recipe)
    if "model_type" in overrides:
        cfg["model_type"] = overrides["model_type"]
    return cfg


def flags31(recipe: DrafterRecipe) -> JSONObject:
    return {"fc_norm": recipe.eagle31, "norm_output": recipe.eagle31}


def layer_output_ids(recipe: DrafterRecipe) -> list[JSONValue]:
    """The recipe's aux ids (hidden-state-index numbering) as layer-output numbers (one less)."""
    return [i - 1 for i in recipe.dims.aux_ids]
