"""What a decoder layer reads its weights through: the interface ``Architecture`` hooks are written against.

``forward.weights.Weights`` implements it (lazy upcast blocks, a block cache or oneDNN packing, chosen when it is
built); an architecture needs only these three calls, so it never depends on how the weights are stored.
"""

from __future__ import annotations

from typing import Protocol

import torch


class WeightStore(Protocol):
    """Canonical-name access to a layer's weights in the compute dtype."""

    def has(self, name: str) -> bool: ...

    def get(self, name: str) -> torch.Tensor:
        """A small tensor (norm weight, bias) in the compute dtype."""
        ...

    def linear(self, x: torch.Tensor, name: str, bias: str | None = None, *, keep: bool = True) -> torch.Tensor:
        """x @ W.T (+ b where ``bias`` is stored)."""
        ...
