"""A simulate or measure report read back (``measure --against``, ``push --acceptance``): checked against its
published JSON Schema (schemas/report-simulate.schema.json, report-measure.schema.json: the pydantic models that
write them, in strict mode, so ``"20"`` is not 20) and the counter rules, before anything is built from it."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from ..support.bounds import MAX_SPECULATIVE_TOKENS
from ..errors import FormatError
from ..simulation.report import SimulateReport
from .invariants import Counts, broken
from .report import MeasureReport


def read_report(path: str | Path) -> SimulateReport | MeasureReport:
    """The report in ``path``; a FormatError (exit 2) naming the file and the first broken rule otherwise."""
    from ..support.jsonio import load_json

    data = load_json(path)
    if not isinstance(data, dict) or "tokens" not in data or "num_accepted_tokens" not in data:
        raise FormatError("not a simulate or measure report (no 'tokens' and 'num_accepted_tokens')", path)
    model: type[SimulateReport | MeasureReport] = SimulateReport if "drafts" in data else MeasureReport
    kind = "simulate" if model is SimulateReport else "measure"
    try:
        report = model.model_validate(data, strict=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "the report"
        raise FormatError(f"not a valid {kind} report (schemas/report-{kind}.schema.json): {where}: {err['msg']}",
                          path) from None
    why = counters_broken(report)
    if why is not None:
        raise FormatError(f"the {kind} report's counters do not add up: {why}", path)
    return report


def counters_broken(report: SimulateReport | MeasureReport) -> str | None:
    """The first counter rule ``report`` breaks, its totals first, then prompt by prompt; None if it obeys them."""
    k = report.num_speculative_tokens
    if k is not None and k > MAX_SPECULATIVE_TOKENS:
        return f"K (num_speculative_tokens) {k} is over {MAX_SPECULATIVE_TOKENS}, simulate's limit"
    simulated = isinstance(report, SimulateReport)
    per_pos = report.accepted_per_position if simulated else report.accepted_per_position or None  # []: unreported
    why = broken(Counts(report.num_draft_tokens, report.num_accepted_tokens, report.num_drafts, k, per_pos,
                        report.acceptance_length, per_position_is_k=simulated))
    if why is not None:
        return why
    per_prompt: list[tuple[int | None, int | None, int | None, list[int] | None]] = []
    if isinstance(report, SimulateReport):
        if len(report.drafts) != len(report.tokens):
            return f"{len(report.drafts)} prompts' drafts for {len(report.tokens)} prompts' tokens"
        if any(len(p) > report.num_speculative_tokens for d in report.drafts for p in d):
            return f"a proposal longer than K={k}"
    else:
        if len(report.prompts) != len(report.tokens):
            return f"{len(report.prompts)} prompts' counters for {len(report.tokens)} prompts' tokens"
        per_prompt = [(p.num_draft_tokens, p.num_accepted_tokens, p.num_drafts, p.accepted_per_position)
                      for p in report.prompts]
    for n, (drafted, accepted, rounds, per_pos) in enumerate(per_prompt):
        if drafted is not None and accepted is not None:
            why = broken(Counts(drafted, accepted, rounds, k, per_pos))
            if why is not None:
                return f"prompt {n}: {why}"
    return None
