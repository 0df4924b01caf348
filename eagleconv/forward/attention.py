"""Per-architecture attention for the reference forward.

Each function takes the layer input ``u`` [B, n, in], the positions of its
rows [n], the layer's KV cache entry (keys/values of earlier positions, or
None) and returns (output [B, n, H], new cache entry).  Attention is causal
over the drafter's own cache, softmax in float32 (float64 in a float64
reference), as vLLM's backends accumulate it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .ops import NormOps, acc_dtype
from .rope import Rope, cos_sin, rotate_interleaved, rotate_neox, softmax_scale_factor
from .weights import Weights

Cache = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # keys [B, h, L, dk], values [B, h, L, dv], positions [L]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
            scale: float) -> torch.Tensor:
    """Causal softmax attention: q [B, h, n, d], k/v [B, h, L, d*] -> [B, h, n, dv] in q's dtype."""
    acc = acc_dtype(q.dtype)
    scores = (q.to(acc) @ k.to(acc).transpose(-1, -2)) * scale
    mask = k_pos.unsqueeze(0) > q_pos.unsqueeze(1)  # [n, L]: a key after the query is hidden
    scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return (probs @ v.to(acc)).to(q.dtype)


def _extend(cache: Cache | None, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor) -> Cache:
    if cache is None:
        return k, v, pos
    return torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2), torch.cat([cache[2], pos])


def llama_attention(u: torch.Tensor, pos: torch.Tensor, cache: Cache | None, w: Weights, p: str, spec: Any,
                    rope: Rope, ops: NormOps, eps: float) -> tuple[torch.Tensor, Cache]:
    """Llama GQA with neox RoPE; Qwen3 adds per-head q_norm / k_norm before RoPE."""
    B, n, _ = u.shape
    nh, nkv, d = spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
    a = p + "self_attn."
    q = w.linear(u, a + "q_proj.weight", a + "q_proj.bias").view(B, n, nh, d)
    k = w.linear(u, a + "k_proj.weight", a + "k_proj.bias").view(B, n, nkv, d)
    v = w.linear(u, a + "v_proj.weight", a + "v_proj.bias").view(B, n, nkv, d)
    if spec.architecture == "qwen3":
        q = ops.rms_norm(q, w.get(a + "q_norm.weight"), eps)
        k = ops.rms_norm(k, w.get(a + "k_norm.weight"), eps)
    cos, sin = cos_sin(rope, d, pos, u.dtype)
    q = rotate_neox(q.transpose(1, 2), cos, sin)  # [B, nh, n, d]
    k = rotate_neox(k.transpose(1, 2), cos, sin)
    cache = _extend(cache, k, v.transpose(1, 2), pos)
    keys, values = cache[0], cache[1]
    if nh != nkv:
        keys, values = keys.repeat_interleave(nh // nkv, dim=1), values.repeat_interleave(nh // nkv, dim=1)
    o = _attend(q, keys, values, pos, cache[2], d ** -0.5)
    o = o.transpose(1, 2).reshape(B, n, nh * d)
    return w.linear(o, a + "o_proj.weight", a + "o_proj.bias"), cache


def mla_attention(u: torch.Tensor, pos: torch.Tensor, cache: Cache | None, w: Weights, p: str, spec: Any,
                  rope: Rope, ops: NormOps, eps: float) -> tuple[torch.Tensor, Cache]:
    """DeepSeek multi-head latent attention, expanded form (vLLM's absorbed form differs by rounding only)."""
    B, n, _ = u.shape
    m, nh = spec.mla, spec.num_attention_heads
    dn, dr, dv = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
    a = p + "self_attn."
    if w.has(a + "q_a_proj.weight"):
        q_c = ops.rms_norm(w.linear(u, a + "q_a_proj.weight"), w.get(a + "q_a_layernorm.weight"), eps)
        q = w.linear(q_c, a + "q_b_proj.weight")
    else:
        q = w.linear(u, a + "q_proj.weight")
    q = q.view(B, n, nh, dn + dr).transpose(1, 2)  # [B, nh, n, dn+dr]
    kvl = w.linear(u, a + "kv_a_proj_with_mqa.weight")
    kv_c, kpe = kvl.split([m.kv_lora_rank, dr], dim=-1)
    kv_c = ops.rms_norm(kv_c, w.get(a + "kv_a_layernorm.weight"), eps)
    cos, sin = cos_sin(rope, dr, pos, u.dtype)
    q = torch.cat([q[..., :dn], rotate_interleaved(q[..., dn:], cos, sin)], dim=-1)
    kpe = rotate_interleaved(kpe.unsqueeze(1), cos, sin)  # [B, 1, n, dr]
    kv = w.linear(kv_c, a + "kv_b_proj.weight").view(B, n, nh, dn + dv).transpose(1, 2)
    k_nope, v = kv.split([dn, dv], dim=-1)
    k = torch.cat([k_nope, kpe.expand(B, nh, n, dr)], dim=-1)
    cache = _extend(cache, k, v, pos)
    scale = (dn + dr) ** -0.5 * softmax_scale_factor(rope)
    o = _attend(q, cache[0], cache[1], pos, cache[2], scale)
    o = o.transpose(1, 2).reshape(B, n, nh * dv)
    return w.linear(o, a + "o_proj.weight"), cache


ATTENTION: dict[str, Callable[..., tuple[torch.Tensor, Cache]]] = {
    "llama": llama_attention, "qwen3": llama_attention, "deepseek_mla": mla_attention,
}
"""architecture -> its attention.  A new drafter architecture adds its function here."""
