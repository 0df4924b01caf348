"""Llama-style drafters (``LlamaForCausalLMEagle3``): grouped-query attention with neox RoPE.

The family every producer writes; anything no other architecture claims is
read as llama.  Source: vLLM's Eagle3 Llama drafter (``llama_eagle3``): fields, tensors, math.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import PositiveInt

from ..config.config_fields import _DecoderFields, _Eagle3Fields
from . import register
from .base import Architecture, Derive, Example, Expected, exact_div, shape_of

if TYPE_CHECKING:
    from ..support.jsonio import JSONObject, JSONValue
    from .base import TinyDims
    from ..nn.store import WeightStore
    from ..nn.norm import NormOps
    from ..rope.rotary import ResolvedRope
    from ..nn.attention import LayerCache
    from ..config.config_fields import DecoderShape
    import torch
    from pydantic import BaseModel

    from ..io.reader import TensorInfo


class LlamaDecoderFields(_DecoderFields):
    num_key_value_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None


class LlamaEagle3Config(LlamaDecoderFields, _Eagle3Fields):
    """HF-style EAGLE-3/3.1 Llama or Qwen3 drafter config (vLLM, SpecForge, TorchSpec, Automodel, ModelOpt, SafeAILab)."""

    architectures: list[str] | None = None


@register
class Llama(Architecture):
    name = "llama"
    description = "Llama decoder layer: GQA q/k/v/o projections, neox RoPE, SiLU MLP"
    priority = 1000
    fallback = True
    default_model_type = "llama"
    model_types = frozenset({"llama"})
    attention_modules: ClassVar[tuple[str, ...]] = ("q_proj", "k_proj", "v_proj", "o_proj")
    config_fields = ("num_key_value_heads", "head_dim")
    synthetic_model_type = "llama"
    synthetic_architecture = {"*": "LlamaForCausalLMEagle3"}
    transformers_model_types = frozenset({"llama"})
    transformers_heads_divide_hidden = frozenset({"llama"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("specforge-llama-eagle3", "specforge"),
        Example("specforge-llama-eagle31", "specforge", eagle31=True),
        Example("eagle-llama-eagle3", "eagle"),
        Example("speculators-llama-eagle31", "speculators", eagle31=True),
        Example("automodel-llama-eagle31", "automodel", eagle31=True),
        Example("modelopt-llama-eagle3", "modelopt"),
    )

    @classmethod
    def config_model(cls) -> type[BaseModel]:
        return LlamaEagle3Config

    @classmethod
    def derive(cls, tensors: Mapping[str, TensorInfo], values: Mapping[str, Any], derive: Derive) -> None:
        q_rows = shape_of(tensors, "layers.0.self_attn.q_proj.weight", 0)
        derive("head_dim", shape_of(tensors, "layers.0.self_attn.q_norm.weight", 0), "from q_norm")
        derive("head_dim", exact_div(q_rows, values.get("num_attention_heads")), "q_proj rows / num_attention_heads")
        derive("num_key_value_heads", exact_div(shape_of(tensors, "layers.0.self_attn.k_proj.weight", 0),
                                                values.get("head_dim")), "k_proj rows / head_dim")

    @classmethod
    def spec_fields(cls, values: Mapping[str, JSONValue]) -> dict[str, Any]:
        return {"num_key_value_heads": values.get("num_key_value_heads"), "head_dim": values.get("head_dim")}

    @classmethod
    def config_values(cls, spec: DecoderShape) -> JSONObject:
        return {"num_key_value_heads": spec.num_key_value_heads, "head_dim": spec.head_dim}

    @classmethod
    def check_spec(cls, spec: DecoderShape) -> None:
        if spec.head_dim is None or spec.num_key_value_heads is None:
            raise ValueError(f"head_dim and num_key_value_heads are required for {cls.name} drafters")
        if spec.mla is not None:
            raise ValueError(f"MLA dimensions are only for deepseek_mla drafters, not {cls.name}")

    @classmethod
    def attention_tensors(cls, spec: DecoderShape, prefix: str, width: int) -> dict[str, Expected]:
        assert spec.head_dim is not None and spec.num_key_value_heads is not None
        d, nh, nkv, H = spec.head_dim, spec.num_attention_heads, spec.num_key_value_heads, spec.hidden_size
        a = prefix + "self_attn."
        out = {
            a + "q_proj.weight": Expected((nh * d, width), True, "q_proj [heads x head_dim, in]"),
            a + "k_proj.weight": Expected((nkv * d, width), True, "k_proj [kv_heads x head_dim, in]"),
            a + "v_proj.weight": Expected((nkv * d, width), True, "v_proj [kv_heads x head_dim, in]"),
            a + "o_proj.weight": Expected((H, nh * d), True, "o_proj [hidden, heads x head_dim]"),
        }
        if spec.attention_bias:
            out[a + "q_proj.bias"] = Expected((nh * d,), True, "attention_bias")
            out[a + "k_proj.bias"] = Expected((nkv * d,), True, "attention_bias")
            out[a + "v_proj.bias"] = Expected((nkv * d,), True, "attention_bias")
            out[a + "o_proj.bias"] = Expected((H,), True, "attention_bias")
        return out

    @classmethod
    def synthetic_attention(cls, dims: TinyDims, width: int, w: Callable[..., torch.Tensor],
                            norm: Callable[[int], torch.Tensor]) -> dict[str, torch.Tensor]:
        d = dims
        return {
            "q_proj.weight": w(d.heads * d.head_dim, width),
            "k_proj.weight": w(d.kv_heads * d.head_dim, width),
            "v_proj.weight": w(d.kv_heads * d.head_dim, width),
            "o_proj.weight": w(d.hidden, d.heads * d.head_dim),
        }

    @classmethod
    def synthetic_config(cls, dims: TinyDims) -> JSONObject:
        return {"num_key_value_heads": dims.kv_heads, "head_dim": dims.head_dim, "rope_theta": 500000.0}

    # -- forward ------------------------------------------------------------------
    qk_norm: ClassVar[bool] = False  # Qwen3: RMSNorm on each query and key head before RoPE

    @classmethod
    def project_qkv(cls, u: torch.Tensor, w: WeightStore, a: str,
                    spec: DecoderShape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B, n, heads x head_dim], k and v [B, n, kv_heads x head_dim] of the layer input (``a`` =
        "layers.N.self_attn."): three projections here; a fused family splits one."""
        return (w.linear(u, a + "q_proj.weight", a + "q_proj.bias"), w.linear(u, a + "k_proj.weight", a + "k_proj.bias"),
                w.linear(u, a + "v_proj.weight", a + "v_proj.bias"))

    @classmethod
    def attention(cls, u: torch.Tensor, pos: torch.Tensor, cache: LayerCache | None, w: WeightStore, p: str,
                  spec: DecoderShape, rope: ResolvedRope, ops: NormOps, eps: float) -> tuple[torch.Tensor, LayerCache]:
        """GQA with neox RoPE over the drafter's KV cache (vLLM: llama_eagle3.py, LlamaAttention)."""
        from ..nn.attention import attend_cache, extend
        from ..rope.rotary import cos_sin, rotate_neox

        B, n, _ = u.shape
        nh, nkv, d = spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
        assert nkv is not None and d is not None
        a = p + "self_attn."
        q, k, v = cls.project_qkv(u, w, a, spec)
        q, k, v = q.view(B, n, nh, d), k.view(B, n, nkv, d), v.view(B, n, nkv, d)
        if cls.qk_norm:
            q = cls.rms_norm(ops, q, w, a + "q_norm.weight", eps)
            k = cls.rms_norm(ops, k, w, a + "k_norm.weight", eps)
        cos, sin = cos_sin(rope, d, pos, u.dtype)
        q = rotate_neox(q.transpose(1, 2), cos, sin)  # [B, nh, n, d]
        k = rotate_neox(k.transpose(1, 2), cos, sin)
        cache = extend(cache, k, v.transpose(1, 2), pos)
        o = attend_cache(q, cache, pos, d ** -0.5).transpose(1, 2).reshape(B, n, nh * d)
        return w.linear(o, a + "o_proj.weight", a + "o_proj.bias"), cache
