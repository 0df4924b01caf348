"""``--against``: a measure run compared with a simulate or measure report, prompt by prompt (tokens, then counters).

A simulate report holds every proposal, so its rounds are rebuilt from its tokens and drafts: where each round
starts and how many drafts it accepted.  A server's counters are per request, so the first differing token is
placed in the reference's round; a token that differs is shown with the server's top-2 logprob margin there (a
greedy near-tie is reported as a difference, never absorbed by a tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import FormatError
from .report import Comparison, MeasureReport

if TYPE_CHECKING:
    from ..simulation.report import SimulateReport

NEAR_TIE = 0.05  # nats: a top-2 margin under this is called a near-tie in the message (it still counts)


@dataclass
class PromptReference:
    """One prompt of the reference report: its counters and, from a simulate report, where each round starts."""

    num_drafts: int | None
    accepted: int | None
    exact: bool  # False where max_tokens cut a round short (the engine may have accepted more)
    per_pos: list[int] | None
    rounds: list[tuple[int, int]] | None  # (first token of the round, drafts accepted)


@dataclass
class Reference:
    kind: str
    tokens: list[list[int]]
    num_drafts: int | None
    num_draft_tokens: int | None
    num_accepted_tokens: int | None
    accepted_per_position: list[int] | None
    max_tokens: int | None
    k: int | None
    prompts: list[PromptReference]


def load_reference(path: str | Path, n_prompts: int) -> Reference:
    """Read a simulate or measure report, checked against its schema and the counter rules before anything is
    built from it (a FormatError naming the file when it is neither, breaks a rule, or has another number of
    prompts than --prompts)."""
    from ..simulation.report import SimulateReport
    from .readback import read_report

    report = read_report(path)
    if len(report.tokens) != n_prompts:
        raise FormatError(f"the report has {len(report.tokens)} prompts, --prompts {n_prompts}: not the same prompts",
                          path)
    return _from_simulate(report) if isinstance(report, SimulateReport) else _from_measure(report)


def _from_simulate(data: SimulateReport) -> Reference:
    K = data.num_speculative_tokens  # read_report checked it against the per-position counts: no bigger than the file
    prompts = []
    for out, drafts in zip(data.tokens, data.drafts):
        cursor, rounds, per_pos, exact = 1, list[tuple[int, int]](), [0] * K, True
        for proposal in drafts[:-1]:  # the last proposal is made after the last round, never verified
            visible = out[cursor:cursor + K]
            accepted = 0
            # a proposal may be shorter than K (llama-server cuts its drafts to the tokens left)
            while accepted < min(len(visible), len(proposal)) and proposal[accepted] == visible[accepted]:
                per_pos[accepted] += 1
                accepted += 1
            if accepted == len(visible) < K:  # cut at max_tokens: the engine may have accepted more
                exact = False
            rounds.append((cursor, accepted))
            cursor += accepted + 1
        prompts.append(PromptReference(len(drafts) - 1, sum(a for _, a in rounds), exact, per_pos, rounds))
    return Reference("simulate", data.tokens, data.num_drafts, data.num_draft_tokens, data.num_accepted_tokens,
                     data.accepted_per_position, data.max_tokens, K, prompts)


def _from_measure(data: MeasureReport) -> Reference:
    prompts = [PromptReference(p.num_drafts, p.num_accepted_tokens, True, p.accepted_per_position, None)
               for p in data.prompts]
    return Reference("measure", data.tokens, data.num_drafts, data.num_draft_tokens, data.num_accepted_tokens,
                     data.accepted_per_position or None, data.max_tokens, data.num_speculative_tokens, prompts)


def compare(report: MeasureReport, ref: Reference, where: str) -> Comparison:
    """Every prompt's tokens, then its counters, then the totals; ``first`` is the first difference found."""
    out = Comparison(against=where, kind=ref.kind, same=True)
    if ref.max_tokens is not None and ref.max_tokens != report.max_tokens:
        _differ(out, f"max_tokens {report.max_tokens} here, {ref.max_tokens} in the {ref.kind} report")
    if ref.k is not None and report.num_speculative_tokens is not None and ref.k != report.num_speculative_tokens:
        _differ(out, f"K {report.num_speculative_tokens} on the server, {ref.k} in the {ref.kind} report")
    for n, (got, want) in enumerate(zip(report.tokens, ref.tokens)):
        i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
        if i is None and len(got) != len(want):
            i = min(len(got), len(want))
        if i is not None:
            _token_differs(out, report, ref, n, i)
            continue
        _counters_differ(out, report, ref, n)
    totals = [("num_drafts", report.num_drafts, ref.num_drafts),
              ("num_draft_tokens", report.num_draft_tokens, ref.num_draft_tokens),
              ("num_accepted_tokens", report.num_accepted_tokens, ref.num_accepted_tokens),
              ("accepted_per_position", report.accepted_per_position or None, ref.accepted_per_position)]
    for name, a, b in totals:
        if a is not None and b is not None and a != b:
            _differ(out, f"total {name}: {a} on the server, {b} in the {ref.kind} report")
    return out


def _differ(out: Comparison, line: str, *, prompt: int | None = None, rnd: int | None = None,
            position: int | None = None, margin: float | None = None) -> None:
    """Record a difference; the first one also says where (the prompt, round and position) and the margin there."""
    out.same = False
    out.differences.append(line)
    if out.first is None:
        out.first, out.prompt, out.round, out.position, out.margin = line, prompt, rnd, position, margin


def _token_differs(out: Comparison, report: MeasureReport, ref: Reference, n: int, i: int) -> None:
    got, want = report.tokens[n], ref.tokens[n]
    rounds = ref.prompts[n].rounds
    where, rnd, pos = f"prompt {n}, token {i}", None, None
    if rounds is not None:
        if i == 0:
            where = f"prompt {n}, the prefill's token (before round 0)"
        else:
            rnd = max(r for r, (start, _) in enumerate(rounds) if start <= i) if rounds and i >= rounds[0][0] else None
            if rnd is not None:  # draft positions 1..K, K+1 the round's bonus token
                pos = i - rounds[rnd][0] + 1
                where = f"prompt {n}, round {rnd}, position {pos}"
    what = (f"{got[i] if i < len(got) else 'nothing'} on the server, {want[i] if i < len(want) else 'nothing'} in the "
            f"{ref.kind} report")
    margins = report.prompts[n].top2_margins
    margin = margins[i] if margins is not None and i < len(margins) else None
    if margin is not None:
        what += (f"; the server's top-2 logprob margin there is {margin:.4g}" +
                 (" (a greedy near-tie: a rounding difference flips it)" if margin < NEAR_TIE else ""))
    _differ(out, f"{where}: token {what}", prompt=n, rnd=rnd, position=pos, margin=margin)


def _counters_differ(out: Comparison, report: MeasureReport, ref: Reference, n: int) -> None:
    mine, theirs = report.prompts[n], ref.prompts[n]
    if mine.num_drafts is None and mine.num_accepted_tokens is None:
        return  # not attributable (--concurrency): the totals are compared
    if theirs.num_drafts is not None and mine.num_drafts is not None and mine.num_drafts != theirs.num_drafts:
        _differ(out, f"prompt {n}: {mine.num_drafts} rounds on the server, {theirs.num_drafts} in the {ref.kind} "
                     "report", prompt=n)
        return
    a, b = mine.accepted_per_position, theirs.per_pos
    if a is not None and b is not None:
        j = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y and (theirs.exact or x < y)), None)
        if j is not None:
            _differ(out, f"prompt {n}, position {j + 1}: {a[j]} drafts accepted on the server, {b[j]} in the "
                         f"{ref.kind} report (the server counts per request, not per round)", prompt=n, position=j + 1)
            return
    acc, want = mine.num_accepted_tokens, theirs.accepted
    if acc is not None and want is not None and (acc != want if theirs.exact else acc < want):
        _differ(out, f"prompt {n}: {acc} drafts accepted on the server, {want} in the {ref.kind} report", prompt=n)
