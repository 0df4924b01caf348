"""HTTP to the server (eagleconv.io.http's bounded channel) and its Prometheus counters (prometheus_client's
parser); every failure is an HTTPError (a MeasureError when the server answers but cannot be measured): one line
naming the URL, exit 2."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Literal, overload

from ..errors import EagleconvError
from ..io.http import MAX_BODY, Channel, HTTPError, HTTPStatusError, short
from ..support.jsonio import JSONValue, loads_strict

# What each endpoint may send: a completion of 2**20 tokens with top-2 logprobs is ~100 bytes a token.
CAPS = {"completion": 128 * 1024 * 1024, "metrics": MAX_BODY, "small": 1024 * 1024}
METRICS_ABSENT = frozenset({404, 501})  # llama-server without --metrics answers 501, an older one 404


class MeasureError(HTTPError):
    """The server answers but cannot be measured (no counters, another model, foreign traffic): exit 2."""

    def __init__(self, message: str, where: str = "", status: int | None = None):
        super().__init__(message, where, status)  # most messages name the URL themselves


class PromptRefused(MeasureError, HTTPStatusError):
    """The server refused a prompt with a 4xx (a token id out of its vocabulary, a prompt past its context)."""


class NotPrometheus(MeasureError):
    """/metrics answered something else (a proxy's page): llama-server's replies' timings can stand in."""


@dataclass
class Counters:
    """The speculative counters and the traffic signals at one scrape (None: the server does not export it)."""

    num_drafts: float | None
    num_draft_tokens: float | None
    num_accepted_tokens: float | None
    per_position: dict[int, float] = field(default_factory=dict)
    generated: float | None = None
    running: float | None = None


class Client:
    """One server through the bounded channel: each request its own connection, deadline and body cap."""

    def __init__(self, url: str, timeout: float):
        self.channel = Channel(url, timeout)
        self.url = self.channel.url  # credentials removed: what reports and errors print
        self.timeout = timeout

    @overload
    def request(self, method: str, path: str, body: JSONValue = None, *, want_json: Literal[True] = True,
                missing_ok: bool = False, cap: str = "small") -> JSONValue: ...

    @overload
    def request(self, method: str, path: str, body: JSONValue = None, *, want_json: Literal[False],
                missing_ok: bool = False, cap: str = "small") -> str | None: ...

    def request(self, method: str, path: str, body: JSONValue = None, *, want_json: bool = True,
                missing_ok: bool = False, cap: str = "small") -> JSONValue:
        """The reply's JSON (or text); None for a 404 when ``missing_ok``.  Failures: HTTPError (typed)."""
        data = json.dumps(body).encode() if body is not None else None
        reply = self.channel.request(method, path, data, cap=CAPS[cap])
        if reply.status == 404 and missing_ok:
            return None
        if reply.status >= 400:
            raise HTTPStatusError(f"HTTP {reply.status}: {_server_message(reply.text)}", reply.where, reply.status)
        return reply.json() if want_json else reply.text

    def counters(self, prefix: str, generated: str, running: str, *, optional: bool = False,
                 model: str | None = None) -> Counters | str:
        """The speculative counters from /metrics, or why there are none: a 404 or 501 (llama-server without
        --metrics), and with ``optional`` (llama-server, which has the replies' timings) any error status or an
        answer that is not Prometheus text."""
        where = f"{self.url}/metrics"
        reply = self.channel.request("GET", "/metrics", cap=CAPS["metrics"])
        if reply.status in METRICS_ABSENT or (optional and reply.status >= 400):
            return f"HTTP {reply.status} ({_server_message(reply.text)})"
        if reply.status >= 400:
            raise HTTPStatusError(f"HTTP {reply.status}: {_server_message(reply.text)}", reply.where, reply.status)
        try:
            return parse_counters(reply.text, prefix, generated, running, where, model)
        except NotPrometheus as exc:
            if optional:
                return exc.message
            raise


def parse_counters(text: str, prefix: str, generated: str, running: str, where: str,
                   model: str | None = None) -> Counters:
    """Sum each counter over its labels (engines), per_pos by its ``position`` label; a sample labelled with
    another ``model_name`` than ``model`` (the one measured) is not summed in."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if model is not None and sample.labels.get("model_name", model) != model:
                    continue
                name = sample.name[:-6] if sample.name.endswith("_total") else sample.name
                if name.endswith(("_created", "_bucket", "_count", "_sum")) and name not in sums:
                    continue
                if not math.isfinite(sample.value):  # Prometheus text may say NaN or +Inf; a counter may not
                    raise MeasureError(f"{where}: {sample.name} is {sample.value}, not a count")
                if name == f"{prefix}_num_accepted_tokens_per_pos":
                    pos = int(sample.labels.get("position", -1))
                    per_pos[pos] = per_pos.get(pos, 0.0) + sample.value
                else:
                    sums[name] = sums.get(name, 0.0) + sample.value
    except ValueError as exc:
        raise NotPrometheus(f"not Prometheus text ({short(str(exc))})", where) from None
    return Counters(sums.get(f"{prefix}_num_drafts"), sums.get(f"{prefix}_num_draft_tokens"),
                    sums.get(f"{prefix}_num_accepted_tokens"), per_pos, sums.get(generated), sums.get(running))


def _server_message(text: str) -> str:
    """The error message a server put in its JSON reply (vLLM: error.message or message; llama-server: error)."""
    try:
        data = loads_strict(text, "the reply")
    except EagleconvError:
        return short(text) or "no body"
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return short(str(err.get("message") or err))
        return short(str(data.get("message") or err))
    return short(text)
