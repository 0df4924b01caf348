"""Canonical tensor names and the shapes a :class:`DrafterSpec` implies for them.

The attention and MLP tensors of each decoder family are its architecture
module's (:mod:`eagleconv.architectures`); the tensors every EAGLE-3 drafter
shares are here.  Canonical names are vLLM's on-disk names (no ``model.`` prefix, ``layers.N.*``
rather than ``midlayer.*``).  ``CANONICAL_NAME`` is the allow-list: a layout
rule that produces anything else is an unmapped tensor.
"""

from __future__ import annotations

import re

from ..architectures.base import Expected
from .drafter import DrafterSpec

from .. import architectures

# Attention and MLP modules are the architectures' (each module lists its own); the rest is shared by every drafter.
_ATTN = "(" + "|".join(sorted({m for a in architectures.ARCHITECTURES.values() for m in a.attention_modules})) + ")"
_MLP = "(?:" + "|".join(sorted({m for a in architectures.ARCHITECTURES.values() for m in a.mlp_modules})) + ")"
CANONICAL_NAME = re.compile(
    r"^(?:embed_tokens\.weight|fc\.(?:weight|bias)|input_norm\.weight|fc_norm\.\d+\.weight|norm\.weight"
    r"|lm_head\.weight|d2t|t2d"
    r"|layers\.\d+\.(?:input_layernorm|hidden_norm|post_attention_layernorm)\.weight"
    rf"|layers\.\d+\.self_attn\.{_ATTN}\.(?:weight|bias)"
    rf"|layers\.\d+\.mlp\.{_MLP}\.(?:weight|bias)"
    r"|layers\.\d+\.self_attn\.rotary_emb\.(?:inv_freq|cos_cached|sin_cached))$"
)
# RoPE buffers some trainers save beside the parameters: each is recomputed from the rope config by every reader
# (transformers, vLLM, llama.cpp's converter skips ``.rotary_emb.inv_freq``), so they are read, never carried, and
# every conversion reports dropping them (issue 32)
BUFFER_NAME = re.compile(r"^layers\.\d+\.self_attn\.rotary_emb\.(?:inv_freq|cos_cached|sin_cached)$")

LAYER_NAME = re.compile(r"^layers\.(\d+)\.")
FC_NORM_NAME = re.compile(r"^fc_norm\.(\d+)\.weight$")


def layer_indices(names) -> list[int]:
    """Decoder layer indices present among canonical tensor names."""
    return sorted({int(m.group(1)) for n in names if (m := LAYER_NAME.match(n))})


def expected_tensors(spec: DrafterSpec, num_layers: int | None = None) -> dict[str, Expected]:
    """Every canonical tensor ``spec`` implies, for ``num_layers`` decoder layers.

    ``num_layers`` defaults to the config's num_hidden_layers; validation
    passes the number actually present so a lying config is reported once.
    """
    arch = architectures.get(spec.architecture)
    H, Ht, K = spec.hidden_size, spec.target_hidden_size, spec.aux.count
    out: dict[str, Expected] = {}
    out["embed_tokens.weight"] = Expected((spec.vocab_size, H), spec.embed_tokens == "drafter", "embedding [vocab, hidden]")
    if spec.flags.use_aux_hidden_state:
        out["fc.weight"] = Expected((H, K * Ht), True, "fc [hidden, K x target_hidden]")
    if spec.flags.norm_before_fc:
        out["input_norm.weight"] = Expected((K * Ht,), True, "norm_before_fc: input_norm [K x target_hidden]")
    if spec.flags.fc_norm:
        for i in range(K):
            out[f"fc_norm.{i}.weight"] = Expected((Ht,), True, "fc_norm: one norm [target_hidden] per aux state")
    layers = spec.num_hidden_layers if num_layers is None else num_layers
    for n in range(layers):
        width = 2 * H if n == 0 else H
        p = f"layers.{n}."
        for norm in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
            out[p + norm + ".weight"] = Expected((H,), n == 0 or norm != "hidden_norm", f"{norm} [hidden]")
        out.update(arch.attention_tensors(spec, p, width))
        out.update(arch.mlp_tensors(spec, p))
    out["norm.weight"] = Expected((H,), True, "final norm [hidden]")
    out["lm_head.weight"] = Expected((spec.draft_vocab_size, H), spec.lm_head == "drafter", "lm_head [draft_vocab, hidden]")
    out["d2t"] = Expected((spec.draft_vocab_size,), False, "d2t [draft_vocab] int64 offsets")
    out["t2d"] = Expected((spec.vocab_size,), False, "t2d [vocab] bool")
    return out
