"""The MLA verdict matrix: what vLLM 0.32 does with DeepSeek-V3 / Kimi drafter variants, and eagleconv's prediction.

Nothing here is trained: the target is a seeded random tiny ``DeepseekV3ForCausalLM`` (transformers; hidden 256,
4 layers, vocab 512, MoE from layer 1, latent 512 + 64 as Kimi K2's) and the drafters are ``eagleconv.synthetic``
MLA drafters of the same width.  A verdict (fails at load / drafts as its base drafter / drafts otherwise) needs no
trained weights.  ``.ci/vllm-parity --mla-verdicts --record`` runs every case through real vLLM and writes
fixtures/mla-variants/vllm-0.32.0-outcomes.json; tests/engines/test_vllm_mla_verdicts.py checks eagleconv's
prediction against that record without vLLM.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .parity import REPO, Edit, _drop, slug
from ..synthetic import DrafterRecipe, TinyDims, make_drafter

if TYPE_CHECKING:
    import torch

    from ..support.jsonio import JSONObject

MLA_VARIANTS_DIR = REPO / "fixtures" / "mla-variants"
RECORD = MLA_VARIANTS_DIR / "vllm-0.32.0-outcomes.json"
# Kimi K2's latent (kv_lora_rank 512 + qk_rope_head_dim 64 = 576, the CPU MLA backend's one width) at tiny-pair size
DIMS = TinyDims(hidden=256, target_hidden=256, heads=4, kv_heads=4, head_dim=64, intermediate=512, vocab=512,
                draft_vocab=256, aux_ids=(1, 2, 3), target_layers=4, q_lora_rank=128, kv_lora_rank=512,
                qk_nope_head_dim=64, qk_rope_head_dim=64, v_head_dim=64)
BASES = {"eagle3": False, "eagle31": True}  # base name -> eagle31 (fc_norm + norm_output)
TARGET_SEED = 0


@dataclass(frozen=True)
class MlaVariant:
    """An MLA drafter built from a synthetic recipe (``dims`` changed where the variant is about a width), then
    edited; ``routing`` names the target it runs against."""

    name: str
    base: str  # eagle3 | eagle31
    what: str
    edit: Edit = lambda c, t: None
    dims: dict[str, Any] = field(default_factory=dict)
    routing: str = "noaux_tc"  # noaux_tc | unset: the target's topk_method
    stated: bool = False  # the edit changes what the checkpoint says it computes (see parity.Variant.stated)
    known_gap: str = ""


def _rope(**changes: object) -> Edit:
    def edit(c: JSONObject, t: dict[str, torch.Tensor]) -> None:
        scaling = c["rope_scaling"]
        assert isinstance(scaling, dict)
        for k, v in changes.items():
            if v is None:
                scaling.pop(k, None)
            else:
                scaling[k] = v  # type: ignore[assignment]
    return edit


def _nested_aux_only(c: JSONObject, t: dict[str, torch.Tensor]) -> None:
    """What TorchSpec and ModelOpt write: the ids under eagle_config only (and num_aux_hidden_states)."""
    ids = c.pop("eagle_aux_hidden_state_layer_ids")
    c["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids}


def _extra_fc_norm(c: JSONObject, t: dict[str, torch.Tensor]) -> None:
    t["fc_norm.3.weight"] = t["fc_norm.0.weight"].clone()


def _fc_norm_off(c: JSONObject, t: dict[str, torch.Tensor]) -> None:
    c["fc_norm"] = False
    _drop(t, "fc_norm.")


def _input_norm(c: JSONObject, t: dict[str, torch.Tensor]) -> None:
    import torch

    t["input_norm.weight"] = torch.ones(3 * DIMS.target_hidden)
    c["norm_before_fc"] = True


VARIANTS: tuple[MlaVariant, ...] = (
    MlaVariant("model_type deepseek_v3", "eagle31", "model_type deepseek_v3 (what eagleconv wrote before issue 32)",
               lambda c, t: c.update(model_type="deepseek_v3")),
    MlaVariant("model_type deepseek_v32", "eagle31", "model_type deepseek_v32",
               lambda c, t: c.update(model_type="deepseek_v32")),
    MlaVariant("model_type kimi_k2", "eagle31", "model_type kimi_k2 (as TorchSpec and the Kimi releases write it)",
               lambda c, t: c.update(model_type="kimi_k2")),
    MlaVariant("q_lora_rank null", "eagle3", "q_lora_rank null: q_proj instead of q_a_proj / q_b_proj",
               dims={"q_lora_rank": None}),
    MlaVariant("latent width 80", "eagle3", "kv_lora_rank 64 + qk_rope_head_dim 16 (outside vLLM's MLA set)",
               dims={"kv_lora_rank": 64, "qk_rope_head_dim": 16}),
    MlaVariant("latent width 320", "eagle3", "kv_lora_rank 256 + qk_rope_head_dim 64 (a GPU width, not the CPU one)",
               dims={"kv_lora_rank": 256}),
    MlaVariant("fc_norm 2 tensors for 3 aux", "eagle31", "fc_norm.2.weight removed (3 aux states)",
               lambda c, t: t.pop("fc_norm.2.weight")),
    MlaVariant("fc_norm 4 tensors for 3 aux", "eagle31", "fc_norm.3.weight added (3 aux states)", _extra_fc_norm),
    MlaVariant("norm_output only", "eagle31", "fc_norm off (flag and tensors), norm_output kept", _fc_norm_off),
    MlaVariant("aux ids only under eagle_config", "eagle3", "top-level aux ids moved into eagle_config",
               _nested_aux_only),
    MlaVariant("kv_a_layernorm missing", "eagle3", "layers.0.self_attn.kv_a_layernorm.weight removed",
               lambda c, t: t.pop("layers.0.self_attn.kv_a_layernorm.weight")),
    MlaVariant("q_a_layernorm missing", "eagle3", "layers.0.self_attn.q_a_layernorm.weight removed",
               lambda c, t: t.pop("layers.0.self_attn.q_a_layernorm.weight")),
    MlaVariant("rope_interleave true", "eagle3", "rope_interleave: true (transformers' DeepseekV3Config writes it)",
               lambda c, t: c.update(rope_interleave=True)),
    MlaVariant("rope_interleave false", "eagle3", "rope_interleave: false (a drafter trained with NeoX-style RoPE)",
               lambda c, t: c.update(rope_interleave=False), stated=True),
    MlaVariant("yarn mscale_all_dim 0.707", "eagle3", "rope_scaling.mscale_all_dim 1.0 -> 0.707",
               _rope(mscale_all_dim=0.707), stated=True),
    MlaVariant("yarn without mscale fields", "eagle3", "rope_scaling.mscale and mscale_all_dim removed",
               _rope(mscale=None, mscale_all_dim=None), stated=True),
    MlaVariant("target topk_method unset", "eagle3", "the target saved by transformers: topk_method unset, "
               "e_score_correction_bias in every MoE gate", routing="unset"),
    MlaVariant("lm_head missing, draft vocab < vocab", "eagle3", "lm_head.weight removed (as nvidia/Kimi-K2.6-Eagle3 "
               "ships it)", lambda c, t: t.pop("lm_head.weight")),
    MlaVariant("input_norm with norm_before_fc", "eagle3", "input_norm.weight and norm_before_fc: true added",
               _input_norm),
    MlaVariant("Kimi nested eagle_config flags", "eagle31", "TorchSpec's eagle_config flags "
               "(use_input_layernorm_in_first_layer, use_last_layernorm, use_mtp_layernorm) and use_aux_hidden_state",
               lambda c, t: c.update(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3],
                                                   "use_aux_hidden_state": True,
                                                   "use_input_layernorm_in_first_layer": True,
                                                   "use_last_layernorm": True, "use_mtp_layernorm": False})),
)


def recipe(base: str, **dims: Any) -> DrafterRecipe:
    """The synthetic vllm-layout MLA drafter (model_type deepseek_v2, float32 as the target runs)."""
    return DrafterRecipe(producer="vllm", architecture="deepseek_mla", eagle31=BASES[base],
                         dims=replace(DIMS, **dims), dtype="float32", seed=1)


def build_base(base: str, out: Path) -> Path:
    dst = out / f"mla-eagle3-base-{base}"
    if dst.exists():
        shutil.rmtree(dst)
    return make_drafter(dst, recipe(base))


def build_variant(variant: MlaVariant, out: Path) -> Path:
    """Write the variant as a checkpoint directory under ``out`` (named ...eagle3... so vLLM's path rules agree)."""
    from safetensors.torch import save_file

    from ..synthetic import producer_config, producer_tensors

    dst = out / f"mla-eagle3-variant-{slug(variant.name)}"
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    built = recipe(variant.base, **variant.dims)
    config, tensors = producer_config(built), producer_tensors(built)
    variant.edit(config, tensors)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(dst / "model.safetensors"), metadata={"format": "pt"})
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return dst


def target_config(routing: str = "noaux_tc") -> JSONObject:
    """The tiny DeepSeek-V3 target's config.json: MoE from layer 1 (4 experts, 2 per token, 1 shared)."""
    d = DIMS
    cfg: JSONObject = {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": d.vocab,
        "hidden_size": d.hidden, "intermediate_size": 512, "moe_intermediate_size": 128,
        "num_hidden_layers": d.target_layers, "num_attention_heads": d.heads, "num_key_value_heads": d.heads,
        "n_shared_experts": 1, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
        "first_k_dense_replace": 1, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
        "q_lora_rank": 128, "kv_lora_rank": d.kv_lora_rank, "qk_rope_head_dim": d.qk_rope_head_dim,
        "qk_nope_head_dim": d.qk_nope_head_dim, "v_head_dim": d.v_head_dim, "hidden_act": "silu",
        "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    if routing == "noaux_tc":
        cfg.update(topk_method="noaux_tc", scoring_func="sigmoid")
    return cfg


def build_target(out: Path, routing: str = "noaux_tc") -> Path:
    """The seeded random target (transformers' DeepseekV3ForCausalLM; its router always has the correction bias)."""
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    cfg = target_config(routing)
    torch.manual_seed(TARGET_SEED)
    fields: dict[str, Any] = {k: v for k, v in cfg.items() if k != "torch_dtype"}
    model = DeepseekV3ForCausalLM(DeepseekV3Config(**fields))
    with torch.no_grad():  # transformers zero-initialises the bias; a nonzero one makes routing depend on it
        for name, p in model.named_parameters():
            if name.endswith("e_score_correction_bias"):
                p.copy_(torch.randn(p.shape) * 0.1)
    model.save_pretrained(out, safe_serialization=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")  # the config as stated, not re-serialised
    return out
