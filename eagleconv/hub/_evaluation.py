"""What a pushed card states was checked: the engine matrix (a verdict per engine profile, with the finding codes
behind it) and, given a simulate or measure report, the acceptance as huggingface_hub ``EvalResult``s (the card's
``model-index``, which the Hub shows as evaluation results).  ``read_card`` reads both back for ``pull``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from .._text import markdown_text, printable
from ..errors import FormatError
from ..spec.report import Finding, ValidationReport, _Report

if TYPE_CHECKING:
    from huggingface_hub import EvalResult

Verdict = Literal["runs as intended", "loads", "runs differently", "fails"]
# the worst effect among an engine's findings decides its verdict (report.Effect)
VERDICTS: tuple[tuple[str, Verdict], ...] = (("load_fails", "fails"), ("runs_differently", "runs differently"),
                                            ("unverified", "loads"))
AL_METRIC = "acceptance_length"
POSITION_METRIC = "acceptance_rate_position_"


class EngineVerdict(_Report):
    engine: str
    verdict: Verdict = Field(description="fails (refuses it, or its first request fails), runs differently (loads and "
                             "computes other than the checkpoint means), loads (guesses a value the checkpoint does not "
                             "state), runs as intended")
    codes: list[str] = Field(description="the finding codes behind the verdict")


class Acceptance(_Report):
    """The acceptance a simulate or measure report gives, as the card states it."""

    source: str = Field(description="simulate (predicted offline) or measure (a served engine's own counters)")
    acceptance_length: float | None
    definition: str = "1 + num_accepted_tokens / num_drafts (tokens per verification round, bonus token included)"
    acceptance_per_position: list[float] = Field(description="accepted / drafts at each draft position")
    num_speculative_tokens: int | None
    engine: str
    engine_version: str | None = None
    max_tokens: int | None = None
    num_drafts: int | None = None
    num_accepted_tokens: int | None = None
    prompts_sha256: str | None = Field(None, description="null: the report does not record its prompts' hash")


class CardSummary(_Report):
    engines: list[EngineVerdict] = Field(default_factory=list)
    acceptance: Acceptance | None = None


def engine_matrix(validation: ValidationReport) -> list[EngineVerdict]:
    """Per engine profile validated: its worst finding effect as a verdict, and the codes with that effect
    (findings without an engine are about every engine building from the config)."""
    out = []
    for label in validation.engines:
        mine: list[Finding] = [f for f in validation.findings if f.engine in (label, None)]
        verdict: Verdict = "runs as intended"
        codes: list[str] = []
        for effect, name in VERDICTS:
            hit = sorted({f.code for f in mine if f.effect == effect})
            if hit:
                verdict, codes = name, hit
                break
        out.append(EngineVerdict(engine=label, verdict=verdict, codes=codes))
    return out


def read_acceptance(path: str | Path) -> Acceptance:
    """A simulate or measure report's acceptance, read back through its schema and the counter rules (a
    FormatError naming the file and the first broken rule otherwise: such a report never reaches a card)."""
    import re

    from ..measurement.readback import read_report
    from ..simulation.report import SimulateReport

    report = read_report(path)
    if isinstance(report, SimulateReport):
        source, sha, engine, _, version = "simulate", None, *report.engine.partition(":")
    else:
        source, sha, engine, version = "measure", report.prompts_sha256, report.engine, report.engine_version or ""
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise FormatError(f"prompts_sha256 {printable(sha)[:80]!r} is not a sha256 (64 hex digits)", path)
    drafts = report.num_drafts
    rates = [round(n / drafts, 4) for n in report.accepted_per_position] if drafts else []
    al = report.acceptance_length
    return Acceptance(source=source, acceptance_length=round(al, 4) if al is not None else None,
                      acceptance_per_position=rates, num_speculative_tokens=report.num_speculative_tokens,
                      engine=engine, engine_version=version or None, max_tokens=report.max_tokens,
                      num_drafts=drafts, num_accepted_tokens=report.num_accepted_tokens, prompts_sha256=sha)


def eval_results(acceptance: Acceptance) -> list[EvalResult]:
    """The acceptance as huggingface_hub EvalResults: the AL, then one rate per draft position."""
    from huggingface_hub import EvalResult

    a = acceptance  # the YAML writer quotes what it must; control characters are shown escaped, never written
    engine = printable(f"{a.engine} {a.engine_version}" if a.engine_version else a.engine)
    common: dict[str, Any] = dict(
        task_type="text-generation", task_name=f"speculative decoding ({engine}, K={a.num_speculative_tokens})",
        dataset_type="token-ids", dataset_name="prompts", dataset_revision=a.prompts_sha256)
    args = {"definition": a.definition, "num_speculative_tokens": a.num_speculative_tokens,
            "engine": printable(a.engine), "engine_version": printable(a.engine_version) if a.engine_version else None, "max_tokens": a.max_tokens, "num_drafts": a.num_drafts,
            "num_accepted_tokens": a.num_accepted_tokens, "source": a.source}
    out = []
    if a.acceptance_length is not None:
        out.append(EvalResult(metric_type=AL_METRIC, metric_name="acceptance length", metric_value=a.acceptance_length,
                              metric_args=args, **common))
    out += [EvalResult(metric_type=f"{POSITION_METRIC}{i}", metric_name=f"acceptance rate at draft position {i}",
                       metric_value=rate, **common) for i, rate in enumerate(a.acceptance_per_position, start=1)]
    return out


def card_sections(matrix: list[EngineVerdict], acceptance: Acceptance | None) -> list[str]:
    """The card's markdown: the engine matrix, then the acceptance with its definition (draft positions 1..K; what a
    report or server stated is escaped for markdown, so it cannot add a heading, a link or a tag)."""
    lines = ["## Engine matrix", "", "| engine | verdict | findings behind it |", "|---|---|---|"]
    lines += [f"| {e.engine} | {e.verdict} | {', '.join(e.codes) or '-'} |" for e in matrix]
    lines.append("")
    if acceptance is not None:
        a = acceptance
        al = f"{a.acceptance_length:.4f}" if a.acceptance_length is not None else "not reported"
        where = "predicted by `eagleconv simulate`" if a.source == "simulate" else "measured by `eagleconv measure` " \
            "from the engine's own counters"
        lines += ["## Acceptance", "",
                  f"Acceptance length **{al}** with K={a.num_speculative_tokens} on {markdown_text(a.engine)}"
                  f"{' ' + markdown_text(a.engine_version) if a.engine_version else ''}, {where}; AL = {a.definition}.",
                  "", "| draft position | acceptance rate |", "|---|---|",
                  *(f"| {i} | {r:.4f} |" for i, r in enumerate(a.acceptance_per_position, start=1)), "",
                  f"Prompts: sha256 `{a.prompts_sha256 or 'not recorded'}`, {a.max_tokens} tokens each, greedy.", ""]
    return lines


def read_card(path: str | Path) -> CardSummary | None:
    """The engine matrix and acceptance a card states (None without a card or its metadata)."""
    from huggingface_hub import ModelCard

    path = Path(path)
    if not path.is_file():
        return None
    try:
        card = ModelCard.load(path)
    except Exception:  # noqa: BLE001 - a card eagleconv did not write: nothing to read back
        return None
    data = card.data.to_dict()
    own = data.get("eagleconv") if isinstance(data.get("eagleconv"), dict) else {}
    summary = CardSummary(engines=[EngineVerdict.model_validate(e) for e in own.get("engines", [])])
    results = getattr(card.data, "eval_results", None) or []
    al = next((r for r in results if r.metric_type == AL_METRIC), None)
    if al is not None:
        args = al.metric_args or {}
        rates = sorted(((int(r.metric_type[len(POSITION_METRIC):]), float(r.metric_value)) for r in results
                        if r.metric_type.startswith(POSITION_METRIC)))
        summary.acceptance = Acceptance(
            source=args.get("source", "unknown"), acceptance_length=float(al.metric_value),
            definition=args.get("definition", Acceptance.model_fields["definition"].default),
            acceptance_per_position=[r for _, r in rates], num_speculative_tokens=args.get("num_speculative_tokens"),
            engine=args.get("engine", "unknown"), engine_version=args.get("engine_version"),
            max_tokens=args.get("max_tokens"), num_drafts=args.get("num_drafts"),
            num_accepted_tokens=args.get("num_accepted_tokens"), prompts_sha256=al.dataset_revision)
    return summary
