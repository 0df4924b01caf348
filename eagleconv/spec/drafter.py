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

from .. import architectures
from ..config.config_fields import MlaDims  # (DrafterSpec.mla) a leaf, so an architecture builds one without importing drafter
from ..rope import ROPE_KEYS, rope_kind

ArchitectureName = str
"""A registered drafter architecture's name (``eagleconv.architectures.names()`` lists them)."""
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


RopeScaling = Literal["none", "linear", "dynamic", "llama3", "yarn", "deepseek_yarn"]

ROPE_PARAMETERS: dict[str, tuple[str, ...]] = {
    # scaling type -> the parameters it needs (read exactly; an absent one is an error, never a default)
    "none": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor",),
    "deepseek_yarn": ("factor",),
}
_ROPE_FLOATS = ("factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                "attn_factor", "extrapolation_factor")
_MODELLED_ROPE_KEYS = frozenset({"type", "rope_type", "rope_theta", "original_max_position_embeddings",
                                 "apply_yarn_scaling", "truncate", *_ROPE_FLOATS})


class Rope(_Frozen):
    """Rotary position embedding as the drafter computes it.

    Read from either spelling (``rope_theta`` + ``rope_scaling``, or
    transformers 5's ``rope_parameters``).  ``stated`` keeps the config keys
    exactly as read so conversion writes them back unchanged; when present it
    must parse to the typed fields (one truth, two views).
    """

    theta: float | None = Field(None, gt=0, description="RoPE base; None when neither the config nor the layout states it")
    scaling: RopeScaling = Field("none", description="'yarn' on an MLA drafter runs as deepseek_yarn (vLLM rewrites it)")
    factor: float | None = None
    original_max_position_embeddings: int | None = None
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    beta_fast: float | None = None
    beta_slow: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attn_factor: float | None = None
    extrapolation_factor: float | None = None
    interleaved: bool = Field(False, description="GPT-J pairwise rotation (MLA) instead of neox halves")
    stated: dict[str, Any] = Field(default_factory=dict, description="the stated rope in both spellings, equal: "
                                   "rope_theta + rope_scaling and rope_parameters")

    @classmethod
    def from_config(cls, stated: dict[str, Any], *, interleaved: bool = False, theta: float | None = None) -> Rope:
        """Parse the stated rope keys; ValueError names the first problem.  ``theta``: a default when none is stated."""
        params: dict[str, Any] = {}
        scaling = stated.get("rope_scaling")
        parameters = stated.get("rope_parameters")
        for key, block in (("rope_scaling", scaling), ("rope_parameters", parameters)):
            if block is None:
                continue
            if not isinstance(block, dict):
                raise ValueError(f"{key} must be an object, not {block!r}")
            for k, v in block.items():
                if k in params and params[k] != v and k not in ("type", "rope_type"):
                    raise ValueError(f"rope_scaling.{k} = {params[k]!r} and rope_parameters.{k} = {v!r} disagree")
                params[k] = v
        stated_theta = stated.get("rope_theta", params.get("rope_theta"))
        if "rope_theta" in stated and "rope_theta" in params and stated["rope_theta"] != params["rope_theta"]:
            raise ValueError(f"rope_theta {stated['rope_theta']!r} and rope_parameters.rope_theta "
                             f"{params['rope_theta']!r} disagree")
        if stated_theta is not None and (isinstance(stated_theta, bool) or not isinstance(stated_theta, int | float)):
            raise ValueError(f"rope_theta must be a number, not {stated_theta!r}")
        kind = rope_kind(params)
        kind = "none" if kind in ("default", None) else kind
        if kind not in ROPE_PARAMETERS:
            raise ValueError(f"rope type {kind!r} is not one eagleconv models ({', '.join(ROPE_PARAMETERS)})")
        if interleaved and kind == "yarn":
            kind = "deepseek_yarn"
        missing = [k for k in ROPE_PARAMETERS[kind] if params.get(k) is None]
        if missing:
            raise ValueError(f"rope type {kind} needs {', '.join(missing)}")
        typed: dict[str, Any] = {}
        for k in _ROPE_FLOATS:
            v = params.get(k)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, int | float):
                    raise ValueError(f"rope parameter {k} must be a number, not {v!r}")
                typed[k] = float(v)
        orig = params.get("original_max_position_embeddings")
        if orig is not None:
            if isinstance(orig, bool) or not isinstance(orig, int):
                raise ValueError(f"original_max_position_embeddings must be an integer, not {orig!r}")
            typed["original_max_position_embeddings"] = orig
        return cls(theta=float(stated_theta) if stated_theta is not None else theta, scaling=kind, interleaved=interleaved,
                   stated=dict(stated), **typed)

    @property
    def ignored_keys(self) -> list[str]:
        """Stated rope parameters eagleconv does not model (reported when read)."""
        out = []
        for key in ("rope_scaling", "rope_parameters"):
            block = self.stated.get(key)
            if isinstance(block, dict):
                out += [f"{key}.{k}" for k in block if k not in _MODELLED_ROPE_KEYS]
        return out


class Verifier(_Frozen):
    """The target model the drafter was trained against, when the checkpoint names it."""

    name_or_path: str | None = None
    architectures: tuple[str, ...] = ()


class DrafterSpec(_Frozen):
    """One EAGLE-3/3.1 drafter, independent of the layout it is stored in."""

    architecture: ArchitectureName = Field(..., description="a registered drafter architecture (the name of one of eagleconv.architectures)")
    model_type: str = Field(..., description="the decoder's Hugging Face model_type (llama, qwen3, deepseek_v3, kimi_k2...)")
    hidden_size: int = Field(..., ge=1)
    num_hidden_layers: int = Field(..., ge=1, description="as the config states it (validation compares it with the tensors)")
    num_attention_heads: int = Field(..., ge=1)
    num_key_value_heads: int | None = Field(None, ge=1, description="GQA heads; None for MLA")
    head_dim: int | None = Field(None, ge=1, description="attention head dim; None for MLA")
    intermediate_size: int = Field(..., ge=1)
    hidden_act: str = "silu"
    rms_norm_eps: float | None = Field(None, gt=0, description="eps of every RMSNorm; None when neither the config nor "
                                       "the layout states it")
    target_hidden_size: int = Field(..., ge=1)
    vocab_size: int = Field(..., ge=1, description="target vocabulary (embed_tokens rows, t2d length)")
    draft_vocab_size: int = Field(..., ge=1, description="draft vocabulary (lm_head rows, d2t length)")
    aux: AuxLayers
    flags: EagleFlags = EagleFlags()
    embed_tokens: Owner = Field(..., description="'target': the engine shares the target's embedding")
    lm_head: Owner = Field(..., description="'target': the engine shares the target's LM head")
    dtype: str | None = Field(None, description="floating dtype of the weights (safetensors name, e.g. BF16)")
    rope: Rope = Field(Rope(), description="typed RoPE (theta, scaling and its parameters)")
    max_position_embeddings: int | None = None
    attention_bias: bool = False
    mlp_bias: bool = False
    mla: MlaDims | None = None
    verifier: Verifier | None = None
    extra: dict[str, Any] = Field(default_factory=dict, description="config keys carried through unchanged")
    defaulted: tuple[str, ...] = Field((), description="fields the source config did not state, taken from its layout's "
                                       "documented default (reported; conversion does not write them)")

    @model_validator(mode="before")
    @classmethod
    def _rope_from_config_keys(cls, data: Any) -> Any:
        """``rope={"rope_theta": ..., "rope_scaling": ...}`` (config spelling) is parsed into the typed Rope."""
        rope = data.get("rope") if isinstance(data, dict) else None
        if isinstance(rope, dict) and rope and set(rope) <= set(ROPE_KEYS):
            arch = architectures.ARCHITECTURES.get(data.get("architecture", ""))
            data = {**data, "rope": Rope.from_config(rope, interleaved=arch.rope_interleaved if arch else False)}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> DrafterSpec:
        if self.architecture not in architectures.ARCHITECTURES:
            raise ValueError(f"unknown architecture {self.architecture!r}; known: {', '.join(architectures.names())}")
        arch = architectures.get(self.architecture)
        arch.check_spec(self)
        if self.rope.stated:
            parsed = Rope.from_config(self.rope.stated, interleaved=arch.rope_interleaved, theta=self.rope.theta)
            if parsed != self.rope:
                raise ValueError("rope: the typed fields disagree with the stated rope keys")
        if self.draft_vocab_size > self.vocab_size:
            raise ValueError(f"draft_vocab_size {self.draft_vocab_size} exceeds vocab_size {self.vocab_size}")
        return self

    @property
    def arch(self) -> type[architectures.Architecture]:
        """The registered architecture this spec names: it owns the decoder layer (norms, attention, MLP)."""
        return architectures.get(self.architecture)

    @property
    def eagle_version(self) -> Literal["3", "3.1"]:
        return self.flags.eagle_version

    @property
    def compressed_vocab(self) -> bool:
        return self.draft_vocab_size < self.vocab_size
