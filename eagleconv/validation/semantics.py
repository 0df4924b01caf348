"""Trainer-specific meanings of flags that every engine reads the same way (EC023)."""

from __future__ import annotations

from ..report import Finding


def semantics_findings(layout_name: str | None, flags: dict[str, bool]) -> list[Finding]:
    out = []
    if layout_name == "specforge" and flags.get("norm_output"):
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
