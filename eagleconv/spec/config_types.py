"""The JSON type each drafter config value must have: the engines' rules and transformers AutoConfig's.

Validation rules, moved out of ``formats/base.py`` (issue 26).  They sit below the layouts rather than in
:mod:`eagleconv.validation` because a layout's reader applies them while it reads a config
(:func:`eagleconv.formats.base.reading.type_problems`: a mistyped value is an EC005 error there, before any
spec is built), and ``unknown_keys`` asks them which fields are integers, flags or id lists.  Data and pure
functions over a config mapping; no layout, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from .. import architectures

if TYPE_CHECKING:
    from ..support.jsonio import JSONValue

# The fields that size a tensor: integers, and never defaulted silently (formats.base.reading notes each it derives).
SHAPE_FIELDS = (
    "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
    "vocab_size", "draft_vocab_size", "target_hidden_size", "num_aux_hidden_states",
)


# JSON types engines need; a "64" or 64.0 works in one engine and fails (or is coerced) in another.
INT_FIELDS = SHAPE_FIELDS + ("num_hidden_layers", "max_position_embeddings") + tuple(
    f for arch in architectures.ARCHITECTURES.values() for f in arch.config_fields if f not in SHAPE_FIELDS)
BOOL_FIELDS = ("fc_norm", "norm_before_fc", "norm_output", "norm_before_residual", "use_aux_hidden_state",
               "attention_bias", "mlp_bias")
INT_LIST_FIELDS = ("aux_layer_ids",)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# top-level keys every engine reads with a fixed JSON type: key -> (test, what it must be)
TOP_LEVEL_TYPES: dict[str, tuple[Callable[[object], bool], str]] = {
    "architectures": (_is_str_list, "a list of strings"),
    "model_type": (lambda v: isinstance(v, str), "a string"),
    "eagle_config": (lambda v: isinstance(v, dict), "an object"),
    "transformer_layer_config": (lambda v: isinstance(v, dict), "an object"),
    "speculators_config": (lambda v: isinstance(v, dict), "an object"),
}


def _is_float(value: object) -> bool:
    return isinstance(value, float)


def _is_int_or_none(value: object) -> bool:
    return value is None or _is_int(value)


# transformers' config classes are strict dataclasses (transformers 5): AutoConfig raises on a value of another
# JSON type, on a null where the class allows none, and on a float field written as an integer ("rms_norm_eps": 1).
# Every engine that reads a drafter config through AutoConfig then fails to load it.  key -> (test, must be).
# Found by the AutoConfig property in tests/test_properties.py; tests/io/test_parsers.py checks the dtype names
# against torch and AutoConfig.
TRANSFORMERS_MODEL_TYPES = frozenset(t for arch in architectures.ARCHITECTURES.values() for t in arch.transformers_model_types)
HEADS_DIVIDE_HIDDEN = frozenset(t for arch in architectures.ARCHITECTURES.values()
                                for t in arch.transformers_heads_divide_hidden)
TORCH_DTYPE_NAMES = frozenset({
    "float16", "half", "bfloat16", "float32", "float", "float64", "double", "complex64", "cfloat", "complex128",
    "cdouble", "uint8", "int8", "int16", "short", "int32", "int", "int64", "long", "uint16", "uint32", "uint64",
    "bool", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"})
LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention"})  # what drafters could hold
_TORCH_DTYPE = (lambda v: v is None or (isinstance(v, str) and v in TORCH_DTYPE_NAMES),
                'null or a torch dtype name such as "bfloat16"')
TRANSFORMERS_TYPES: dict[str, tuple[Callable[[object], bool], str]] = {
    **{key: (lambda v: isinstance(v, bool), "true or false") for key in (
        "tie_word_embeddings", "attention_bias", "mlp_bias", "use_cache", "use_sliding_window")},
    **{key: (_is_int, "an integer") for key in ("max_position_embeddings", "max_window_layers")},
    **{key: (_is_float, "a number written with a decimal point or an exponent") for key in (
        "rms_norm_eps", "initializer_range")},
    **{key: (_is_int_or_none, "null or an integer") for key in (
        "bos_token_id", "pad_token_id", "pretraining_tp", "sliding_window")},
    "eos_token_id": (lambda v: _is_int_or_none(v) or (isinstance(v, list) and all(_is_int(i) for i in v)),
                     "null, an integer or a list of integers"),
    "attention_dropout": (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
    "hidden_act": (lambda v: isinstance(v, str), "a string"),
    "id2label": (lambda v: v is None or isinstance(v, dict), "null or an object"),
    "layer_types": (lambda v: v is None or (isinstance(v, list) and all(t in LAYER_TYPES for t in v)),
                    f"null or a list of {', '.join(sorted(LAYER_TYPES))}"),
    "torch_dtype": _TORCH_DTYPE,
    "dtype": _TORCH_DTYPE,
}


def transformers_type_problems(config: Mapping[str, JSONValue]) -> list[tuple[str, str]]:
    """(path, message) for values transformers' AutoConfig refuses, when it is the reader of this config."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in TRANSFORMERS_MODEL_TYPES \
            or "speculators_model_type" in config:
        return []
    problems = []
    for key, (test, must_be) in TRANSFORMERS_TYPES.items():
        if key in config and not test(config[key]):
            value = config[key]
            problems.append((key, f"config does not describe a valid drafter: {key} is {json.dumps(value)} "
                             f"({type(value).__name__}), not {must_be}; transformers' AutoConfig refuses it, so "
                             "every engine that loads the config through transformers fails"))
    head_dim = config.get("head_dim")
    if isinstance(head_dim, int) and _is_int(head_dim) and head_dim % 2:
        problems.append(("head_dim", f"config does not describe a valid drafter: head_dim is {head_dim}, odd; "
                         "transformers' AutoConfig refuses it (RoPE needs an even rotary dimension)"))
    layer_types, layers = config.get("layer_types"), config.get("num_hidden_layers")
    if isinstance(layer_types, list) and _is_int(layers) and len(layer_types) != layers:
        problems.append(("layer_types", f"config does not describe a valid drafter: layer_types lists "
                         f"{len(layer_types)} layer(s) where num_hidden_layers is {layers}; transformers' "
                         "AutoConfig refuses it"))
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if model_type in HEADS_DIVIDE_HIDDEN and isinstance(hidden, int) and isinstance(heads, int) \
            and _is_int(hidden) and _is_int(heads) and heads > 0 and hidden % heads:
        problems.append(("num_attention_heads", f"config does not describe a valid drafter: hidden_size {hidden} is "
                         f"not a multiple of num_attention_heads {heads}; transformers 5's {model_type} config "
                         "refuses it (even beside an explicit head_dim), so every engine that loads the config "
                         "through transformers fails"))
    return problems


def wanted(key: str, value: object) -> str | None:
    """What a canonical field's value must be, when ``value`` is not that; None when it is fine."""
    if key in INT_FIELDS and not _is_int(value):
        return "an integer"
    if key in BOOL_FIELDS and not isinstance(value, bool):
        return "true or false"
    if key in INT_LIST_FIELDS and not (isinstance(value, list) and all(_is_int(v) for v in value)):
        return "a list of integers"
    if key == "model_type" and not isinstance(value, str):
        return "a string"
    return None
