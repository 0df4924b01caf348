"""What a drafter architecture is: the decoder family a :class:`~eagleconv.spec.drafter.DrafterSpec` names.

An architecture is a subclass of :class:`Architecture` registered with
``@register`` in its own module of this package (``eagleconv.architectures.names()``
lists them).  It owns its whole decoder layer: the config fields it needs and
the ones it derives from tensor shapes, its attention and MLP tensors and
their shapes (fused or split projections), how it is recognised in a
checkpoint, its config model, its engines' RoPE and eps defaults, the class
name each layout writes for it, the tensors a synthetic drafter of this family
has and the example fixtures, the facts engine checks ask about and the verdicts
it expects from them, and its attention and MLP in the reference forward.  The
parts every EAGLE-3 drafter shares (fc, fc_norm, the three layer norms, norm,
lm_head, d2t/t2d) are written once in :mod:`eagleconv.spec.canonical`.

The hooks read a spec through :class:`~eagleconv.config.config_fields.DecoderShape` (the dimensions only), so this
package needs nothing from :mod:`eagleconv.spec.drafter`, which validates itself against it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ..support.jsonio import JSONObject, JSONValue
    from ..nn.store import WeightStore
    from ..nn.norm import NormOps
    from ..rope.rotary import ResolvedRope
    from ..nn.attention import LayerCache
    from ..config.config_fields import DecoderShape
    import torch
    from pydantic import BaseModel

    from ..io.reader import TensorInfo


@dataclass(frozen=True)
class TinyDims:
    """Small but non-degenerate sizes, so shape mix-ups show.

    ``target_hidden`` equals ``hidden`` by default because a drafter that
    borrows the target's embedding (most layouts ship none) must have the
    target's width; ``WIDE_TARGET`` is the Llama-3.3-70B-style case where the
    drafter is narrower than the target and ships its own embedding.
    """

    hidden: int = 32
    target_hidden: int = 32
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 8
    intermediate: int = 64
    vocab: int = 128
    draft_vocab: int = 64
    aux_ids: tuple[int, ...] = (2, 8, 13)  # vLLM numbering (hidden state entering layer i)
    target_layers: int = 16
    # MLA (Kimi K2.x style)
    q_lora_rank: int | None = 24  # None: q_proj instead of the q_a/q_b latent (vLLM 0.32 cannot load it)
    kv_lora_rank: int = 16
    qk_nope_head_dim: int = 8
    qk_rope_head_dim: int = 4
    v_head_dim: int = 12


@dataclass(frozen=True)
class Expected:
    """A tensor the spec implies, with its shape and whether a loader needs it."""

    shape: tuple[int, ...]
    required: bool
    why: str


@dataclass(frozen=True)
class InLayout:
    """How one layout writes a drafter of this family: its config ``architectures``, the model_types it rewrites
    (vLLM recognises a wrapped MLA drafter by model_type), the aux-id numbering it stores when not the layout's own,
    and why."""

    classes: tuple[str, ...]
    model_types: Mapping[str, str] = field(default_factory=dict)
    aux_convention: str | None = None
    # why the layout writes this family's class or model_type so, for an engine's sake: the conversion plan states it
    # whenever the written architectures or model_type differ from the source's
    why: str = ""


@dataclass(frozen=True)
class Example:
    """A committed example fixture (fixtures/generate.py writes one directory per example): recipe fields."""

    name: str
    producer: str
    eagle31: bool = False


@dataclass(frozen=True)
class Verdict:
    """What one engine profile is expected to say about a clean drafter of this family in one layout.

    ``layouts``: the layouts it applies to (empty: every layout that holds the family); ``errors``: the
    error-severity finding codes expected (empty: none, the drafter is servable); ``why``: the engine's reason.
    A layout states its own (``Layout.verdicts``: what an engine says of any family in it, ``layouts`` unused).
    """

    engine: str
    errors: frozenset[str]
    why: str
    layouts: frozenset[str] = frozenset()


Derive = Callable[[str, object, str], None]
"""``derive(field, value, how)``: record ``field = value`` (derived from a tensor shape) unless already known."""


def shape_of(tensors: Mapping[str, TensorInfo], name: str, dim: int) -> int | None:
    info = tensors.get(name)
    if info is None or len(info.shape) <= dim:
        return None
    return info.shape[dim]


def exact_div(a: int | None, b: int | None) -> int | None:
    if a is None or not b or a % b:
        return None
    return a // b


class Architecture:
    """Base class of every registered drafter architecture.  Subclasses set data and a few hooks.

    Detection runs in ascending ``priority``; the first architecture whose
    :meth:`claims` is true wins, and the ``fallback`` architecture (llama)
    takes whatever no other claims.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    priority: ClassVar[int] = 100
    fallback: ClassVar[bool] = False
    default_model_type: ClassVar[str]  # model_type written when a config has none
    model_types: ClassVar[frozenset[str]] = frozenset()  # config model_types that name this family
    marker_tensors: ClassVar[tuple[str, ...]] = ()  # canonical-name fragments only this family has
    attention_modules: ClassVar[tuple[str, ...]]  # the self_attn.* modules it may store (canonical)
    config_fields: ClassVar[tuple[str, ...]] = ()  # shape-bearing config fields beyond the shared ones
    rope_interleaved: ClassVar[bool] = False  # GPT-J (pairs) rather than neox (halves) rotation
    layouts: ClassVar[dict[str, InLayout]] = {}  # layout name -> how it writes this family (absent: cannot hold it)
    transformers_model_types: ClassVar[frozenset[str]] = frozenset()  # model_types transformers' AutoConfig reads
    # of those, the ones whose config class refuses hidden_size % num_attention_heads != 0 even beside an explicit
    # head_dim (transformers 5's LlamaConfig.validate_architecture; 4.x and vLLM's own math do not mind)
    transformers_heads_divide_hidden: ClassVar[frozenset[str]] = frozenset()
    # keys of this family's transformers config class that change nothing in a drafter -> who writes them (no EC006)
    harmless_config_keys: ClassVar[dict[str, str]] = {}
    mlp_modules: ClassVar[tuple[str, ...]] = ("gate_proj", "up_proj", "down_proj")  # the mlp.* modules (canonical)
    examples: ClassVar[tuple[Example, ...]] = ()  # committed example fixtures of this family
    # clean drafters of this family: what each engine profile reports (tests/architectures/test_contract.py checks them)
    verdicts: ClassVar[tuple[Verdict, ...]] = ()
    # an architecture this one computes exactly, from tensors rewritten by split_tensors (fused projections split)
    equivalent: ClassVar[str | None] = None
    # what vLLM's config class for this family falls back to when a config states none (the vllm layout's
    # documented defaults, and the reference forward's)
    default_rope_theta: ClassVar[float] = 10000.0
    default_rms_norm_eps: ClassVar[float] = 1e-6  # LlamaConfig / Qwen3Config / DeepseekV3Config
    # engine-check facts
    mla: ClassVar[bool] = False
    reads_norm_before_fc: ClassVar[bool] = True  # vLLM's MLA drafter has no input_norm
    # synthetic drafters: the names a producer writes for this family.  A producer's own recipe
    # (eagleconv/synthetic/<producer>.py) states what it writes differently for the families it knows; a family
    # written after the producer states it here, by producer name.
    synthetic_model_type: ClassVar[str]
    synthetic_architecture: ClassVar[dict[str, str]] = {}  # producer -> architectures[0] (default key "*")
    # producer -> what that producer writes differently for this family: "model_type", "eagle_config" entries,
    # "layer_output_ids" (numbers aux ids as layer outputs)
    synthetic_overrides: ClassVar[dict[str, dict[str, Any]]] = {}

    # -- config -----------------------------------------------------------------
    @classmethod
    def config_model(cls) -> type[BaseModel]:
        """The pydantic model an HF-style config of this family satisfies (types only, no defaults)."""
        raise NotImplementedError

    @classmethod
    def claims(cls, model_type: object, config_keys: set[str], names: set[str]) -> bool:
        """Whether a checkpoint is this family: its model_type, its config keys, or its tensors."""
        named = isinstance(model_type, str) and model_type in cls.model_types  # a non-string is EC005, not a family
        return named or any(m in n for n in names for m in cls.marker_tensors)

    @classmethod
    def derive(cls, tensors: Mapping[str, TensorInfo], values: Mapping[str, Any], derive: Derive) -> None:
        """Derive this family's own fields from tensor shapes (exactly, or not at all)."""

    @classmethod
    def derive_mlp(cls, tensors: Mapping[str, TensorInfo], values: Mapping[str, Any], derive: Derive) -> None:
        """Derive intermediate_size from the MLP's tensor shapes (SwiGLU: gate_proj's rows)."""
        derive("intermediate_size", shape_of(tensors, "layers.0.mlp.gate_proj.weight", 0),
               "from layers.0.mlp.gate_proj.weight")

    @classmethod
    def missing(cls, values: Mapping[str, JSONValue]) -> list[str]:
        """Shape-bearing fields this family needs that are still unknown."""
        return [k for k in cls.config_fields if k not in values]

    @classmethod
    def spec_fields(cls, values: Mapping[str, JSONValue]) -> dict[str, Any]:
        """The family's DecoderShape keyword arguments from canonical field values."""
        return {}

    @classmethod
    def config_values(cls, spec: DecoderShape) -> JSONObject:
        """The family's canonical field values of ``spec``, for writing a config (a None is written as null)."""
        return {}

    @classmethod
    def check_spec(cls, spec: DecoderShape) -> None:
        """Raise ValueError when ``spec`` lacks what this family needs."""

    # -- tensors ------------------------------------------------------------------
    @classmethod
    def attention_tensors(cls, spec: DecoderShape, prefix: str, width: int) -> dict[str, Expected]:
        """Canonical ``{prefix}self_attn.*`` tensors of one layer whose input is ``width`` wide."""
        raise NotImplementedError

    @classmethod
    def mlp_tensors(cls, spec: DecoderShape, prefix: str) -> dict[str, Expected]:
        """Canonical ``{prefix}mlp.*`` tensors of one layer (SwiGLU gate/up/down by default)."""
        H, inter = spec.hidden_size, spec.intermediate_size
        m = prefix + "mlp."
        out = {
            m + "gate_proj.weight": Expected((inter, H), True, "gate_proj [intermediate, hidden]"),
            m + "up_proj.weight": Expected((inter, H), True, "up_proj [intermediate, hidden]"),
            m + "down_proj.weight": Expected((H, inter), True, "down_proj [hidden, intermediate]"),
        }
        if spec.mlp_bias:
            out[m + "gate_proj.bias"] = Expected((inter,), True, "mlp_bias")
            out[m + "up_proj.bias"] = Expected((inter,), True, "mlp_bias")
            out[m + "down_proj.bias"] = Expected((H,), True, "mlp_bias")
        return out

    @classmethod
    def synthetic_mlp(cls, dims: TinyDims, w: Callable[..., torch.Tensor]) -> dict[str, torch.Tensor]:
        """Seeded MLP tensors (names relative to ``mlp.``) for a tiny drafter of ``dims``."""
        return {"gate_proj.weight": w(dims.intermediate, dims.hidden), "up_proj.weight": w(dims.intermediate, dims.hidden),
                "down_proj.weight": w(dims.hidden, dims.intermediate)}

    @classmethod
    def synthetic_attention(cls, dims: TinyDims, width: int, w: Callable[..., torch.Tensor],
                            norm: Callable[[int], torch.Tensor]) -> dict[str, torch.Tensor]:
        """Seeded attention tensors (names relative to ``self_attn.``) for a tiny drafter of ``dims``."""
        raise NotImplementedError

    @classmethod
    def synthetic_config(cls, dims: TinyDims) -> JSONObject:
        """Decoder config fields (beyond the shared ones) a producer writes for this family."""
        return {}

    # -- forward ------------------------------------------------------------------
    @classmethod
    def attention(cls, u: torch.Tensor, pos: torch.Tensor, cache: LayerCache | None, w: WeightStore, p: str,
                  spec: DecoderShape, rope: ResolvedRope, ops: NormOps, eps: float) -> tuple[torch.Tensor, LayerCache]:
        """The reference forward's self-attention of one decoder layer (``p`` = "layers.N.").

        ``u`` [B, n, in] (layer 0: cat(embeds, hidden), 2H wide), ``pos`` [n], ``cache`` the layer's
        (keys, values, positions) or None, ``w`` the weights (``w.linear``, ``w.get``, ``w.has``),
        ``rope`` the resolved RoPE, ``ops`` the norm ops.  Returns (output [B, n, H], new cache).
        """
        raise NotImplementedError(f"{cls.name} has no reference forward yet")

    @classmethod
    def split_tensors(cls, tensors: Mapping[str, torch.Tensor], spec: DecoderShape) -> dict[str, torch.Tensor]:
        """Canonical tensors rewritten as the ``equivalent`` architecture stores them (its forward must agree)."""
        raise NotImplementedError(f"{cls.name} states no equivalent architecture")

    # -- the decoder layer: norm and MLP hooks, and the layer every forward calls -------------------------------
    @classmethod
    def norm_scale(cls, stored: torch.Tensor) -> torch.Tensor:
        """What an RMSNorm multiplies by, from its stored weight: the weight itself (Llama, Qwen3, DeepSeek, Phi-3;
        a Gemma-style ``(1 + w)`` norm returns ``1 + stored``).  Every norm of the forward reads it through this."""
        return stored

    @classmethod
    def norm_stored(cls, scale: torch.Tensor) -> torch.Tensor:
        """The stored weight of a norm that multiplies by ``scale`` (the inverse of :meth:`norm_scale`): what an
        upgrade writes for a new norm, and a refit for a changed one."""
        return scale

    @classmethod
    def unit_norm(cls, *shape: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The stored weight that makes a norm the identity scale: what a loader leaves in an absent norm (vLLM
        initialises RMSNorm weights to it), a new norm without calibration, and a synthetic norm's centre."""
        import torch

        return cls.norm_stored(torch.ones(*shape, dtype=dtype))

    @classmethod
    def rms_norm(cls, ops: NormOps, x: torch.Tensor, w: WeightStore, name: str, eps: float) -> torch.Tensor:
        """RMSNorm of ``x`` with the norm stored as ``name``, through the norm ops (``ops.rms_norm``)."""
        return ops.rms_norm(x, cls.norm_scale(w.get(name)), eps)

    @classmethod
    def add_rms_norm(cls, ops: NormOps, x: torch.Tensor, residual: torch.Tensor, w: WeightStore, name: str,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """vLLM's fused residual add + RMSNorm: (norm(x + residual), x + residual)."""
        return ops.fused_add_rms_norm(x, residual, cls.norm_scale(w.get(name)), eps)

    @classmethod
    def decoder_layer(cls, u: torch.Tensor, residual: torch.Tensor, pos: torch.Tensor, cache: LayerCache | None,
                      w: WeightStore, p: str, spec: DecoderShape, rope: ResolvedRope, ops: NormOps,
                      eps: float) -> tuple[torch.Tensor, torch.Tensor, LayerCache]:
        """One decoder layer after its input norm, as vLLM's: attention over ``cache``, the residual add with
        post_attention_layernorm, the MLP.  Returns (MLP output, residual stream, new cache); the next layer's
        input norm adds the two (:meth:`add_rms_norm`).  The drafter's forward, the native target's, and the
        KV-cached target step all run their layers through this; what differs is the cache: None (a full pass),
        the drafter's (keys, values, positions) or a Ragged batch of them, or the target's slots (forward.kv_cache).
        """
        o, cache = cls.attention(u, pos, cache, w, p, spec, rope, ops, eps)
        h, residual = cls.add_rms_norm(ops, o, residual, w, p + "post_attention_layernorm.weight", eps)
        return cls.mlp(h, w, p), residual, cache

    @classmethod
    def mlp(cls, h: torch.Tensor, w: WeightStore, p: str) -> torch.Tensor:
        """The reference forward's MLP of one decoder layer: SwiGLU, down(silu(gate(h)) * up(h)) (vLLM: LlamaMLP)."""
        import torch.nn.functional as F

        m = p + "mlp."
        gate = w.linear(h, m + "gate_proj.weight", m + "gate_proj.bias")
        up = w.linear(h, m + "up_proj.weight", m + "up_proj.bias")
        return w.linear(F.silu(gate) * up, m + "down_proj.weight", m + "down_proj.bias")
