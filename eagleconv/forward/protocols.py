"""What the reference forward and ``simulate`` (and the parity tiers) exchange: a target and a drafter, as types.

:class:`TargetModel` is what :func:`eagleconv.forward.native_target.open_target` returns, transformers' target
(``forward.inputs.Target``) or eagleconv's own (``forward.native_target.NativeTarget``); :class:`DraftModel` is
the reference drafter (``forward.model.Drafter``) as simulate's proposer loops call it.  Neither side reaches
into the other's weight store: packing is asked for through these methods.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from ..spec.drafter import DrafterSpec
    from ..nn.attention import LayerCache
    from .model import DraftInputs, DraftResult, Rows, StepOutput


class TargetModel(Protocol):
    """A target model: greedy tokens and captured hidden states of a token sequence, and the rows a drafter borrows."""

    runtime: str  # "eagleconv" (its own forward) or "transformers"
    fallback: str | None  # why open_target(runtime="auto") did not run it natively (None: it did, or was not asked)
    num_layers: int
    vocab_size: int
    hidden_size: int

    @property
    def embed(self) -> torch.Tensor: ...

    @property
    def lm_head(self) -> torch.Tensor: ...

    def forward(self, tokens: Sequence[int], layer_ids: Sequence[int]) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """The greedy token after each position [T] and the states [T, Ht] per hidden_state_index id."""
        ...

    def run(self, prompt: Sequence[int], layer_ids: Sequence[int]) -> tuple[dict[int, torch.Tensor], int]: ...

    def pack_linears(self) -> bool:
        """Multiply the large weights packed for oneDNN from now on (as vLLM's CPU backend); False: not applicable."""
        ...

    @property
    def packed_weights(self) -> int:
        """How many weights are multiplied packed so far."""
        ...


class DraftModel(Protocol):
    """The reference drafter as simulate's proposers run it: combine, one pass, the recursive steps, a whole draft."""

    spec: DrafterSpec

    def combine(self, aux: torch.Tensor) -> torch.Tensor: ...

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, hidden: torch.Tensor,
                cache: Sequence[LayerCache | None] | None = None,
                logits_rows: slice | torch.Tensor = slice(None)) -> StepOutput: ...

    def recurse(self, logits: torch.Tensor, feedback: torch.Tensor, cache: list[LayerCache], steps: int,
                rows: Rows, on_step: Callable[[int], None] | None = None
                ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]: ...

    def draft(self, inputs: DraftInputs, steps: int = 4, on_step: Callable[[int], None] | None = None
              ) -> DraftResult: ...

    @property
    def packed_weights(self) -> int: ...
