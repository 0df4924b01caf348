"""Deterministic tiny drafters in every producer's own layout, for tests, docs and benchmarks.

Each producer's config is written the way that producer writes it (field
names, nesting, aux-id numbering), *independently* of eagleconv's layout
tables, so tests that read these fixtures check the tables against the
producers rather than against themselves.  The same seed gives the same
canonical tensors in every layout, so bytes can be compared across layouts.

Each producer's recipe is its own module here (``vllm.py``, ``specforge.py``...: a
:class:`~eagleconv.synthetic.base.Producer` subclass registered by ``@register``), discovered from the
directory; a producer written elsewhere (a test, a plugin) calls :func:`register` itself.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import architectures
from ..architectures.base import TinyDims
from ..support._extras import need
from ..support.jsonio import JSONObject
from ..support.registry import import_entries, registrar
from .base import DrafterRecipe, Producer, decoder_config

if TYPE_CHECKING:
    import torch

RECIPES: dict[str, type[Producer]] = {}
register = registrar(RECIPES, "producer recipe")
"""Class decorator: add a producer's recipe (its name is the layout it writes; names must be unique)."""


WIDE_TARGET = TinyDims(target_hidden=48)
# Kimi K2's MLA latent (kv_lora_rank 512 + qk_rope_head_dim 64 = 576): the one width every vLLM 0.32 MLA backend,
# the CPU one included, runs (the default 16 + 4 is outside vLLM's set and fails at its first forward)
KIMI_LATENT = TinyDims(kv_lora_rank=512, qk_rope_head_dim=64)


def producer(name: str) -> type[Producer]:
    """The recipe of producer ``name``; ValueError names the known ones."""
    try:
        return RECIPES[name]
    except KeyError:
        raise ValueError(f"unknown producer {name!r}; choose one of {tuple(RECIPES)}") from None


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


def check_recipe(recipe: DrafterRecipe) -> None:
    """Raise ValueError for a recipe its producer cannot write (its exporter could not emit it)."""
    known = RECIPES.get(recipe.producer)
    if recipe.eagle31 and known is not None and "eagle31" in known.cannot_write:
        raise ValueError(known.cannot_write["eagle31"])


def producer_config(recipe: DrafterRecipe) -> JSONObject:
    """config.json as the recipe's producer writes it (each recipe module's docstring says which exporter that is)."""
    check_recipe(recipe)
    p = producer(recipe.producer)
    return p.config(recipe, decoder_config(recipe, p))


def producer_tensors(recipe: DrafterRecipe) -> dict[str, torch.Tensor]:
    """The canonical tensors renamed and filtered the way the producer stores them."""
    t = canonical_tensors(recipe)
    p = producer(recipe.producer)
    embed = p.embed_tokens if recipe.embed_tokens is None else recipe.embed_tokens
    if not embed:
        t.pop("embed_tokens.weight")
    for name in p.without:
        t.pop(name)
    return {p.stored_name(k): v for k, v in t.items()}


def make_drafter(directory: str | Path, recipe: DrafterRecipe | None = None, **overrides: Any) -> Path:
    """Write a tiny drafter checkpoint in its producer's layout; returns the directory."""
    need("torch", "eagleconv.synthetic")
    import torch
    from safetensors.torch import save_file

    recipe = replace(recipe or DrafterRecipe(), **overrides)
    check_recipe(recipe)
    p = producer(recipe.producer)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tensors = producer_tensors(recipe)
    (out / "config.json").write_text(json.dumps(producer_config(recipe), indent=2) + "\n")
    if p.pickle:
        torch.save(tensors, out / "pytorch_model.bin")
    else:
        metadata = {"format": "pt", **p.metadata}
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


import_entries(__name__, __path__)

PRODUCERS = tuple(RECIPES)
"""The producers shipped (one recipe module each, in name order); ``RECIPES`` also holds any registered later."""

__all__ = ["KIMI_LATENT", "PRODUCERS", "RECIPES", "WIDE_TARGET", "DrafterRecipe", "Producer", "TinyDims",
           "canonical_tensors", "check_recipe", "make_drafter", "make_target_config", "producer", "producer_config",
           "producer_tensors", "register"]
