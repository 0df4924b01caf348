"""What a drafter architecture is: the decoder family a :class:`DrafterSpec` names.

An architecture (``llama``, ``qwen3``, ``deepseek_mla``) is a subclass of
:class:`Architecture` registered with ``@register`` in its own module of this
package.  It owns everything that differs between decoder families: the
config fields it needs, its attention tensors and their shapes, how it is
recognised in a checkpoint, its config model, the tensors a synthetic drafter
of this family has, the facts engine checks ask about, and (with the
reference forward) its attention and decoder layer.  The parts every EAGLE-3
drafter shares (fc, fc_norm, the three layer norms, the MLP, norm, lm_head,
d2t/t2d) are written once in :mod:`eagleconv.canonical`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch
    from pydantic import BaseModel

    from ..drafter import DrafterSpec
    from ..io.reader import TensorInfo


@dataclass(frozen=True)
class Expected:
    """A tensor the spec implies, with its shape and whether a loader needs it."""

    shape: tuple[int, ...]
    required: bool
    why: str


Derive = Callable[[str, Any, str], None]
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
    # what vLLM's config class for this family falls back to when a config states none (the vllm layout's
    # documented defaults, and the reference forward's)
    default_rope_theta: ClassVar[float] = 10000.0
    default_rms_norm_eps: ClassVar[float] = 1e-6  # LlamaConfig / Qwen3Config / DeepseekV3Config
    # engine-check facts
    mla: ClassVar[bool] = False
    reads_norm_before_fc: ClassVar[bool] = True  # vLLM's MLA drafter has no input_norm
    # synthetic drafters: the names and numbering each producer writes for this family
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
    def missing(cls, values: Mapping[str, Any]) -> list[str]:
        """Shape-bearing fields this family needs that are still unknown."""
        return [k for k in cls.config_fields if k not in values]

    @classmethod
    def spec_fields(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """The family's DrafterSpec keyword arguments from canonical field values."""
        return {}

    @classmethod
    def config_values(cls, spec: DrafterSpec) -> dict[str, Any]:
        """The family's canonical field values of ``spec``, for writing a config."""
        return {}

    @classmethod
    def check_spec(cls, spec: DrafterSpec) -> None:
        """Raise ValueError when ``spec`` lacks what this family needs."""

    # -- tensors ------------------------------------------------------------------
    @classmethod
    def attention_tensors(cls, spec: DrafterSpec, prefix: str, width: int) -> dict[str, Expected]:
        """Canonical ``{prefix}self_attn.*`` tensors of one layer whose input is ``width`` wide."""
        raise NotImplementedError

    @classmethod
    def synthetic_attention(cls, dims: Any, width: int, w: Callable[..., torch.Tensor],
                            norm: Callable[[int], torch.Tensor]) -> dict[str, torch.Tensor]:
        """Seeded attention tensors (names relative to ``self_attn.``) for a tiny drafter of ``dims``."""
        raise NotImplementedError

    @classmethod
    def synthetic_config(cls, dims: Any) -> dict[str, Any]:
        """Decoder config fields (beyond the shared ones) a producer writes for this family."""
        return {}

    # -- forward ------------------------------------------------------------------
    @classmethod
    def attention(cls, u: torch.Tensor, pos: torch.Tensor, cache: Any, w: Any, p: str, spec: DrafterSpec, rope: Any,
                  ops: Any, eps: float) -> tuple[torch.Tensor, Any]:
        """The reference forward's self-attention of one decoder layer (``p`` = "layers.N.").

        ``u`` [B, n, in] (layer 0: cat(embeds, hidden), 2H wide), ``pos`` [n], ``cache`` the layer's
        (keys, values, positions) or None, ``w`` the weights (``w.linear``, ``w.get``, ``w.has``),
        ``rope`` the resolved RoPE, ``ops`` the norm ops.  Returns (output [B, n, H], new cache).
        """
        raise NotImplementedError(f"{cls.name} has no reference forward yet")
