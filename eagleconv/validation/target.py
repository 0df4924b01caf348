"""The drafter's target-facing sizes against the target model (EC052); the target is read by eagleconv.config.target."""

from __future__ import annotations

from ..spec.report import Finding
from ..config.target import TargetInfo, load_target

__all__ = ["TargetInfo", "load_target", "target_findings"]


def target_findings(spec, target: TargetInfo, names: frozenset[str] | set[str] = frozenset()) -> list[Finding]:
    """The drafter's target-facing sizes against the target model (engine-independent); ``names``: its tensors."""
    if spec is None:
        return []
    out = []

    def bad(message: str) -> None:
        out.append(Finding(code="EC052", severity="error", message=message))

    if spec.target_hidden_size != target.hidden_size:
        bad(f"the drafter expects target hidden states of width {spec.target_hidden_size} (target_hidden_size) but "
            f"the target's hidden_size is {target.hidden_size}")
    if spec.vocab_size > target.vocab_size:  # padding (issue 32): d2t maps into the target's vocab, never past it
        out.append(Finding(code="EC052", severity="warning", tensor="t2d" if "t2d" in names else None,
                           effect="unverified", message=f"the drafter's vocab_size {spec.vocab_size} pads the "
                           f"target's {target.vocab_size}: ids from {target.vocab_size} on name no target token "
                           "(t2d and embedding rows past it are padding); an engine that drafts through d2t never "
                           "proposes them, one that sizes its vocabulary by vocab_size may not load it"))
    elif spec.vocab_size != target.vocab_size:
        bad(f"the drafter's vocab_size {spec.vocab_size} differs from the target's {target.vocab_size} "
            "(d2t maps into the target vocabulary; embed_tokens rows follow it)")
    return out
