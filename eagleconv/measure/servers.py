"""The serving engines measure talks to: each one a small table of endpoints and metric names, and two functions
(the request body, the reply's tokens).  Adding an engine is one ServerProfile."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ServerProfile:
    name: str
    completion: str  # the completion endpoint that takes token ids
    version: str  # GET: the server's version
    models: str  # GET: what it serves
    prefix: str  # Prometheus metric prefix of the speculative counters
    generated: str  # counter of generated tokens (another client's traffic shows there)
    running: str  # gauge of requests in flight
    body: Callable[[list[int], int, str | None, bool], dict[str, Any]]
    reply: Callable[[Any], tuple[list[int], list[float | None] | None, dict[str, float] | None]]
    conversion: str


def _vllm_body(prompt: list[int], max_tokens: int, model: str | None, margins: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                            "return_token_ids": True, "stream": False}
    if model is not None:
        body["model"] = model
    if margins:  # keyed by token id: two tokens that decode to the same text stay two entries
        body["logprobs"], body["return_tokens_as_token_ids"] = 2, True
    return body


def _margin(top: list[float]) -> float | None:
    """top-1 minus top-2 logprob (None when the server gave fewer than two)."""
    top = sorted(top, reverse=True)
    return top[0] - top[1] if len(top) > 1 else None


def _vllm_reply(data: Any) -> tuple[list[int], list[float | None] | None, dict[str, float] | None]:
    choice = data["choices"][0]
    tokens = [int(t) for t in choice["token_ids"]]
    lp = choice.get("logprobs")
    margins = [_margin(list(top.values())) for top in lp["top_logprobs"]] if lp and lp.get("top_logprobs") else None
    return tokens, margins, None


def _llama_body(prompt: list[int], max_tokens: int, model: str | None, margins: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": prompt, "n_predict": max_tokens, "temperature": 0, "ignore_eos": True,
                            "return_tokens": True, "cache_prompt": False, "stream": False}
    if margins:
        body["n_probs"] = 2
    return body


def _llama_reply(data: Any) -> tuple[list[int], list[float | None] | None, dict[str, float] | None]:
    tokens = [int(t) for t in data["tokens"]]
    probs = data.get("completion_probabilities")
    margins = [_margin([float(t["logprob"]) for t in p["top_logprobs"]]) for p in probs] if probs else None
    timings = data.get("timings") or {}
    drafted = {k: float(timings[k]) for k in ("draft_n", "draft_n_accepted") if k in timings}
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
        "AL)"),
}


def version_of(profile: ServerProfile, data: Any) -> str | None:
    """The engine version from its version endpoint's JSON."""
    if not isinstance(data, dict):
        return None
    value = data.get("version") if profile.name == "vllm" else data.get("build_info")
    return str(value) if value is not None else None
