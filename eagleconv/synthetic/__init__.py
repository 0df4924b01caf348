"""Deterministic tiny drafters in every producer's own layout, for tests, docs and benchmarks.

Each producer's config is written the way that producer writes it (field
names, nesting, aux-id numbering), *independently* of eagleconv's layout
tables, so tests that read these fixtures check the tables against the
producers rather than against themselves.  The same seed gives the same
canonical tensors in every layout, so bytes can be compared across layouts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import architectures
from ..architectures.base import TinyDims
from ..support._extras import need
from ..support.jsonio import JSONObject, JSONValue

if TYPE_CHECKING:
    import torch

PRODUCERS = ("eagle", "specforge", "torchspec", "vllm", "speculators", "automodel", "modelopt")


WIDE_TARGET = TinyDims(target_hidden=48)
# Kimi K2's MLA latent (kv_lora_rank 512 + qk_rope_head_dim 64 = 576): the one width every vLLM 0.32 MLA backend,
# the CPU one included, runs (the default 16 + 4 is outside vLLM's set and fails at its first forward)
KIMI_LATENT = TinyDims(kv_lora_rank=512, qk_rope_head_dim=64)


@dataclass(frozen=True)
class DrafterRecipe:
    """What to build.  ``eagle31`` turns on fc_norm + norm_output (the paper's EAGLE-3.1)."""

    producer: str = "specforge"
    architecture: str = "llama"  # a registered architecture (eagleconv.architectures.names())
    eagle31: bool = False
    norm_before_fc: bool = False
    embed_tokens: bool | None = None  # None: what the producer ships by default
    layers: int = 1
    dims: TinyDims = field(default_factory=TinyDims)
    dtype: str = "bfloat16"
    seed: int = 0


def canonical_tensors(recipe: DrafterRecipe) -> dict[str, torch.Tensor]:
    """The drafter's tensors under canonical (vLLM) names, as torch tensors, seeded."""
    need("torch", "eagleconv.synthetic")
    import torch

    d = recipe.dims
    g = torch.Generator().manual_seed(recipe.seed)
    dtype = getattr(torch, recipe.dtype)
    K = len(d.aux_ids)

    def w(*shape: int, scale: float = 0.05) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * scale).to(dtype)

    arch = architectures.get(recipe.architecture)

    def norm(n: int) -> torch.Tensor:  # around the stored weight of a unit scale (1.0, or 0.0 for a (1 + w) norm)
        return (arch.unit_norm(n) + 0.1 * torch.randn(n, generator=g)).to(dtype)

    t: dict[str, torch.Tensor] = {}
    t["embed_tokens.weight"] = w(d.vocab, d.hidden, scale=0.5)
    t["fc.weight"] = w(d.hidden, K * d.target_hidden)
    if recipe.norm_before_fc:
        t["input_norm.weight"] = norm(K * d.target_hidden)
    if recipe.eagle31:
        for i in range(K):
            t[f"fc_norm.{i}.weight"] = norm(d.target_hidden)
    for n in range(recipe.layers):
        p = f"layers.{n}."
        width = 2 * d.hidden if n == 0 else d.hidden
        for name in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
            t[f"{p}{name}.weight"] = norm(d.hidden)
        t.update({f"{p}self_attn.{k}": v for k, v in arch.synthetic_attention(d, width, w, norm).items()})
        t.update({f"{p}mlp.{k}": v for k, v in arch.synthetic_mlp(d, w).items()})
    t["norm.weight"] = norm(d.hidden)
    t["lm_head.weight"] = w(d.draft_vocab, d.hidden)
    rng = np.random.default_rng(recipe.seed)
    used = np.sort(rng.choice(d.vocab, size=d.draft_vocab, replace=False)).astype(np.int64)
    t["d2t"] = torch.from_numpy(used - np.arange(d.draft_vocab, dtype=np.int64))
    t2d = np.zeros(d.vocab, dtype=bool)
    t2d[used] = True
    t["t2d"] = torch.from_numpy(t2d)
    return t


def _decoder_config(recipe: DrafterRecipe) -> JSONObject:
    d = recipe.dims
    cfg: JSONObject = {
        "model_type": architectures.get(recipe.architecture).synthetic_model_type,
        "hidden_size": d.hidden,
        "intermediate_size": d.intermediate,
        "num_attention_heads": d.heads,
        "num_hidden_layers": recipe.layers,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-05,
        "vocab_size": d.vocab,
        "max_position_embeddings": 4096,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
    }
    cfg.update(architectures.get(recipe.architecture).synthetic_config(d))
    return cfg


# What a producer's own writer cannot emit, so the generator refuses it rather than build a file no such
# producer writes (SafeAILab EAGLE; ModelOpt's hf_spec_export.py).
_CANNOT_WRITE = {
    ("modelopt", "eagle31"): "ModelOpt's exporter (hf_spec_export.py _check_valid_sd) asserts that every key is in "
                             "its allow-list, which has no fc_norm: it cannot write an EAGLE-3.1 drafter",
    ("eagle", "eagle31"): "SafeAILab EAGLE has no EAGLE-3.1 switch (fc_norm / norm_output)",
}


def check_recipe(recipe: DrafterRecipe) -> None:
    """Raise ValueError for a recipe its producer cannot write."""
    if recipe.eagle31 and (recipe.producer, "eagle31") in _CANNOT_WRITE:
        raise ValueError(_CANNOT_WRITE[(recipe.producer, "eagle31")])


def producer_config(recipe: DrafterRecipe) -> JSONObject:
    """config.json as the recipe's producer writes it (each layout module's docstring says which exporter that is)."""
    check_recipe(recipe)
    d, p = recipe.dims, recipe.producer
    flags31 = {"fc_norm": recipe.eagle31, "norm_output": recipe.eagle31}
    arch = architectures.get(recipe.architecture)
    arch_name = arch.synthetic_architecture.get(p, arch.synthetic_architecture["*"])
    overrides = arch.synthetic_overrides.get(p, {})
    base = _decoder_config(recipe)
    if "model_type" in overrides:
        base["model_type"] = overrides["model_type"]
    layer_output_ids: list[JSONValue] = [i - 1 for i in d.aux_ids]
    if p == "eagle":  # the hand-copied SafeAILab template: no ids, no head_dim
        base.pop("head_dim", None)
        return {"architectures": ["LlamaForCausalLM"], **base, "draft_vocab_size": d.draft_vocab,
                "target_hidden_size": d.target_hidden, "torch_dtype": recipe.dtype}
    if p == "specforge":
        return {"architectures": ["LlamaForCausalLMEagle3"], **base, "draft_vocab_size": d.draft_vocab,
                "target_hidden_size": d.target_hidden, **flags31, "torch_dtype": recipe.dtype,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": layer_output_ids}}
    if p == "torchspec":
        ids: list[JSONValue] = layer_output_ids if overrides.get("layer_output_ids") else list(d.aux_ids)
        eagle_config: JSONObject = {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True,
                                        **overrides.get("eagle_config", {})}
        return {"architectures": [arch_name], **base, "draft_vocab_size": d.draft_vocab,
                "target_hidden_size": d.target_hidden, "num_aux_hidden_states": len(d.aux_ids), **flags31,
                "eagle_config": eagle_config, "torch_dtype": recipe.dtype, "_torchspec_version": "0.2.0"}
    if p == "vllm":
        cfg: JSONObject = {"architectures": [arch_name], **base, "draft_vocab_size": d.draft_vocab,
                           "target_hidden_size": d.target_hidden, "eagle_aux_hidden_state_layer_ids": list(d.aux_ids),
                           **flags31, "torch_dtype": recipe.dtype}
        if recipe.norm_before_fc:
            cfg["norm_before_fc"] = True
        return cfg
    if p == "speculators":
        return {
            "architectures": ["Eagle3Speculator"],
            "speculators_model_type": "eagle3",
            "speculators_version": "0.9.0",
            "speculators_config": {
                "algorithm": "eagle3",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3,
                                      "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                "default_proposal_method": "greedy",
                "verifier": {"name_or_path": "meta-llama/Llama-3.1-8B-Instruct", "architectures": ["LlamaForCausalLM"]},
            },
            "transformer_layer_config": base,
            "draft_vocab_size": d.draft_vocab,
            "target_hidden_size": d.target_hidden,
            "norm_before_residual": False,
            "norm_before_fc": recipe.norm_before_fc,
            **flags31,
            "eagle_aux_hidden_state_layer_ids": list(d.aux_ids),
            "embed_requires_grad": False,
            "torch_dtype": recipe.dtype,
        }
    if p == "automodel":
        return {"architectures": ["LlamaEagle3DraftModel"], **base, "draft_vocab_size": d.draft_vocab,
                "target_hidden_size": d.target_hidden, "num_aux_hidden_states": len(d.aux_ids), **flags31,
                "torch_dtype": recipe.dtype}
    if p == "modelopt":
        eagle_config = {"eagle_aux_hidden_state_layer_ids": list(d.aux_ids), "use_aux_hidden_state": True,
                        "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                        "use_mtp_layernorm": False, "next_layer_regular": True, "parallel_draft_step": 1,
                        "parallel_draft_heads_num_layers": 1}
        if recipe.norm_before_fc:
            eagle_config["norm_before_fc"] = True
        return {"architectures": [arch_name], **base, "draft_vocab_size": d.draft_vocab,
                "target_hidden_size": d.target_hidden, "eagle_config": eagle_config, "torch_dtype": recipe.dtype}
    raise ValueError(f"unknown producer {p!r}; choose one of {PRODUCERS}")


_DEFAULT_EMBED = {"torchspec": True, "speculators": True, "automodel": True}


def producer_tensors(recipe: DrafterRecipe) -> dict[str, torch.Tensor]:
    """The canonical tensors renamed and filtered the way the producer stores them."""
    t = canonical_tensors(recipe)
    p = recipe.producer
    embed = _DEFAULT_EMBED.get(p, False) if recipe.embed_tokens is None else recipe.embed_tokens
    if not embed:
        t.pop("embed_tokens.weight")
    if p == "modelopt":
        t.pop("t2d")
    if p in ("eagle", "specforge"):
        t = {("midlayer." + k[len("layers.0."):] if k.startswith("layers.0.") else k): v for k, v in t.items()}
    if p == "automodel":
        t = {(k if k.startswith("lm_head.") or k in ("d2t", "t2d") else "model." + k): v for k, v in t.items()}
    return t


def make_drafter(directory: str | Path, recipe: DrafterRecipe | None = None, **overrides: Any) -> Path:
    """Write a tiny drafter checkpoint in its producer's layout; returns the directory."""
    need("torch", "eagleconv.synthetic")
    import torch
    from safetensors.torch import save_file

    recipe = replace(recipe or DrafterRecipe(), **overrides)
    check_recipe(recipe)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tensors = producer_tensors(recipe)
    (out / "config.json").write_text(json.dumps(producer_config(recipe), indent=2) + "\n")
    if recipe.producer == "eagle":
        torch.save(tensors, out / "pytorch_model.bin")
    else:
        metadata = {"format": "pt"}
        if recipe.producer == "torchspec":
            metadata["torchspec_version"] = "0.2.0"
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"), metadata=metadata)
    return out


def make_target_config(directory: str | Path, dims: TinyDims | None = None) -> Path:
    """A target model's config.json (no weights) matching TinyDims, for --target checks."""
    d = dims or TinyDims()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d.target_hidden,
           "intermediate_size": 4 * d.target_hidden, "num_attention_heads": d.heads, "num_key_value_heads": d.kv_heads,
           "num_hidden_layers": d.target_layers, "vocab_size": d.vocab, "rms_norm_eps": 1e-5,
           "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out
