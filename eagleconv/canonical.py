"""Canonical tensor names and the shapes a :class:`DrafterSpec` implies for them.

Canonical names are vLLM's on-disk names (no ``model.`` prefix, ``layers.N.*``
rather than ``midlayer.*``).  ``CANONICAL_NAME`` is the allow-list: a layout
rule that produces anything else is an unmapped tensor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .drafter import DrafterSpec

_ATTN = r"(q_proj|k_proj|v_proj|o_proj|q_norm|k_norm|q_a_proj|q_a_layernorm|q_b_proj|kv_a_proj_with_mqa|kv_a_layernorm|kv_b_proj)"
CANONICAL_NAME = re.compile(
    r"^(?:embed_tokens\.weight|fc\.(?:weight|bias)|input_norm\.weight|fc_norm\.\d+\.weight|norm\.weight"
    r"|lm_head\.weight|d2t|t2d"
    r"|layers\.\d+\.(?:input_layernorm|hidden_norm|post_attention_layernorm)\.weight"
    rf"|layers\.\d+\.self_attn\.{_ATTN}\.(?:weight|bias)"
    r"|layers\.\d+\.mlp\.(?:gate_proj|up_proj|down_proj)\.(?:weight|bias))$"
)

LAYER_NAME = re.compile(r"^layers\.(\d+)\.")
FC_NORM_NAME = re.compile(r"^fc_norm\.(\d+)\.weight$")


@dataclass(frozen=True)
class Expected:
    """A tensor the spec implies, with its shape and whether a loader needs it."""

    shape: tuple[int, ...]
    required: bool
    why: str


def layer_indices(names) -> list[int]:
    """Decoder layer indices present among canonical tensor names."""
    return sorted({int(m.group(1)) for n in names if (m := LAYER_NAME.match(n))})


def expected_tensors(spec: DrafterSpec, num_layers: int | None = None) -> dict[str, Expected]:
    """Every canonical tensor ``spec`` implies, for ``num_layers`` decoder layers.

    ``num_layers`` defaults to the config's num_hidden_layers; validation
    passes the number actually present so a lying config is reported once.
    """
    H, Ht, K = spec.hidden_size, spec.target_hidden_size, spec.aux.count
    I = spec.intermediate_size
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
        if spec.mla is not None:
            m, nh = spec.mla, spec.num_attention_heads
            a = p + "self_attn."
            if m.q_lora_rank is not None:
                out[a + "q_a_proj.weight"] = Expected((m.q_lora_rank, width), True, "MLA q_a_proj [q_lora_rank, in]")
                out[a + "q_a_layernorm.weight"] = Expected((m.q_lora_rank,), True, "MLA q_a_layernorm")
                out[a + "q_b_proj.weight"] = Expected((nh * (m.qk_nope_head_dim + m.qk_rope_head_dim), m.q_lora_rank), True, "MLA q_b_proj")
            else:
                out[a + "q_proj.weight"] = Expected((nh * (m.qk_nope_head_dim + m.qk_rope_head_dim), width), True, "MLA q_proj")
            out[a + "kv_a_proj_with_mqa.weight"] = Expected((m.kv_lora_rank + m.qk_rope_head_dim, width), True, "MLA kv_a_proj_with_mqa")
            out[a + "kv_a_layernorm.weight"] = Expected((m.kv_lora_rank,), True, "MLA kv_a_layernorm")
            out[a + "kv_b_proj.weight"] = Expected((nh * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank), True, "MLA kv_b_proj")
            out[a + "o_proj.weight"] = Expected((H, nh * m.v_head_dim), True, "MLA o_proj")
        else:
            assert spec.head_dim is not None and spec.num_key_value_heads is not None
            d, nh, nkv = spec.head_dim, spec.num_attention_heads, spec.num_key_value_heads
            a = p + "self_attn."
            out[a + "q_proj.weight"] = Expected((nh * d, width), True, "q_proj [heads x head_dim, in]")
            out[a + "k_proj.weight"] = Expected((nkv * d, width), True, "k_proj [kv_heads x head_dim, in]")
            out[a + "v_proj.weight"] = Expected((nkv * d, width), True, "v_proj [kv_heads x head_dim, in]")
            out[a + "o_proj.weight"] = Expected((H, nh * d), True, "o_proj [hidden, heads x head_dim]")
            if spec.attention_bias:
                out[a + "q_proj.bias"] = Expected((nh * d,), True, "attention_bias")
                out[a + "k_proj.bias"] = Expected((nkv * d,), True, "attention_bias")
                out[a + "v_proj.bias"] = Expected((nkv * d,), True, "attention_bias")
                out[a + "o_proj.bias"] = Expected((H,), True, "attention_bias")
            if spec.architecture == "qwen3":
                out[a + "q_norm.weight"] = Expected((d,), True, "qwen3 q_norm [head_dim]")
                out[a + "k_norm.weight"] = Expected((d,), True, "qwen3 k_norm [head_dim]")
        out[p + "mlp.gate_proj.weight"] = Expected((I, H), True, "gate_proj [intermediate, hidden]")
        out[p + "mlp.up_proj.weight"] = Expected((I, H), True, "up_proj [intermediate, hidden]")
        out[p + "mlp.down_proj.weight"] = Expected((H, I), True, "down_proj [hidden, intermediate]")
        if spec.mlp_bias:
            out[p + "mlp.gate_proj.bias"] = Expected((I,), True, "mlp_bias")
            out[p + "mlp.up_proj.bias"] = Expected((I,), True, "mlp_bias")
            out[p + "mlp.down_proj.bias"] = Expected((H,), True, "mlp_bias")
    out["norm.weight"] = Expected((H,), True, "final norm [hidden]")
    out["lm_head.weight"] = Expected((spec.draft_vocab_size, H), spec.lm_head == "drafter", "lm_head [draft_vocab, hidden]")
    out["d2t"] = Expected((spec.draft_vocab_size,), False, "d2t [draft_vocab] int64 offsets")
    out["t2d"] = Expected((spec.vocab_size,), False, "t2d [vocab] bool")
    return out
