"""Writing a :class:`DrafterSpec` back out as a layout's config.json.

Split from ``formats/base.py`` (issue 26): the inverse of :mod:`eagleconv.formats.base.reading`.  Every synonym
path the layout lists is written, aux ids in the layout's numbering, unread keys carried back to the
decoder location, and the provenance stamp that lets detection recognise eagleconv's own output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import architectures
from ...spec.drafter import DrafterSpec
from ...io.dtypes import CONFIG_DTYPE_NAMES
from .fields import MISSING, get_path, set_path

if TYPE_CHECKING:
    from ...support.jsonio import JSONObject
    from . import Layout

def spec_values(layout: type[Layout], spec: DrafterSpec) -> JSONObject:
    """Canonical field values of ``spec`` as ``layout`` writes them (aux ids in its convention)."""
    ids = spec.aux.ids_as(layout.aux_convention_for(spec.architecture))
    v: JSONObject = {
        "model_type": layout.model_types.get(spec.model_type, spec.model_type),
        "hidden_size": spec.hidden_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "intermediate_size": spec.intermediate_size,
        "hidden_act": spec.hidden_act,
        "rms_norm_eps": None if "rms_norm_eps" in spec.defaulted else spec.rms_norm_eps,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "attention_bias": spec.attention_bias or None,  # written only when on: every engine defaults to off
        "mlp_bias": spec.mlp_bias or None,
        "dtype": CONFIG_DTYPE_NAMES.get(spec.dtype or ""),
        "draft_vocab_size": spec.draft_vocab_size,
        "target_hidden_size": spec.target_hidden_size,
        "num_aux_hidden_states": spec.aux.count,
        "aux_layer_ids": list(ids) if ids is not None else None,
        **spec.rope.stated,  # both spellings, equal (see _build_spec)
        **spec.flags.model_dump(),
    }
    # the family's own fields are written as they are: a null there is stated (MLA q_lora_rank: null = q_proj)
    return {**{k: val for k, val in v.items() if val is not None},
            **architectures.get(spec.architecture).config_values(spec)}


def write_config(layout: type[Layout], spec: DrafterSpec, provenance: JSONObject) -> JSONObject:
    """Render ``spec`` as ``layout``'s config.json (every synonym path the layout lists is written)."""
    config: JSONObject = {"architectures": list(layout.architectures[spec.architecture])}
    values = spec_values(layout, spec)
    for key, cf in layout.fields.items():
        if key in values:
            for path in cf.write_paths:
                set_path(config, path, values[key])
    prefix = layout.decoder_prefix()
    for rel, value in spec.extra.items():
        if get_path(config, prefix + rel) is MISSING:
            set_path(config, prefix + rel, value)
    for key, value in layout.extra_config(spec).items():
        config[key] = value
    config["eagleconv"] = provenance
    return config

