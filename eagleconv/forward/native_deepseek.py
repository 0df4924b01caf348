"""A DeepSeek-V3 target (``DeepseekV3ForCausalLM``) in eagleconv's own runtime: what differs from Llama.

Its attention is the MLA drafter's (``architectures/deepseek_mla.py``: q and kv latents with their norms, RoPE on the
``qk_rope_head_dim`` part, one rope key shared by all heads); the first ``first_k_dense_replace`` layers have a dense
SwiGLU MLP, every later one a routed MoE (:func:`moe`) as transformers' ``modeling_deepseek_v3`` computes it:
sigmoid scores, ``e_score_correction_bias`` added for the choice only, ``n_group``/``topk_group`` group-limited
top-k, ``norm_topk_prob``, ``routed_scaling_factor``, plus the shared experts.  vLLM's ``noaux_tc`` routing is the
same math, which is why only ``noaux_tc`` + ``sigmoid`` configs run here: transformers runs that router whatever
the config says, vLLM does not (issue 32: a target with ``topk_method`` unset does not even load there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ..nn.store import WeightStore

# config fields of transformers' DeepseekV3Config (and DeepSeek's own config.json) this runtime reads or that change
# nothing in the forward (MTP layers, training-only losses, expert parallelism; transformers derives qk_head_dim and
# head_dim from the MLA dimensions)
FIELDS = frozenset({"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                    "qk_head_dim", "rope_interleave", "first_k_dense_replace", "moe_layer_freq", "moe_intermediate_size",
                    "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "n_group", "topk_group",
                    "norm_topk_prob", "routed_scaling_factor", "topk_method", "scoring_func",
                    "num_nextn_predict_layers", "aux_loss_alpha", "seq_aux", "ep_size", "output_router_logits",
                    "router_aux_loss_coef"})
MLA_DIMS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")  # q_lora_rank: null is q_proj
MOE_REQUIRED = ("moe_intermediate_size", "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "n_group",
                "topk_group", "norm_topk_prob", "routed_scaling_factor")


class DeepseekUnsupported(Exception):
    """A DeepSeek-V3 config or tensor set this runtime does not compute exactly (NativeUnsupported's reason)."""


@dataclass(frozen=True)
class Moe:
    """The routed layers' settings (every layer from ``first_dense`` on)."""

    first_dense: int
    experts: int
    shared: int
    top_k: int
    groups: int
    topk_groups: int
    norm_topk_prob: bool
    scaling: float
    inter: int


def _int(cfg: Mapping[str, Any], key: str) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise DeepseekUnsupported(f"{key} = {value!r} (an integer is needed)")
    return value


def read_config(cfg: Mapping[str, Any], layers: int) -> tuple[dict[str, int | None], Moe]:
    """The MLA dimensions (MlaDims' fields) and the MoE settings, every one stated; DeepseekUnsupported otherwise.

    transformers would default an unstated one (q_lora_rank 1536, first_k_dense_replace 3, n_group 8, ...) and
    vLLM sometimes to another value (scoring_func softmax, topk_method greedy), so neither is assumed here."""
    absent = [k for k in ("q_lora_rank", *MLA_DIMS, "first_k_dense_replace") if k not in cfg]
    if absent:
        raise DeepseekUnsupported(f"config states no {', '.join(absent)} (transformers would default them)")
    if cfg.get("rope_interleave", True) is not True:
        raise DeepseekUnsupported(f"rope_interleave = {cfg.get('rope_interleave')!r}: vLLM rotates DeepSeek's rope "
                                  "dims as interleaved pairs whatever it says")
    if cfg.get("num_key_value_heads", cfg["num_attention_heads"]) != cfg["num_attention_heads"]:
        raise DeepseekUnsupported("num_key_value_heads differs from num_attention_heads (MLA has one latent per head)")
    if cfg.get("attention_bias", False) is not False:
        raise DeepseekUnsupported(f"attention_bias = {cfg.get('attention_bias')!r}")
    q_lora = None if cfg["q_lora_rank"] is None else _int(cfg, "q_lora_rank")
    dims: dict[str, int | None] = {"q_lora_rank": q_lora, **{k: _int(cfg, k) for k in MLA_DIMS}}
    first = _int(cfg, "first_k_dense_replace")
    if first >= layers:  # every layer dense: the routing fields are never read
        return dims, Moe(first, 0, 0, 0, 1, 1, False, 1.0, 0)
    missing = [k for k in MOE_REQUIRED if cfg.get(k) is None]
    if missing:
        raise DeepseekUnsupported(f"config states no {', '.join(missing)} (transformers would default them)")
    rules = {"topk_method": "noaux_tc", "scoring_func": "sigmoid", "moe_layer_freq": 1}
    for key, wanted in rules.items():
        if cfg.get(key, 1 if key == "moe_layer_freq" else None) != wanted:
            raise DeepseekUnsupported(f"{key} = {cfg.get(key)!r} (eagleconv runs {key} {wanted!r} routing only)")
    scaling = cfg["routed_scaling_factor"]
    if not isinstance(cfg["norm_topk_prob"], bool) or isinstance(scaling, bool) or not isinstance(scaling, int | float):
        raise DeepseekUnsupported("norm_topk_prob must be a boolean and routed_scaling_factor a number")
    moe = Moe(first, _int(cfg, "n_routed_experts"), _int(cfg, "n_shared_experts"), _int(cfg, "num_experts_per_tok"),
              _int(cfg, "n_group"), _int(cfg, "topk_group"), cfg["norm_topk_prob"],
              float(scaling), _int(cfg, "moe_intermediate_size"))
    per = moe.experts // moe.groups if moe.groups > 0 else 0
    if (moe.groups <= 0 or moe.experts % moe.groups or per < 2 or not 0 < moe.topk_groups <= moe.groups
            or not 0 < moe.top_k <= moe.topk_groups * per or moe.shared < 1):
        raise DeepseekUnsupported(f"MoE routing n_routed_experts {moe.experts}, n_group {moe.groups}, topk_group "
                                  f"{moe.topk_groups}, num_experts_per_tok {moe.top_k}, n_shared_experts "
                                  f"{moe.shared}: not a grouping transformers runs")
    return dims, moe


def mlp_tensors(p: str, j: int, hidden: int, inter: int, moe: Moe) -> dict[str, tuple[int, ...]]:
    """Layer j's ``mlp.*`` tensors and their shapes: SwiGLU below ``first_dense``, else router, experts and shared."""
    def swiglu(m: str, width: int) -> dict[str, tuple[int, ...]]:
        return {m + "gate_proj.weight": (width, hidden), m + "up_proj.weight": (width, hidden),
                m + "down_proj.weight": (hidden, width)}

    m = p + "mlp."
    if j < moe.first_dense:
        return swiglu(m, inter)
    out = {m + "gate.weight": (moe.experts, hidden), m + "gate.e_score_correction_bias": (moe.experts,)}
    for e in range(moe.experts):
        out.update(swiglu(f"{m}experts.{e}.", moe.inter))
    return out | swiglu(m + "shared_experts.", moe.inter * moe.shared)


def _swiglu(x: torch.Tensor, w: WeightStore, m: str) -> torch.Tensor:
    import torch.nn.functional as F

    return w.linear(F.silu(w.linear(x, m + "gate_proj.weight")) * w.linear(x, m + "up_proj.weight"),
                    m + "down_proj.weight")


def moe(h: torch.Tensor, w: WeightStore, p: str, cfg: Moe) -> torch.Tensor:
    """One MoE layer over ``h`` [B, n, H] (transformers' DeepseekV3MoE, term for term): the routed experts' weighted
    outputs summed in ascending expert order, then the shared experts' output added."""
    m = p + "mlp."
    x = h.reshape(-1, h.shape[-1])
    scores = torch.nn.functional.linear(x.float(), w.get(m + "gate.weight").float()).sigmoid()
    choice = scores + w.get(m + "gate.e_score_correction_bias")
    per = cfg.experts // cfg.groups
    group_scores = choice.view(-1, cfg.groups, per).topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=cfg.topk_groups, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    keep = group_mask.unsqueeze(-1).expand(-1, cfg.groups, per).reshape(-1, cfg.experts).bool()
    chosen = torch.topk(choice.masked_fill(~keep, float("-inf")), k=cfg.top_k, dim=-1, sorted=False)[1]
    weights = scores.gather(1, chosen)
    if cfg.norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    weights = weights * cfg.scaling
    out = torch.zeros_like(x)
    for e in chosen.unique().tolist():  # sorted: the order transformers adds them in
        rows, slot = torch.where(chosen == e)
        y = _swiglu(x[rows], w, f"{m}experts.{e}.") * weights[rows, slot, None]
        out.index_add_(0, rows, y.to(out.dtype))
    return out.view_as(h) + _swiglu(h, w, m + "shared_experts.")


YARN_STATED = ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim")


def check_rope(rope: Any) -> None:
    """DeepseekUnsupported unless ``rope`` (spec.drafter.Rope, read as interleaved) is one transformers and vLLM
    compute alike: none, or yarn (deepseek_yarn) with every parameter DeepSeek's own configs state, none zero.
    transformers takes other defaults than vLLM's deepseek_yarn where mscale or mscale_all_dim is missing or zero,
    and reads attention_factor and truncate, which vLLM does not."""
    if rope.scaling == "none" and not rope.ignored_keys:
        return
    if rope.scaling != "deepseek_yarn":
        raise DeepseekUnsupported(f"rope scaling {rope.scaling!r} {rope.ignored_keys or ''}".strip()
                                  + ": eagleconv runs DeepSeek-V3 targets with none or yarn")
    unstated = [k for k in YARN_STATED if not getattr(rope, k)]
    extra = [k for block in ("rope_scaling", "rope_parameters") if isinstance(rope.stated.get(block), dict)
             for k in rope.stated[block] if k not in ("type", "rope_type", "rope_theta", *YARN_STATED)]
    if unstated or extra:
        raise DeepseekUnsupported(f"yarn rope with {', '.join(unstated)} unstated or zero {extra or ''}".strip()
                                  + " (transformers and vLLM would compute different rotations)")
