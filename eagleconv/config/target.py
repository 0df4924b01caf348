"""The target model a drafter drafts for (speculators calls it the verifier), read from its config.json.

Read from the JSON itself, never through transformers: importing transformers costs seconds (6-20x the rest of
``validate --target``, issue 35), and three numbers need no config class.  Only the three numbers validation and
the forward need are kept: hidden size, vocabulary and layer count (multimodal targets: the text model's), each
under its own name or one of the older spellings transformers' ``attribute_map`` aliases to it (GPT-2's
``n_embd``), never a class default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from ..support.bounds import ModelDims, check_config
from ..errors import FormatError, UnsafeInputError
from ..support.jsonio import load_json

# Typed fields of a target config (its text_config for a multimodal one), checked before any reader uses them:
# counts are JSON integers >= 1 (not "4", 4.7 or true), eps and theta finite numbers > 0.
TARGET_COUNTS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "max_position_embeddings")
TARGET_POSITIVE_FLOATS = ("rms_norm_eps", "layer_norm_eps", "rope_theta")


@dataclass(frozen=True)
class TargetInfo:
    path: str
    model_type: str | None
    hidden_size: int
    vocab_size: int
    num_hidden_layers: int


# The spellings transformers' config classes alias to each field (their ``attribute_map``s: GPT-2, GPT-J, BLOOM,
# MPT, T5-style), read in this order when the field itself is absent.
ALIASES: dict[str, tuple[str, ...]] = {
    "hidden_size": ("n_embd", "d_model", "n_embed"),
    "num_hidden_layers": ("n_layer", "num_layers", "n_layers"),
}


def _field(config: Mapping[str, object], key: str) -> object:
    """``key`` from a config, or the first of its aliases that is present (None when none is)."""
    for name in (key, *ALIASES.get(key, ())):
        if config.get(name) is not None:
            return config[name]
    return None


def read_target_config(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """The one reader of a target's config.json (simulate, validate --forward, upgrade --target, --target checks):
    the strict JSON reader (duplicate keys, limits), the size bounds (eagleconv.support.bounds) and the typed fields
    above, each refused in one line naming the file and the field.  Returns the file and the config."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise UnsafeInputError("no target config.json here", path)
    raw = load_json(file)  # strict: duplicate keys are refused before transformers sees the file
    if not isinstance(raw, dict):
        raise FormatError("target config is not a JSON object", file)
    check_config(raw, file)
    text_config = raw.get("text_config")
    text, where = (text_config, "text_config.") if isinstance(text_config, dict) else (raw, "")
    for key in TARGET_COUNTS:
        value = text.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise FormatError(f"target config: {where}{key} is {value!r}, not a positive integer", file)
    for key in TARGET_POSITIVE_FLOATS:
        value = text.get(key)
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)
                                  or not math.isfinite(value) or value <= 0):
            raise FormatError(f"target config: {where}{key} is {value!r}, not a finite number > 0", file)
    heads, kv = text.get("num_attention_heads"), text.get("num_key_value_heads")
    if heads is not None and kv is not None and heads % kv:
        raise FormatError(f"target config: {where}num_attention_heads {heads} is not a multiple of "
                          f"num_key_value_heads {kv}", file)
    hidden = text.get("hidden_size")
    if heads is not None and hidden is not None and text.get("head_dim") is None and hidden % heads:
        raise FormatError(f"target config: {where}hidden_size {hidden} is not a multiple of num_attention_heads "
                          f"{heads} (and no head_dim is stated)", file)
    return file, raw


def load_target(path: str | Path) -> TargetInfo:
    """Read a target model's config (a directory holding config.json, or the file itself)."""
    path = Path(path)
    file, raw = read_target_config(path)
    text_config = raw.get("text_config")
    text: dict[str, object] = text_config if isinstance(text_config, dict) else raw

    def number(key: str) -> int:
        value = _field(text, key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise FormatError(f"target config has no integer {key}", file)
        return value

    return TargetInfo(str(path), raw.get("model_type"), number("hidden_size"), number("vocab_size"),
                      number("num_hidden_layers"))


def check_target_weights(directory: str | Path, raw: dict[str, Any]) -> None:
    """The target's index and shards through the strict readers (every file inside the directory, the header
    pre-parser), and the shapes that size the model agreeing with its config: a mismatch is one line naming the
    field here, not transformers' ``ignore_mismatched_sizes`` error or a shape error mid-forward."""
    from ..io.reader import open_checkpoint

    directory = Path(directory)
    store = open_checkpoint(directory)
    try:
        text = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
        file = directory / "config.json"
        vocab, hidden, heads = text.get("vocab_size"), text.get("hidden_size"), text.get("num_attention_heads")
        kv = text.get("num_key_value_heads") or heads
        head_dim = text.get("head_dim") or (hidden // heads if hidden and heads else None)

        def shape(suffix: str) -> tuple[str, tuple[int, ...]] | None:
            for name, info in store.tensors.items():
                if name == suffix or name.endswith("." + suffix):
                    return name, tuple(info.shape)
            return None

        for suffix, want, fields in (
                ("embed_tokens.weight", (vocab, hidden), "vocab_size x hidden_size"),
                ("lm_head.weight", (vocab, hidden), "vocab_size x hidden_size"),
                ("layers.0.self_attn.k_proj.weight", (kv * head_dim if kv and head_dim else None, hidden),
                 "num_key_value_heads x head_dim, hidden_size"),
                ("layers.0.self_attn.v_proj.weight", (kv * head_dim if kv and head_dim else None, hidden),
                 "num_key_value_heads x head_dim, hidden_size")):
            found = shape(suffix)
            if found is None or None in want:
                continue
            name, got = found
            if got != want:
                raise FormatError(f"target config: {fields} is {list(want)} but {name} is {list(got)} in "
                                  f"{store.tensors[name].file}", file)
    finally:
        store.close()


def target_dims(path: str | Path) -> ModelDims:
    """What sizes the target's KV cache and logits (eagleconv.support.bounds.ModelDims), from its checked config."""
    file, raw = read_target_config(path)
    text = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw

    def count(key: str, default: int) -> int:
        value = text.get(key)
        return value if isinstance(value, int) else default

    hidden, heads = count("hidden_size", 1), count("num_attention_heads", 1)
    return ModelDims(str(file), count("num_hidden_layers", 1), count("num_key_value_heads", heads),
                     count("head_dim", max(1, hidden // heads)), count("vocab_size", 1), hidden,
                     text.get("max_position_embeddings") if isinstance(text.get("max_position_embeddings"), int)
                     else None)
