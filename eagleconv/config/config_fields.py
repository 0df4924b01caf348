"""The typed fields an EAGLE-3 drafter's config.json may state, shared by the architectures' config models.

A leaf (pydantic only): the architecture modules build their config models from these and
:mod:`eagleconv.readers.schemas` publishes them, so neither imports the other to get them.
Types only, no defaults: absence is the layout reader's business.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, StrictBool


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
    rope_parameters: dict[str, Any] | None = None
    attention_bias: StrictBool | None = None
    mlp_bias: StrictBool | None = None


class MlaDims(BaseModel):
    """DeepSeek-V2/V3 multi-head latent attention dimensions (Kimi K2.x drafters)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    q_lora_rank: int | None = Field(..., ge=1)
    kv_lora_rank: int = Field(..., ge=1)
    qk_nope_head_dim: int = Field(..., ge=0)
    qk_rope_head_dim: int = Field(..., ge=0)
    v_head_dim: int = Field(..., ge=1)


class DecoderShape(Protocol):
    """The dimensions a decoder layer is built from: what an architecture reads of a spec.

    :class:`eagleconv.spec.drafter.DrafterSpec` satisfies it, and so does a native target's own description
    (forward.native_target): an architecture's hooks are typed against this, not against the drafter's spec,
    so ``architectures`` needs nothing from ``drafter`` (which validates itself against the architectures).
    """

    @property
    def hidden_size(self) -> int: ...

    @property
    def intermediate_size(self) -> int: ...

    @property
    def num_attention_heads(self) -> int: ...

    @property
    def num_key_value_heads(self) -> int | None: ...

    @property
    def head_dim(self) -> int | None: ...

    @property
    def attention_bias(self) -> bool: ...

    @property
    def mlp_bias(self) -> bool: ...

    @property
    def mla(self) -> MlaDims | None: ...
