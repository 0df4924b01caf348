"""The tensors of an engine's view (``engines.view.DrafterView``): a checkpoint's own, plus those the engine fills.

``engines.view`` says, as data, which parameters an engine leaves at a value of its own where the checkpoint has
no tensor (``Fill``); ``fill_tensors`` makes them, and ``OverlaySource`` lays them over the checkpoint for the
reference forward.  Every missing norm any engine view fills is made by ``unit_norm``, and only there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from .weights import TensorSource, stored_name

if TYPE_CHECKING:
    from ..spec.drafter import DrafterSpec
    from ..engines.view import Fill


class OverlaySource:
    """A checkpoint's tensors plus tensors laid over them (an engine's fills, a transform's new weights)."""

    def __init__(self, base: TensorSource, extra: dict[str, torch.Tensor]):
        self.base, self.extra = base, extra

    def names(self) -> set[str]:
        return self.base.names() | set(self.extra)

    def raw(self, name: str) -> torch.Tensor:
        return self.extra[name] if name in self.extra else self.base.raw(name)

    def label(self, name: str) -> str:
        return name if name in self.extra else stored_name(self.base, name)

    def release(self) -> None:
        self.base.release()


def unit_norm(spec: DrafterSpec, shape: tuple[int, ...]) -> torch.Tensor:
    """The stored weight of a norm at its identity scale, which an engine keeps for a norm the checkpoint lacks
    (its initial value): the architecture's own ``unit_norm`` hook (1.0 for a plain RMSNorm, 0.0 for a (1 + w) one)."""
    return spec.arch.unit_norm(*shape)


def fill_tensors(spec: DrafterSpec, fills: Mapping[str, Fill],
                 target_lm_head: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The tensors ``fills`` describes; ``target_lm_head``: the target's output projection (for that kind)."""
    out: dict[str, torch.Tensor] = {}
    for name, fill in fills.items():
        if fill.kind == "unit_norm":
            out[name] = unit_norm(spec, fill.shape)
        elif fill.kind == "zero_offsets":
            out[name] = torch.zeros(fill.shape, dtype=torch.int64)
        else:
            if target_lm_head is None:
                raise ValueError(f"{name}: the engine takes the target's lm_head, and none was given")
            out[name] = target_lm_head[:fill.shape[0]].float()
    return out


def with_fills(base: TensorSource, extra: dict[str, torch.Tensor]) -> TensorSource:
    """``base``, with ``extra`` laid over it when there is any."""
    return OverlaySource(base, extra) if extra else base


__all__ = ["OverlaySource", "fill_tensors", "unit_norm", "with_fills"]
