"""Qwen3 drafters (``Eagle3Qwen3ForCausalLM``): Llama attention plus per-head q_norm / k_norm.

Source: vLLM's Eagle3 Qwen3 drafter (its differences from the Llama one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from . import register
from .base import Example, Expected
from .llama import Llama

if TYPE_CHECKING:
    from .base import TinyDims
    from ..config.config_fields import DecoderShape
    import torch



@register
class Qwen3(Llama):
    name = "qwen3"
    description = "Qwen3 decoder layer: Llama GQA with RMSNorm on each query and key head (q_norm, k_norm)"
    priority = 200
    fallback = False
    default_model_type = "qwen3"
    model_types = frozenset({"qwen3"})
    marker_tensors = (".self_attn.q_norm.", ".self_attn.k_norm.")
    attention_modules = Llama.attention_modules + ("q_norm", "k_norm")
    synthetic_model_type = "qwen3"
    synthetic_architecture = {"*": "LlamaForCausalLMEagle3"}
    transformers_model_types = frozenset({"qwen3"})
    harmless_config_keys = dict.fromkeys(("use_sliding_window", "sliding_window", "max_window_layers", "layer_types"),
                                         "transformers' Qwen3Config sliding-window settings, written by save_pretrained")
    examples = (Example("vllm-qwen3-eagle31", "vllm", eagle31=True),)
    verdicts = ()
    default_rope_theta = 1000000.0  # vLLM's set_default_rope_theta for Qwen3
    qk_norm = True  # the forward: Llama attention with q_norm / k_norm per head

    @classmethod
    def attention_tensors(cls, spec: DecoderShape, prefix: str, width: int) -> dict[str, Expected]:
        out = super().attention_tensors(spec, prefix, width)
        assert spec.head_dim is not None
        a = prefix + "self_attn."
        out[a + "q_norm.weight"] = Expected((spec.head_dim,), True, "qwen3 q_norm [head_dim]")
        out[a + "k_norm.weight"] = Expected((spec.head_dim,), True, "qwen3 k_norm [head_dim]")
        return out

    @classmethod
    def synthetic_attention(cls, dims: TinyDims, width: int, w: Callable[..., torch.Tensor],
                            norm: Callable[[int], torch.Tensor]) -> dict[str, torch.Tensor]:
        out = super().synthetic_attention(dims, width, w, norm)
        out["q_norm.weight"] = norm(dims.head_dim)
        out["k_norm.weight"] = norm(dims.head_dim)
        return out
