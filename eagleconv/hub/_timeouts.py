"""Every Hub request gets a connect and read limit (huggingface_hub sends many without one), and a Hub that keeps
answering 5xx is retried only within that limit, without huggingface_hub's retry warnings."""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import UsageError
from ._base import CONNECT_TIMEOUT, DEFAULT_TIMEOUT, HubError, HubTimeoutError, TIMEOUT_ENV

if TYPE_CHECKING:
    import requests


class _HttpxClient(Protocol):
    """What the factory copies from huggingface_hub's own httpx (or httpx2) client."""

    @property
    def event_hooks(self) -> dict[str, list[Callable[..., object]]]: ...


class _ByteStream(Iterable[bytes], Protocol):
    """httpx's SyncByteStream as a download's response holds it."""

    def close(self) -> None: ...


_limit: float | None = None

# Statuses huggingface_hub's http_backoff retries (5 times, 1+2+4+8+8 s apart, two log lines each try).
_RETRIED = frozenset({429, 500, 502, 503, 504})
_failing_since: float | None = None  # when, inside the current hub_timeouts, the Hub first answered one of them
_last_failure: str | None = None  # "500 Internal Server Error (HEAD url)": for the error line
_RETRY_LOGGER = "huggingface_hub.utils._http"  # its "HTTP Error 500 thrown..." / "Retrying in 8s" warnings


_client_installed = False


def hub_timeout(seconds: float | None = None) -> float:
    """The read timeout to use: ``seconds``, else EAGLECONV_HUB_TIMEOUT, else DEFAULT_TIMEOUT (UsageError if bad)."""
    source = "--timeout"
    if seconds is None:
        text = os.environ.get(TIMEOUT_ENV, "").strip()
        if not text:
            return DEFAULT_TIMEOUT
        source = TIMEOUT_ENV
        try:
            seconds = float(text)
        except ValueError:
            raise UsageError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds") from None
    if isinstance(seconds, bool) or not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"{source} {seconds!r}: the Hub timeout must be a positive number of seconds")
    return float(seconds)


def _limited(existing: float | None, limit: float) -> float:
    return limit if existing is None else min(float(existing), limit)


def _timed_out(method: str, url: str, limit: float) -> HubTimeoutError:
    return HubTimeoutError(f"no answer within {limit:g} s ({method} {url}); --timeout SECONDS or "
                           f"{TIMEOUT_ENV} sets the limit")


def _bound_retries(status: int, reason: str, method: str, url: str, limit: float) -> None:
    """Let huggingface_hub retry a 5xx/429 only until ``limit`` seconds after the first one: then HubError, which
    it does not retry (it retries network errors and statuses only)."""
    global _failing_since, _last_failure
    if status not in _RETRIED:
        return
    now = time.monotonic()
    _last_failure = f"{status} {reason} ({method} {url})".replace("  ", " ")
    if _failing_since is None:
        _failing_since = now
    elif now - _failing_since >= limit:
        raise HubError(f"the Hub answered {_last_failure} for {now - _failing_since:.0f} s, retried until the "
                       f"{limit:g} s limit; --timeout SECONDS or {TIMEOUT_ENV} sets it")


def server_failure() -> str | None:
    """The last retried status the Hub answered in the latest hub_timeouts (for an error line), or None."""
    return _last_failure


def _httpx_client_factory(template: _HttpxClient) -> Callable[[], Any]:  # httpx or httpx2, as the Hub uses
    """huggingface_hub >= 1.0: an httpx(2) Client subclass like its default one (same event hooks) with limits."""
    http = sys.modules[type(template).__module__.split(".")[0]]
    hooks = template.event_hooks

    class Stream(http.SyncByteStream):  # type: ignore[name-defined]
        """A streamed body (downloads) whose read timeout is eagleconv's error too."""

        def __init__(self, inner: _ByteStream, method: str, url: str, limit: float):
            self.inner, self.what = inner, (method, url, limit)

        def __iter__(self) -> Iterator[bytes]:
            try:
                yield from self.inner
            except http.TimeoutException:
                raise _timed_out(*self.what) from None

        def close(self) -> None:
            self.inner.close()

    class Client(http.Client):  # type: ignore[name-defined]
        def send(self, request: Any, **kwargs: Any) -> Any:
            limit = _limit
            if limit is None:
                return super().send(request, **kwargs)
            old = request.extensions.get("timeout") or {}
            request.extensions["timeout"] = {"connect": _limited(old.get("connect"), min(CONNECT_TIMEOUT, limit)),
                                             "read": _limited(old.get("read"), limit),
                                             "write": _limited(old.get("write"), limit),
                                             "pool": _limited(old.get("pool"), limit)}
            url = str(request.url).split("?")[0]
            try:
                response = super().send(request, **kwargs)
            except http.TimeoutException:
                raise _timed_out(request.method, url, limit) from None
            _bound_retries(response.status_code, response.reason_phrase, request.method, url, limit)
            if isinstance(response.stream, http.SyncByteStream):
                response.stream = Stream(response.stream, request.method, url, limit)
            return response

    return lambda: Client(event_hooks=hooks, follow_redirects=True, timeout=None)


def _requests_session_factory() -> type[requests.Session]:
    """huggingface_hub 0.x (requests): a Session whose every request has eagleconv's limits."""
    import requests

    class Session(requests.Session):
        def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
            limit = _limit
            if limit is None:
                return super().send(request, **kwargs)
            old = kwargs.get("timeout")
            connect, read = old if isinstance(old, tuple) else (old, old)
            kwargs["timeout"] = (_limited(connect, min(CONNECT_TIMEOUT, limit)), _limited(read, limit))
            method, url = request.method or "", (request.url or "").split("?")[0]
            try:
                response = super().send(request, **kwargs)
            except requests.Timeout:
                raise _timed_out(method, url, limit) from None
            _bound_retries(response.status_code, response.reason or "", method, url, limit)
            return response

    return Session


@contextmanager
def hub_timeouts(seconds: float | None = None) -> Iterator[float]:
    """Every huggingface_hub request made inside gives up after ``hub_timeout(seconds)`` without an answer, and
    its retries of a Hub answering 5xx stop that long after the first one, without their warnings."""
    global _limit, _client_installed, _failing_since, _last_failure
    import huggingface_hub

    limit = hub_timeout(seconds)
    if not _client_installed:
        if hasattr(huggingface_hub, "set_client_factory"):
            huggingface_hub.set_client_factory(_httpx_client_factory(huggingface_hub.get_session()))
        else:  # pragma: no cover - huggingface_hub < 1.0
            huggingface_hub.configure_http_backend(backend_factory=_requests_session_factory())
        _client_installed = True
    previous, _limit = _limit, limit
    _failing_since, _last_failure = None, None
    retry_log = logging.getLogger(_RETRY_LOGGER)
    level = retry_log.level
    retry_log.setLevel(logging.ERROR)  # eagleconv's one error line says what failed
    try:
        yield limit
    finally:
        _limit = previous
        retry_log.setLevel(level)
