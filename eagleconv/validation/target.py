"""The drafter's target-facing sizes against the target model (EC052); the target is read by eagleconv.target."""

from __future__ import annotations

from ..report import Finding
from ..target import TargetInfo, load_target

__all__ = ["TargetInfo", "load_target", "target_findings"]


def target_findings(spec, target: TargetInfo) -> list[Finding]:
    """The drafter's target-facing sizes against the target model (engine-independent)."""
    if spec is None:
        return []
    out = []

    def bad(message: str) -> None:
        out.append(Finding(code="EC052", severity="error", message=message))

    if spec.target_hidden_size != target.hidden_size:
        bad(f"the drafter expects target hidden states of width {spec.target_hidden_size} (target_hidden_size) but "
            f"the target's hidden_size is {target.hidden_size}")
    if spec.vocab_size != target.vocab_size:
        bad(f"the drafter's vocab_size {spec.vocab_size} differs from the target's {target.vocab_size} "
            "(d2t maps into the target vocabulary; embed_tokens rows follow it)")
    return out
