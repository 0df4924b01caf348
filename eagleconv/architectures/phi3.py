"""Phi-3-style drafters: Llama's attention and SiLU MLP with fused projections (``qkv_proj``, ``gate_up_proj``).

Phi-3 stores q, k and v as one ``qkv_proj`` [(heads + 2 x kv_heads) x head_dim, in], split in that order, and
gate and up as one ``gate_up_proj`` [2 x intermediate, hidden], gate first (transformers: Phi3Attention,
Phi3MLP).  The math is Llama's, so ``split_tensors`` gives the equivalent Llama drafter and the contract suite
checks the two forwards agree.  vLLM 0.32 registers no Phi-3 EAGLE-3 drafter class, but its Llama drafter loads
the fused tensors as its own stacked parameters: the vllm layout writes ``Eagle3LlamaForCausalLM`` over them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import register
from .base import Derive, Example, Expected, Verdict, exact_div, shape_of
from .llama import Llama

if TYPE_CHECKING:
    from .base import TinyDims
    from ..nn.store import WeightStore
    from ..config.config_fields import DecoderShape
    import torch

    from ..io.reader import TensorInfo


def _qkv_rows(spec: DecoderShape) -> list[int]:
    assert spec.head_dim is not None and spec.num_key_value_heads is not None
    d = spec.head_dim
    return [spec.num_attention_heads * d, spec.num_key_value_heads * d, spec.num_key_value_heads * d]


@register
class Phi3(Llama):
    name = "phi3"
    description = "Phi-3 decoder layer: Llama GQA and SiLU MLP with fused qkv_proj and gate_up_proj"
    priority = 300
    fallback = False
    default_model_type = "phi3"
    model_types = frozenset({"phi3"})
    marker_tensors = (".self_attn.qkv_proj.", ".mlp.gate_up_proj.")
    attention_modules = ("qkv_proj", "o_proj")
    mlp_modules = ("gate_up_proj", "down_proj")
    default_rms_norm_eps = 1e-5  # Phi3Config's
    synthetic_model_type = "phi3"
    synthetic_architecture = {"*": "Phi3ForCausalLMEagle3"}
    transformers_model_types = frozenset({"phi3"})
    harmless_config_keys = {
        **dict.fromkeys(("resid_pdrop", "embd_pdrop"), "transformers' Phi3Config dropout rates (training only)"),
        "original_max_position_embeddings": "transformers' Phi3Config: read only by its longrope scaling",
        # transformers 4.x's Phi3Config writes it top-level (default 1.0, full rotary); 5.x moves it into
        # rope_parameters.  The drafter's attention rotates the whole head, as every EAGLE-3 reader does.
        "partial_rotary_factor": "transformers 4.x Phi3Config (default 1.0: full rotary, what the drafter computes)",
    }
    examples = (Example("vllm-phi3-eagle3", "vllm"),)
    verdicts = (Verdict("vllm 0.32", frozenset({"EC040"}), "vLLM 0.32 registers no Phi-3 EAGLE-3 drafter class",
                        layouts=frozenset({"torchspec"})),)
    equivalent = "llama"

    @classmethod
    def derive(cls, tensors: Mapping[str, TensorInfo], values: Mapping[str, Any], derive: Derive) -> None:
        nh = values.get("num_attention_heads")
        derive("head_dim", exact_div(shape_of(tensors, "layers.0.self_attn.o_proj.weight", 1), nh),
               "o_proj columns / num_attention_heads")
        rows, d = shape_of(tensors, "layers.0.self_attn.qkv_proj.weight", 0), values.get("head_dim")
        kv = exact_div(rows - nh * d, 2 * d) if rows and isinstance(nh, int) and isinstance(d, int) and rows > nh * d \
            else None
        derive("num_key_value_heads", kv, "(qkv_proj rows / head_dim - num_attention_heads) / 2")

    @classmethod
    def derive_mlp(cls, tensors: Mapping[str, TensorInfo], values: Mapping[str, Any], derive: Derive) -> None:
        derive("intermediate_size", exact_div(shape_of(tensors, "layers.0.mlp.gate_up_proj.weight", 0), 2),
               "layers.0.mlp.gate_up_proj rows / 2")

    @classmethod
    def attention_tensors(cls, spec: DecoderShape, prefix: str, width: int) -> dict[str, Expected]:
        rows, H = sum(_qkv_rows(spec)), spec.hidden_size
        q_rows = _qkv_rows(spec)[0]
        a = prefix + "self_attn."
        out = {a + "qkv_proj.weight": Expected((rows, width), True, "qkv_proj [(heads + 2 x kv_heads) x head_dim, in]"),
               a + "o_proj.weight": Expected((H, q_rows), True, "o_proj [hidden, heads x head_dim]")}
        if spec.attention_bias:
            out[a + "qkv_proj.bias"] = Expected((rows,), True, "attention_bias")
            out[a + "o_proj.bias"] = Expected((H,), True, "attention_bias")
        return out

    @classmethod
    def mlp_tensors(cls, spec: DecoderShape, prefix: str) -> dict[str, Expected]:
        H, inter = spec.hidden_size, spec.intermediate_size
        m = prefix + "mlp."
        out = {m + "gate_up_proj.weight": Expected((2 * inter, H), True, "gate_up_proj [2 x intermediate, hidden]"),
               m + "down_proj.weight": Expected((H, inter), True, "down_proj [hidden, intermediate]")}
        if spec.mlp_bias:
            out[m + "gate_up_proj.bias"] = Expected((2 * inter,), True, "mlp_bias")
            out[m + "down_proj.bias"] = Expected((H,), True, "mlp_bias")
        return out

    @classmethod
    def synthetic_attention(cls, dims: TinyDims, width: int, w: Callable[..., torch.Tensor],
                            norm: Callable[[int], torch.Tensor]) -> dict[str, torch.Tensor]:
        d = dims
        return {"qkv_proj.weight": w((d.heads + 2 * d.kv_heads) * d.head_dim, width),
                "o_proj.weight": w(d.hidden, d.heads * d.head_dim)}

    @classmethod
    def synthetic_mlp(cls, dims: TinyDims, w: Callable[..., torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"gate_up_proj.weight": w(2 * dims.intermediate, dims.hidden),
                "down_proj.weight": w(dims.hidden, dims.intermediate)}

    # -- forward ------------------------------------------------------------------
    @classmethod
    def project_qkv(cls, u: torch.Tensor, w: WeightStore, a: str,
                    spec: DecoderShape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = w.linear(u, a + "qkv_proj.weight", a + "qkv_proj.bias").split(_qkv_rows(spec), dim=-1)
        return q, k, v

    @classmethod
    def mlp(cls, h: torch.Tensor, w: WeightStore, p: str) -> torch.Tensor:
        import torch.nn.functional as F

        m = p + "mlp."
        gate, up = w.linear(h, m + "gate_up_proj.weight", m + "gate_up_proj.bias").chunk(2, dim=-1)
        return w.linear(F.silu(gate) * up, m + "down_proj.weight", m + "down_proj.bias")

    @classmethod
    def split_tensors(cls, tensors: Mapping[str, torch.Tensor], spec: DecoderShape) -> dict[str, torch.Tensor]:
        """The Llama form: qkv_proj -> q_proj, k_proj, v_proj; gate_up_proj -> gate_proj, up_proj (rows, in order)."""
        out: dict[str, torch.Tensor] = {}
        for name, t in tensors.items():
            if ".self_attn.qkv_proj." in name:
                for part, piece in zip(("q_proj", "k_proj", "v_proj"), t.split(_qkv_rows(spec), dim=0)):
                    out[name.replace("qkv_proj", part)] = piece.clone()
            elif ".mlp.gate_up_proj." in name:
                for part, piece in zip(("gate_proj", "up_proj"), t.chunk(2, dim=0)):
                    out[name.replace("gate_up_proj", part)] = piece.clone()
            else:
                out[name] = t
        return out
