"""Trainer-specific meanings of flags that every engine reads the same way (EC023)."""

from __future__ import annotations

from collections.abc import Mapping

from ..spec.report import Finding


def written_by_eagleconv(config: Mapping[str, object]) -> bool:
    """Whether eagleconv wrote this config's flags itself: ``upgrade``/``downgrade`` set them, or ``convert`` from a
    layout that is not SpecForge's wrote them in the engines' meaning (the provenance stamp of
    formats.base.writing).  A SpecForge checkpoint converted to SpecForge's layout keeps its trainer's doubt."""
    stamp = config.get("eagleconv")
    if not isinstance(stamp, Mapping):
        return False
    return stamp.get("transform") is not None or stamp.get("converted_from") not in (None, "specforge")


def semantics_findings(layout_name: str | None, flags: dict[str, bool],
                       config: Mapping[str, object] | None = None) -> list[Finding]:
    """``config``: the checkpoint's, whose provenance stamp says whether eagleconv wrote its flags (then the
    SpecForge PR #879 doubt does not apply: issue 35 item 9)."""
    out = []
    ours = config is not None and written_by_eagleconv(config)
    if layout_name == "specforge" and flags.get("norm_output") and not ours:
        out.append(Finding(code="EC023", severity="warning", message=(
            "SpecForge checkpoints trained before PR #879 (merged 2026-09-15) with norm_output: true used plain "
            "EAGLE-3 pre-norm feedback, but every engine reads norm_output: true as EAGLE-3.1 post-norm feedback. "
            "If this drafter was trained before #879, set norm_output to false")))
    if layout_name == "speculators" and flags.get("norm_before_fc") and flags.get("norm_output") and not flags.get("fc_norm"):
        out.append(Finding(code="EC023", severity="info", message=(
            "norm_before_fc + norm_output is what speculators 0.9 trains for eagle3 by default: one RMSNorm over "
            "the concatenated aux states, not the EAGLE-3.1 paper's per-aux fc_norm")))
    if flags.get("norm_output") and not flags.get("fc_norm") and not flags.get("norm_before_fc"):
        out.append(Finding(code="EC023", severity="warning", message=(
            "norm_output without fc_norm or norm_before_fc: no trainer writes this combination for EAGLE-3.1 (the "
            "paper pairs it with fc_norm, speculators with norm_before_fc), and SpecForge before PR #879 wrote it "
            "for plain EAGLE-3 feedback. Every engine feeds back the post-norm state: if this drafter was trained "
            "as EAGLE-3, it runs different math (set norm_output to false)")))
    return out
