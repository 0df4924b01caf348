"""The canonical drafter description every layout is read into and written from.

A :class:`DrafterSpec` says what a drafter *is*, independent of how any
trainer spells it: dimensions, target and draft vocabularies, which target
layers feed it (with the numbering convention stated), the EAGLE-3/3.1 flags,
who owns the embeddings and the LM head, dtype and RoPE.  Canonical tensor
names are vLLM's on-disk names (``layers.0.*``, ``fc.weight``, ``d2t``...).
Validation, forward passes and engine profiles all start from this one model.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Architecture = Literal["llama", "qwen3", "deepseek_mla"]
Owner = Literal["drafter", "target"]

AuxConvention = Literal["hidden_state_index", "layer_output"]
"""How an aux layer id names a target hidden state.

``hidden_state_index``: id ``i`` is the residual stream *entering* target layer
``i`` (= Hugging Face ``output_hidden_states[i]``; id ``L`` is the pre-final-norm
state).  vLLM, speculators and SafeAILab use it; vLLM's default is (2, L//2, L-3).

``layer_output``: id ``i`` is the *output* of 0-based target layer ``i``, i.e.
``hidden_state_index`` ``i + 1``.  SpecForge uses it (default [1, L//2-1, L-4]).
"""

AUX_CONVENTION_OFFSET: dict[str, int] = {"hidden_state_index": 0, "layer_output": 1}

EAGLE31_FLAGS = ("fc_norm", "norm_output")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class EagleFlags(_Frozen):
    """Switches that change the drafter's math.  All default to off (plain EAGLE-3)."""

    fc_norm: bool = Field(False, description="EAGLE-3.1: one RMSNorm per captured hidden state before fc (fc_norm.{i}.weight)")
    norm_before_fc: bool = Field(False, description="one RMSNorm over the concatenated hidden states before fc (input_norm.weight)")
    norm_output: bool = Field(False, description="EAGLE-3.1: feed the post-norm hidden state to the next draft step")
    norm_before_residual: bool = Field(False, description="layer 0 residual is hidden_norm(g) instead of g")
    use_aux_hidden_state: bool = Field(True, description="False: no fc; the drafter reads the target's last hidden state")

    @property
    def eagle_version(self) -> Literal["3", "3.1"]:
        return "3.1" if any(getattr(self, f) for f in EAGLE31_FLAGS) else "3"

    @property
    def eagle31_flags(self) -> list[str]:
        return [f for f in EAGLE31_FLAGS if getattr(self, f)]


class AuxLayers(_Frozen):
    """Which target hidden states feed the drafter's fc, and how the ids are numbered."""

    count: int = Field(..., ge=1, description="K: number of captured hidden states (fc input = K x target_hidden_size)")
    ids: tuple[int, ...] | None = Field(None, description="target layer ids as the checkpoint states them, or None if absent")
    convention: AuxConvention | None = Field(None, description="numbering convention of `ids`; required when ids are given")

    @model_validator(mode="after")
    def _ids_have_convention(self) -> AuxLayers:
        if self.ids is not None:
            if self.convention is None:
                raise ValueError("aux layer ids need an explicit numbering convention")
            if len(self.ids) != self.count:
                raise ValueError(f"{len(self.ids)} aux layer ids for {self.count} aux hidden states")
        return self

    def ids_as(self, convention: AuxConvention) -> tuple[int, ...] | None:
        """The same target layers, numbered in ``convention``."""
        if self.ids is None or self.convention is None:
            return None
        shift = AUX_CONVENTION_OFFSET[self.convention] - AUX_CONVENTION_OFFSET[convention]
        return tuple(i + shift for i in self.ids)


class MlaDims(_Frozen):
    """DeepSeek-V2/V3 multi-head latent attention dimensions (Kimi K2.x drafters)."""

    q_lora_rank: int | None = Field(..., ge=1)
    kv_lora_rank: int = Field(..., ge=1)
    qk_nope_head_dim: int = Field(..., ge=0)
    qk_rope_head_dim: int = Field(..., ge=0)
    v_head_dim: int = Field(..., ge=1)


class Verifier(_Frozen):
    """The target model the drafter was trained against, when the checkpoint names it."""

    name_or_path: str | None = None
    architectures: tuple[str, ...] = ()


class DrafterSpec(_Frozen):
    """One EAGLE-3/3.1 drafter, independent of the layout it is stored in."""

    architecture: Architecture
    model_type: str = Field(..., description="the decoder's Hugging Face model_type (llama, qwen3, deepseek_v3, kimi_k2...)")
    hidden_size: int = Field(..., ge=1)
    num_hidden_layers: int = Field(..., ge=1, description="as the config states it (validation compares it with the tensors)")
    num_attention_heads: int = Field(..., ge=1)
    num_key_value_heads: int | None = Field(None, ge=1, description="GQA heads; None for MLA")
    head_dim: int | None = Field(None, ge=1, description="attention head dim; None for MLA")
    intermediate_size: int = Field(..., ge=1)
    hidden_act: str = "silu"
    rms_norm_eps: float | None = None
    target_hidden_size: int = Field(..., ge=1)
    vocab_size: int = Field(..., ge=1, description="target vocabulary (embed_tokens rows, t2d length)")
    draft_vocab_size: int = Field(..., ge=1, description="draft vocabulary (lm_head rows, d2t length)")
    aux: AuxLayers
    flags: EagleFlags = EagleFlags()
    embed_tokens: Owner = Field(..., description="'target': the engine shares the target's embedding")
    lm_head: Owner = Field(..., description="'target': the engine shares the target's LM head")
    dtype: str | None = Field(None, description="floating dtype of the weights (safetensors name, e.g. BF16)")
    rope: dict[str, Any] = Field(default_factory=dict, description="rope_theta / rope_scaling / rope_parameters as stated")
    max_position_embeddings: int | None = None
    attention_bias: bool = False
    mlp_bias: bool = False
    mla: MlaDims | None = None
    verifier: Verifier | None = None
    extra: dict[str, Any] = Field(default_factory=dict, description="config keys carried through unchanged")

    @model_validator(mode="after")
    def _consistent(self) -> DrafterSpec:
        if (self.architecture == "deepseek_mla") != (self.mla is not None):
            raise ValueError("MLA dimensions are required for deepseek_mla drafters and only for them")
        if self.mla is None and (self.head_dim is None or self.num_key_value_heads is None):
            raise ValueError("head_dim and num_key_value_heads are required for llama/qwen3 drafters")
        if self.draft_vocab_size > self.vocab_size:
            raise ValueError(f"draft_vocab_size {self.draft_vocab_size} exceeds vocab_size {self.vocab_size}")
        return self

    @property
    def eagle_version(self) -> Literal["3", "3.1"]:
        return self.flags.eagle_version

    @property
    def compressed_vocab(self) -> bool:
        return self.draft_vocab_size < self.vocab_size
