"""HTTP to the server (requests) and its Prometheus counters (prometheus_client's parser); every failure is a
MeasureError: one line naming the URL, exit 2."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, overload

from ..errors import EagleconvError
from ..jsonio import JSONValue

if TYPE_CHECKING:
    import requests

CONNECT_TIMEOUT = 10.0


class MeasureError(EagleconvError):
    """The server cannot be measured (refused, timed out, no counters, another model, foreign traffic): exit 2."""


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
    """One server: a requests Session per thread (a Session is not shared between threads)."""

    def __init__(self, url: str, timeout: float):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._local = threading.local()

    def _session(self) -> requests.Session:
        import requests

        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    @overload
    def request(self, method: str, path: str, body: JSONValue = None, *, want_json: Literal[True] = True,
                missing_ok: bool = False) -> JSONValue: ...

    @overload
    def request(self, method: str, path: str, body: JSONValue = None, *, want_json: Literal[False],
                missing_ok: bool = False) -> str | None: ...

    def request(self, method: str, path: str, body: JSONValue = None, *, want_json: bool = True,
                missing_ok: bool = False) -> JSONValue:
        """The reply's JSON (or text); None for a 404 when ``missing_ok``.  Failures: MeasureError."""
        import requests

        where = f"{method} {self.url}{path}"
        try:
            reply = self._session().request(method, self.url + path, json=body,
                                             timeout=(min(CONNECT_TIMEOUT, self.timeout), self.timeout))
        except requests.exceptions.ConnectTimeout:
            raise MeasureError(f"{where}: no connection within {min(CONNECT_TIMEOUT, self.timeout):g} s") from None
        except requests.exceptions.Timeout:
            raise MeasureError(f"{where}: no answer within {self.timeout:g} s (--timeout SECONDS sets the limit)") \
                from None
        except requests.exceptions.ConnectionError as exc:
            text = str(exc)
            why = "connection refused (is the server running, on this port?)" if "refused" in text.lower() \
                else f"connection failed ({_short(text)})"
            raise MeasureError(f"{where}: {why}") from None
        except requests.exceptions.RequestException as exc:
            raise MeasureError(f"{where}: {type(exc).__name__}: {_short(str(exc))}") from None
        if reply.status_code == 404 and missing_ok:
            return None
        if reply.status_code >= 400:
            raise MeasureError(f"{where}: HTTP {reply.status_code}: {_server_message(reply.text)}")
        if not want_json:
            return reply.text
        try:
            return json.loads(reply.text)
        except ValueError:
            raise MeasureError(f"{where}: the reply is not JSON ({_short(reply.text) or 'empty'})") from None

    def counters(self, prefix: str, generated: str, running: str, model: str | None = None) -> Counters | None:
        """The speculative counters from /metrics; None when the server has no /metrics."""
        text = self.request("GET", "/metrics", want_json=False, missing_ok=True)
        if text is None:
            return None
        return parse_counters(text, prefix, generated, running, f"{self.url}/metrics", model)


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
                if name == f"{prefix}_num_accepted_tokens_per_pos":
                    pos = int(sample.labels.get("position", -1))
                    per_pos[pos] = per_pos.get(pos, 0.0) + sample.value
                else:
                    sums[name] = sums.get(name, 0.0) + sample.value
    except ValueError as exc:
        raise MeasureError(f"{where}: not Prometheus text ({_short(str(exc))})") from None
    return Counters(sums.get(f"{prefix}_num_drafts"), sums.get(f"{prefix}_num_draft_tokens"),
                    sums.get(f"{prefix}_num_accepted_tokens"), per_pos, sums.get(generated), sums.get(running))


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _server_message(text: str) -> str:
    """The error message a server put in its JSON reply (vLLM: error.message or message; llama-server: error)."""
    try:
        data = json.loads(text)
    except ValueError:
        return _short(text) or "no body"
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return _short(str(err.get("message") or err))
        return _short(str(data.get("message") or err))
    return _short(text)
