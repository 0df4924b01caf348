"""Counters are evidence, so they must add up: the rules every measured, simulated or read-back report obeys.

One check for every place counters come from or go to (measure's report, ``--against``'s reference,
``push --acceptance``): :func:`broken` names the first rule a set of counters breaks, or None.  The caller
raises its own one-line error (a MeasureError naming the URL, a FormatError naming the file), exit 2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# float64 counts every integer only up to 2^53: a Prometheus counter past it has lost increments.
MAX_COUNT = 2**53
AL_TOLERANCE = 1e-6  # a report's acceptance_length against 1 + accepted / rounds (rounded reports stay equal)


@dataclass(frozen=True)
class Counts:
    """One report's (or one prompt's) counters; None where the source does not state them."""

    drafted: int
    accepted: int
    rounds: int | None = None
    k: int | None = None
    per_position: Sequence[int] | None = None
    acceptance_length: float | None = None
    per_position_is_k: bool = False  # simulate: exactly K per-position counts


def broken(c: Counts) -> str | None:
    """The first rule ``c`` breaks (a phrase for an error line), or None when the counters add up."""
    named = [("num_draft_tokens", c.drafted), ("num_accepted_tokens", c.accepted), ("num_drafts", c.rounds)]
    for name, value in named:
        if value is not None and not 0 <= value <= MAX_COUNT:
            return f"{name} {value} is not a count between 0 and 2^53"
    if c.k is not None and c.k < 1:
        return f"K (num_speculative_tokens) {c.k} is not at least 1"
    if c.accepted > c.drafted:
        return f"{c.accepted} drafts accepted of {c.drafted} drafted (0 <= accepted <= drafted)"
    if c.k is not None and c.rounds is not None and c.drafted > c.k * c.rounds:
        return f"{c.drafted} draft tokens in {c.rounds} rounds of K={c.k} (drafted <= K x rounds)"
    if c.per_position is not None:
        why = _per_position(c.per_position, c.accepted, c.k, c.per_position_is_k)
        if why is not None:
            return why
    if c.acceptance_length is not None:
        if c.rounds is None or c.rounds == 0:
            return f"acceptance_length {c.acceptance_length} without verification rounds to divide by"
        want = 1 + c.accepted / c.rounds
        if not math.isclose(c.acceptance_length, want, rel_tol=AL_TOLERANCE, abs_tol=AL_TOLERANCE):
            return (f"acceptance_length {c.acceptance_length} is not 1 + {c.accepted} accepted / {c.rounds} rounds "
                    f"= {want:.6g}")
    return None


def _per_position(per_pos: Sequence[int], accepted: int, k: int | None, exactly_k: bool) -> str | None:
    if any(n < 0 for n in per_pos):
        return f"accepted_per_position {list(per_pos)[:8]} has a negative count"
    if k is not None and (len(per_pos) != k if exactly_k else len(per_pos) > k):
        return f"{len(per_pos)} per-position counts for K={k}"
    if per_pos and sum(per_pos) != accepted:
        return f"the per-position counts sum to {sum(per_pos)}, not the {accepted} drafts accepted"
    for i in range(1, len(per_pos)):
        if per_pos[i] > per_pos[i - 1]:
            return (f"position {i + 1} accepted {per_pos[i]} drafts, more than position {i}'s {per_pos[i - 1]} "
                    "(a draft reaches a position only through the ones before it)")
    return None


def counter_value(name: str, value: float) -> str | None:
    """Why a scraped counter cannot be a count (NaN, infinite, negative, fractional, past 2^53), or None."""
    if not math.isfinite(value) or value < 0 or value != int(value):
        return f"{name} is {value!r}, not a whole non-negative count"
    if value > MAX_COUNT:
        return f"{name} is {value:.17g}, past 2^53: float64 counters lose single increments there"
    return None


def position_labels(labels: Sequence[int]) -> str | None:
    """The engines label draft positions 0..K-1 (vLLM and llama-server alike); anything else is refused, not
    renumbered."""
    if sorted(labels) != list(range(len(labels))):
        shown = ", ".join(str(p) for p in sorted(labels)[:6])
        return f"per-position counters labelled position {shown}, not 0..K-1"
    return None


def moved_back(before: Mapping[str, float | None], now: Mapping[str, float | None]) -> str | None:
    """The first counter that went backwards between two scrapes (every counter only moves forward)."""
    for name, a in before.items():
        b = now.get(name)
        if a is not None and b is not None and b < a:
            return f"{name} went backwards ({a:g} -> {b:g})"
    return None
