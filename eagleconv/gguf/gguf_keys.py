"""The drafter's keys in llama.cpp's draft GGUF (architecture ``eagle3``), read into the HF-style config the
GGUF layout's fields read (:func:`config_from_kv`), and written by :mod:`~eagleconv.gguf.gguf_output`.

Here, beside the GGUF reader, so that opening a GGUF file yields its config with nothing handed down from above
(issue 34: the ``io.hooks.gguf_config`` hook is gone); the layout (:mod:`eagleconv.formats.gguf`) reads the config.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..errors import FormatError, UnsafeInputError
from ..support.bounds import check_config

ARCH = "eagle3"

# HF config field -> GGUF key ({arch} is ``eagle3``), as llama.cpp's converter writes them.
KEYS: dict[str, str] = {
    "max_position_embeddings": "{arch}.context_length",
    "hidden_size": "{arch}.embedding_length",
    "num_hidden_layers": "{arch}.block_count",
    "intermediate_size": "{arch}.feed_forward_length",
    "num_attention_heads": "{arch}.attention.head_count",
    "num_key_value_heads": "{arch}.attention.head_count_kv",
    "rope_theta": "{arch}.rope.freq_base",
    "rms_norm_eps": "{arch}.attention.layer_norm_rms_epsilon",
    "head_dim": "{arch}.attention.key_length",
    "vocab_size": "{arch}.vocab_size",
    "target_hidden_size": "{arch}.target_hidden_size",
    "eagle_aux_hidden_state_layer_ids": "{arch}.target_layers",
    "norm_before_residual": "{arch}.norm_before_residual",
    "norm_before_fc": "{arch}.norm_before_fc",
}
# Keys the converter writes that restate another (checked equal on reading, never carried).
RESTATED: dict[str, str] = {"{arch}.attention.value_length": "head_dim", "{arch}.rope.dimension_count": "head_dim"}


def gguf_key(template: str) -> str:
    return template.format(arch=ARCH)


def config_from_kv(kv: Mapping[str, Any], tensors: Mapping[str, Any]) -> dict[str, Any]:
    """A GGUF's metadata as the HF-style config the layout's fields read.

    Keys outside the table and the tokenizer are kept under ``gguf_metadata`` (reported when a
    conversion drops them); ``draft_vocab_size`` is d2t's length, else the target's vocab (llama.cpp's rule).
    """
    arch = kv.get("general.architecture")
    config: dict[str, Any] = {"gguf_architecture": arch, "model_type": "llama"}
    if arch != ARCH:
        raise FormatError(f"general.architecture is {arch!r}: eagleconv reads llama.cpp's EAGLE-3 draft GGUFs "
                          f"(general.architecture = {ARCH!r}); a target model's GGUF is what --target takes")
    known = {gguf_key(k) for k in KEYS.values()} | {gguf_key(k) for k in RESTATED}
    for field, template in KEYS.items():
        key = gguf_key(template)
        if key in kv:
            value = kv[key]
            config[field] = list(value) if isinstance(value, list | tuple) else value
    for template, field in RESTATED.items():
        key = gguf_key(template)
        if key in kv and field in config and kv[key] != config[field]:
            config.setdefault("gguf_metadata", {})[key] = kv[key]
    if "d2t" in tensors:
        config["draft_vocab_size"] = tensors["d2t"].shape[0]
    elif "output.weight" in tensors:
        config["draft_vocab_size"] = tensors["output.weight"].shape[0]
    elif "vocab_size" in config:
        config["draft_vocab_size"] = config["vocab_size"]
    extra = {k: v for k, v in kv.items() if k.startswith(f"{ARCH}.") and k not in known}
    if extra:
        config.setdefault("gguf_metadata", {}).update(extra)
    check_values(kv, config)
    return config


# Fields the loader sizes something from (a positive integer each), and the floats it computes with (finite, > 0).
COUNTS = ("max_position_embeddings", "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
          "num_key_value_heads", "head_dim", "vocab_size", "target_hidden_size")
POSITIVE_FLOATS = ("rope_theta", "rms_norm_eps")


def check_values(kv: Mapping[str, Any], config: Mapping[str, Any]) -> None:
    """The metadata held to config.json's rules (docs/security.md, "GGUF files"): counts are positive integers
    within eagleconv.support.bounds' limits (not BOOL or FLOAT values), every float is finite (JSON cannot state inf;
    a GGUF can), and ``target_layers`` are layer ids from 0.  A refusal is one UnsafeInputError naming the key."""
    names = {field: gguf_key(template) for field, template in KEYS.items()}
    for key, value in kv.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise UnsafeInputError(f"{key} is {value}, not a finite number")
    for field in COUNTS:
        value = config.get(field)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise UnsafeInputError(f"{names[field]} is {value!r}, not a positive integer")
    for field in POSITIVE_FLOATS:
        value = config.get(field)
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool) or value <= 0):
            raise UnsafeInputError(f"{names[field]} is {value!r}, not a number > 0")
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    if ids is not None:
        bad = next((i for i in ids if not isinstance(i, int) or isinstance(i, bool) or i < 0), None) \
            if isinstance(ids, list) else ids
        if bad is not None:
            raise UnsafeInputError(f"{names['eagle_aux_hidden_state_layer_ids']} holds {bad!r}: llama.cpp's target "
                                   "layer ids are integers from 0")
    check_config(config, None, spelled=names)
