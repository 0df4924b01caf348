"""llama.cpp's EAGLE-3 draft GGUF (architecture ``eagle3``, llama.cpp b11434, ``src/models/eagle3.cpp``).

One file: metadata keys plus tensors.  The table below is the whole layout: canonical tensor name <-> GGUF
tensor name (llama.cpp's converter, ``conversion/llama.py``), and canonical config field <-> GGUF key.
Reading a GGUF turns the keys into an HF-style config (:func:`config_from_kv`), so the rest of eagleconv
sees a drafter like any other; writing is ``eagleconv.gguf.gguf_output``.

What llama.cpp cannot hold is refused with the way out: per-layer ``fc_norm`` and ``norm_output``
(EAGLE-3.1), an aux count other than 3, a decoder other than llama's (MLA, Qwen3's q/k norms, Phi-3's
fused projections).  Its ``norm_before_fc`` is one RMSNorm over the concatenated features
(``enc.output_norm.weight``).  Aux ids are llama.cpp's ``eagle3.target_layers``: the *input* of target
layer id (``llama_set_embeddings_layer_inp``), vLLM's numbering.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..support.bounds import check_config
from ..errors import FormatError, UnsafeInputError
from . import register
from .base import Capability, Layout, Seen
from .base.fields import ConfigField, hf_fields
from .base.renames import Rename
from ..architectures.base import InLayout

ARCH = "eagle3"
LLAMACPP_BUILD = "b11434"

TENSORS: tuple[tuple[str, str], ...] = (  # GGUF name, canonical name
    ("token_embd.weight", "embed_tokens.weight"),
    ("fc.weight", "fc.weight"),
    ("enc.output_norm.weight", "input_norm.weight"),
    ("blk.{n}.attn_norm.weight", "layers.{n}.input_layernorm.weight"),
    ("blk.{n}.attn_norm_2.weight", "layers.{n}.hidden_norm.weight"),
    ("blk.{n}.attn_q.weight", "layers.{n}.self_attn.q_proj.weight"),
    ("blk.{n}.attn_k.weight", "layers.{n}.self_attn.k_proj.weight"),
    ("blk.{n}.attn_v.weight", "layers.{n}.self_attn.v_proj.weight"),
    ("blk.{n}.attn_output.weight", "layers.{n}.self_attn.o_proj.weight"),
    ("blk.{n}.ffn_norm.weight", "layers.{n}.post_attention_layernorm.weight"),
    ("blk.{n}.ffn_gate.weight", "layers.{n}.mlp.gate_proj.weight"),
    ("blk.{n}.ffn_up.weight", "layers.{n}.mlp.up_proj.weight"),
    ("blk.{n}.ffn_down.weight", "layers.{n}.mlp.down_proj.weight"),
    ("output_norm.weight", "norm.weight"),
    ("output.weight", "lm_head.weight"),
    ("d2t", "d2t"),
)

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

# The way out, said once per refusal (conversion.plan.refusal groups the problems it answers).  downgrade and upgrade
# name the target GGUF --gguf-target: their --target is the HF model they measure the change on.
WAY_OUT_31 = ("llama.cpp has no per-layer fc_norm or norm_output (EAGLE-3.1); next: `eagleconv downgrade SRC DST "
              "--to gguf --gguf-target TARGET --allow-lossy` (--gguf-target: downgrade's name for convert's --target; "
              "it measures what removing them costs), or from the EAGLE-3 original `eagleconv upgrade EAGLE3_SRC DST "
              "--style norm_before_fc --no-norm-output --to gguf --gguf-target TARGET` (llama.cpp's one-norm 3.1 style)")


@register
class GgufLayout(Layout):
    name = "gguf"
    producer = f"llama.cpp {LLAMACPP_BUILD} (convert_hf_to_gguf.py)"
    description = "one .gguf file, architecture eagle3: blk.0.*, fc, enc.output_norm, d2t as absolute target ids"
    holds = {"llama": InLayout(("eagle3",))}  # llama.cpp's general.architecture
    renames = tuple(Rename(gguf_name, canonical) for gguf_name, canonical in TENSORS)
    fields = hf_fields(aux_layer_ids=ConfigField(("eagle_aux_hidden_state_layer_ids",)),
                       norm_before_fc=ConfigField(("norm_before_fc",)), use_aux_hidden_state=None,
                       num_aux_hidden_states=None, fc_norm=None, norm_output=None)
    aux_convention = "hidden_state_index"
    flags = frozenset({"norm_before_fc", "norm_before_residual"})
    fixed_aux_count = 3
    max_layers = 1
    defaults = {"norm_before_residual": False, "norm_before_fc": False, "fc_norm": False, "norm_output": False,
                "use_aux_hidden_state": True}
    cannot_hold = (
        Capability("t2d", "derive", "llama.cpp reads no t2d (it is d2t's inverse)"),
        Capability(r"fc_norm\.\d+\.weight", "never", WAY_OUT_31),
        Capability(r"fc\.bias", "never", "llama.cpp's eagle3 fc has no bias"),
        Capability(r"layers\.\d+\.(?:self_attn|mlp)\..*\.bias", "never", "llama.cpp's eagle3 layer has no biases"),
    )
    requires = ()
    needs_target = True
    meta_keys = Layout.meta_keys | {"gguf_architecture"}
    # Way out for what _compat_problems finds, by flag or limit
    way_out = {
        "fc_norm": WAY_OUT_31, "norm_output": WAY_OUT_31,
        "aux_count": "llama.cpp's eagle3 reads exactly 3 target layers (eagle3.target_layers); a drafter trained on "
                     "another count cannot be served by it",
        "architecture": "llama.cpp's eagle3 graph is a llama decoder layer (no MLA, no q/k norms, no fused "
                        "projections); serve this drafter with vLLM or SGLang",
    }

    @classmethod
    def looks_like(cls, seen: Seen):
        if seen.weights_kind == "gguf":
            arch = seen.config.get("gguf_architecture")
            if arch == ARCH:
                return 1000, ["a GGUF file with general.architecture = 'eagle3'"]
            return 0, []
        return 0, []

    @classmethod
    def requires_for(cls, spec):
        # a compressed draft vocab needs d2t: without it llama.cpp takes the draft vocab to be the target's
        return ("d2t",) if spec.compressed_vocab else ()


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
