"""Pydantic models of the config.json files drafters ship, and the JSON Schemas eagleconv publishes.

The config models type-check what a file states (a flag must be a boolean,
a size a positive integer) but default nothing: absence is reported by the
layout reader, which knows which absences engines fill in silently.  They
allow unknown keys because Hugging Face configs carry many.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, StrictBool

from .drafter import DrafterSpec


class _Config(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)


class EagleConfigBlock(_Config):
    """The nested ``eagle_config`` object (vLLM, ModelOpt, TorchSpec, SGLang, TRT-LLM read parts of it)."""

    eagle_aux_hidden_state_layer_ids: list[int] | None = None
    use_aux_hidden_state: StrictBool | None = None
    norm_before_fc: StrictBool | None = None
    return_hidden_post_norm: StrictBool | None = None


class _Eagle3Fields(_Config):
    draft_vocab_size: PositiveInt | None = None
    target_hidden_size: PositiveInt | None = None
    num_aux_hidden_states: PositiveInt | None = None
    eagle_aux_hidden_state_layer_ids: list[int] | None = None
    fc_norm: StrictBool | None = Field(None, description="EAGLE-3.1 per-aux RMSNorm before fc")
    norm_before_fc: StrictBool | None = None
    norm_output: StrictBool | None = Field(None, description="EAGLE-3.1 post-norm feedback")
    norm_before_residual: StrictBool | None = None
    eagle_config: EagleConfigBlock | None = None


class _DecoderFields(_Config):
    model_type: str | None = None
    hidden_size: PositiveInt | None = None
    num_hidden_layers: PositiveInt | None = None
    num_attention_heads: PositiveInt | None = None
    intermediate_size: PositiveInt | None = None
    hidden_act: str | None = None
    rms_norm_eps: float | None = Field(None, gt=0)
    vocab_size: PositiveInt | None = None
    max_position_embeddings: PositiveInt | None = None
    rope_theta: float | None = Field(None, gt=0)
    rope_scaling: dict[str, Any] | None = None
    attention_bias: StrictBool | None = None
    mlp_bias: StrictBool | None = None


class LlamaDecoderFields(_DecoderFields):
    num_key_value_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None


class LlamaEagle3Config(LlamaDecoderFields, _Eagle3Fields):
    """HF-style EAGLE-3/3.1 Llama or Qwen3 drafter config (vLLM, SpecForge, TorchSpec, Automodel, ModelOpt, SafeAILab)."""

    architectures: list[str] | None = None


class DeepseekMlaEagle3Config(_DecoderFields, _Eagle3Fields):
    """EAGLE-3/3.1 DeepSeek-V2/V3 MLA drafter config (Kimi K2.x: model_type kimi_k2 or deepseek_v3)."""

    architectures: list[str] | None = None
    q_lora_rank: PositiveInt | None = None
    kv_lora_rank: PositiveInt | None = None
    qk_nope_head_dim: int | None = Field(None, ge=0)
    qk_rope_head_dim: int | None = Field(None, ge=0)
    v_head_dim: PositiveInt | None = None


class SpeculatorsVerifier(_Config):
    name_or_path: str | None = None
    architectures: list[str] = Field(default_factory=list)


class SpeculatorsProposal(_Config):
    proposal_type: str
    speculative_tokens: PositiveInt | None = None


class SpeculatorsConfigBlock(_Config):
    algorithm: str
    proposal_methods: list[SpeculatorsProposal] = Field(default_factory=list)
    default_proposal_method: str | None = None
    verifier: SpeculatorsVerifier | None = None


class SpeculatorsEagle3Config(_Eagle3Fields):
    """vLLM speculators format: ``speculators_model_type: eagle3`` with a nested transformer_layer_config."""

    architectures: list[str] | None = None
    speculators_model_type: str
    speculators_version: str | None = None
    speculators_config: SpeculatorsConfigBlock | None = None
    transformer_layer_config: LlamaDecoderFields


def config_model_for(config: dict[str, Any]) -> type[_Config]:
    """The schema a config.json should satisfy, chosen by its shape."""
    if "speculators_model_type" in config:
        return SpeculatorsEagle3Config
    if "kv_lora_rank" in config or config.get("model_type") in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        return DeepseekMlaEagle3Config
    return LlamaEagle3Config


PUBLISHED: dict[str, str] = {
    "drafter-spec": "eagleconv.drafter:DrafterSpec",
    "config-llama-eagle3": "eagleconv.schemas:LlamaEagle3Config",
    "config-deepseek-mla-eagle3": "eagleconv.schemas:DeepseekMlaEagle3Config",
    "config-speculators-eagle3": "eagleconv.schemas:SpeculatorsEagle3Config",
    "report-inspect": "eagleconv.report:InspectReport",
    "report-convert": "eagleconv.report:ConvertReport",
    "report-validate": "eagleconv.report:ValidationReport",
    "report-push": "eagleconv.hub:PushReport",
    "report-pull": "eagleconv.hub:PullReport",
}


def json_schemas() -> dict[str, str]:
    """File name -> JSON Schema text for everything eagleconv publishes in schemas/."""
    from importlib import import_module

    out = {}
    for stem, target in PUBLISHED.items():
        module, _, attr = target.partition(":")
        model: type[BaseModel] = getattr(import_module(module), attr)
        out[f"{stem}.schema.json"] = json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"
    return out


def write_schemas(directory: str | Path) -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in json_schemas().items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written


__all__ = ["DeepseekMlaEagle3Config", "DrafterSpec", "LlamaEagle3Config", "SpeculatorsEagle3Config",
           "config_model_for", "json_schemas", "write_schemas"]
