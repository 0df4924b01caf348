"""The server protocols measure speaks: each one a small table of endpoints and metric names, and two functions
(the request body, the reply's tokens).  An engine profile names the protocol its servers speak
(``EngineProfile.server``, a key of :data:`PROFILES`), and ``measure --engine`` offers the engines that name one:
an engine whose server speaks a protocol here adds nothing to this module; a new protocol is one ServerProfile."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from ..support.bounds import MAX_VOCAB
from ..support.jsonio import JSONObject, JSONValue

Reply = tuple[list[int], list[float | None] | None, dict[str, float] | None]  # tokens, top-2 margins, timings


@dataclass(frozen=True)
class ServerProfile:
    name: str  # the engine measured (the report's ``engine``): the protocol's own name in PROFILES, see served_by
    completion: str  # the completion endpoint that takes token ids
    version: str  # GET: the server's version
    models: str  # GET: what it serves
    prefix: str  # Prometheus metric prefix of the speculative counters
    generated: str  # counter of generated tokens (another client's traffic shows there)
    running: str  # gauge of requests in flight
    body: Callable[[list[int], int, str | None, bool], JSONObject]
    reply: Callable[[JSONValue], Reply]  # raises KeyError, IndexError, TypeError or ValueError for another shape
    conversion: str
    version_key: str = "version"  # the version endpoint's field that holds the engine's version
    # the replies carry counters of their own (llama-server's timings): a server without /metrics is measured
    metrics_optional: bool = False
    unnamed_builds: tuple[str, ...] = ()  # versions that name no build (llama-server from the sdist says b0)


def _vllm_body(prompt: list[int], max_tokens: int, model: str | None, margins: bool) -> JSONObject:
    body: JSONObject = {"prompt": list[JSONValue](prompt), "max_tokens": max_tokens, "temperature": 0,
                        "ignore_eos": True, "return_token_ids": True, "stream": False}
    if model is not None:
        body["model"] = model
    if margins:  # keyed by token id: two tokens that decode to the same text stay two entries
        body["logprobs"], body["return_tokens_as_token_ids"] = 2, True
    return body


def _object(value: JSONValue) -> JSONObject:
    if not isinstance(value, dict):
        raise TypeError(f"{type(value).__name__} where the reply has an object")
    return value


def items(value: JSONValue) -> Iterable[JSONValue]:
    """What iterating ``value`` gives (a TypeError for a number, bool or null, as ``for`` raises)."""
    if not isinstance(value, list | dict | str):
        raise TypeError(f"{type(value).__name__} is not iterable")
    return value


class ReplyError(ValueError):
    """A reply of the right shape holding a value that is not what it claims (a token id that is not one)."""


def _token(value: JSONValue) -> int:
    """A generated token id as the server wrote it: an integer in 0..MAX_VOCAB-1, never coerced (425.9, "425", true
    and -1 are refused, as a prompt's ids are)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < MAX_VOCAB:
        raise ReplyError(f"the server returned {json.dumps(value)[:40]} as a token id (an integer from 0 to "
                         f"{MAX_VOCAB - 1})")
    return value


def _count(value: JSONValue, name: str) -> int:
    """A count in the timings (draft_n...): a non-negative integer, never coerced."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ReplyError(f"timings.{name} is {json.dumps(value)[:40]}, not a count (a non-negative integer)")
    return value


def _real(value: JSONValue) -> float:
    """A logprob as the server wrote it (a JSON number)."""
    if not isinstance(value, int | float):
        raise TypeError(f"a logprob that is a {type(value).__name__}")
    return value


def _margin(top: list[float]) -> float | None:
    """top-1 minus top-2 logprob (None when the server gave fewer than two)."""
    top = sorted(top, reverse=True)
    return top[0] - top[1] if len(top) > 1 else None


def _vllm_reply(data: JSONValue) -> Reply:
    choices = _object(data)["choices"]
    if not isinstance(choices, list):
        raise TypeError("choices is not a list")
    choice = _object(choices[0])
    tokens = [_token(t) for t in items(choice["token_ids"])]
    lp = choice.get("logprobs")
    top_logprobs = _object(lp).get("top_logprobs") if lp else None
    margins = [_margin([_real(v) for v in _object(top).values()]) for top in items(top_logprobs)] \
        if top_logprobs else None
    return tokens, margins, None


def _llama_body(prompt: list[int], max_tokens: int, model: str | None, margins: bool) -> JSONObject:
    body: JSONObject = {"prompt": list[JSONValue](prompt), "n_predict": max_tokens, "temperature": 0,
                        "ignore_eos": True, "return_tokens": True, "cache_prompt": False, "stream": False}
    if margins:
        body["n_probs"] = 2
    return body


def _llama_reply(data: JSONValue) -> Reply:
    reply = _object(data)
    tokens = [_token(t) for t in items(reply["tokens"])]
    probs = reply.get("completion_probabilities")
    margins = [_margin([_real(_object(t)["logprob"]) for t in items(_object(p)["top_logprobs"])])
               for p in items(probs)] if probs else None
    timings = _object(reply.get("timings") or {})
    drafted: dict[str, float] = {k: _count(timings[k], k) for k in ("draft_n", "draft_n_accepted") if k in timings}
    return tokens, margins, drafted or None


PROFILES: dict[str, ServerProfile] = {
    "vllm": ServerProfile(
        "vllm", "/v1/completions", "/version", "/v1/models", "vllm:spec_decode", "vllm:generation_tokens",
        "vllm:num_requests_running", _vllm_body, _vllm_reply,
        "vLLM's counters as they are: vllm:spec_decode_num_drafts / _num_draft_tokens / _num_accepted_tokens / "
        "_num_accepted_tokens_per_pos, the difference after minus before"),
    "llama.cpp": ServerProfile(
        "llama.cpp", "/completion", "/props", "/v1/models", "llamacpp:spec_decode", "llamacpp:tokens_predicted",
        "llamacpp:requests_processing", _llama_body, _llama_reply,
        "llama-server's /metrics (started with --metrics): llamacpp:spec_decode_num_drafts_total / "
        "_num_draft_tokens_total / _num_accepted_tokens_total / _num_accepted_tokens_per_pos_total, the difference "
        "after minus before; without /metrics, the replies' timings.draft_n and draft_n_accepted (no rounds, so no "
        "AL)", version_key="build_info", metrics_optional=True, unnamed_builds=("b0", "0")),
}


def measured_engines() -> tuple[str, ...]:
    """The engines ``measure --engine`` takes: those whose default profile names a server protocol here."""
    from ..engines import DEFAULTS, PROFILES as ENGINES

    return tuple(engine for engine, label in DEFAULTS.items() if ENGINES[label].server in PROFILES)


def served_by(engine: str) -> ServerProfile | None:
    """The protocol ``engine``'s servers speak, named for the engine (None: measure does not offer it)."""
    from ..engines import DEFAULTS, PROFILES as ENGINES

    protocol = ENGINES[DEFAULTS[engine]].server if engine in DEFAULTS else None
    return replace(PROFILES[protocol], name=engine) if protocol in PROFILES else None


def version_of(profile: ServerProfile, data: object) -> str | None:
    """The engine version from its version endpoint's JSON."""
    if not isinstance(data, dict):
        return None
    value = data.get(profile.version_key)
    return str(value) if value is not None else None
