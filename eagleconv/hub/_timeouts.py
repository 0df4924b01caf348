"""Every Hub request gets a connect and read limit (huggingface_hub sends many without one)."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import UsageError
from ._base import CONNECT_TIMEOUT, DEFAULT_TIMEOUT, HubTimeoutError, TIMEOUT_ENV


_limit: float | None = None


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


def _limited(existing: Any, limit: float) -> float:
    return limit if existing is None else min(float(existing), limit)


def _timed_out(method: str, url: Any, limit: float) -> HubTimeoutError:
    return HubTimeoutError(f"no answer within {limit:g} s ({method} {url}); --timeout SECONDS or "
                           f"{TIMEOUT_ENV} sets the limit")


def _httpx_client_factory(template: Any) -> Callable[[], Any]:
    """huggingface_hub >= 1.0: an httpx(2) Client subclass like its default one (same event hooks) with limits."""
    http = sys.modules[type(template).__module__.split(".")[0]]
    hooks = template.event_hooks

    class Stream(http.SyncByteStream):  # type: ignore[name-defined]
        """A streamed body (downloads) whose read timeout is eagleconv's error too."""

        def __init__(self, inner: Any, method: str, url: Any, limit: float):
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
            if isinstance(response.stream, http.SyncByteStream):
                response.stream = Stream(response.stream, request.method, url, limit)
            return response

    return lambda: Client(event_hooks=hooks, follow_redirects=True, timeout=None)


def _requests_session_factory() -> Callable[[], Any]:
    """huggingface_hub 0.x (requests): a Session whose every request has eagleconv's limits."""
    import requests

    class Session(requests.Session):
        def send(self, request: Any, **kwargs: Any) -> Any:
            limit = _limit
            if limit is None:
                return super().send(request, **kwargs)
            old = kwargs.get("timeout")
            connect, read = old if isinstance(old, tuple) else (old, old)
            kwargs["timeout"] = (_limited(connect, min(CONNECT_TIMEOUT, limit)), _limited(read, limit))
            try:
                return super().send(request, **kwargs)
            except requests.Timeout:
                raise _timed_out(request.method or "", (request.url or "").split("?")[0], limit) from None

    return Session


@contextmanager
def hub_timeouts(seconds: float | None = None) -> Iterator[float]:
    """Every huggingface_hub request made inside gives up after ``hub_timeout(seconds)`` without an answer."""
    global _limit, _client_installed
    import huggingface_hub

    limit = hub_timeout(seconds)
    if not _client_installed:
        if hasattr(huggingface_hub, "set_client_factory"):
            huggingface_hub.set_client_factory(_httpx_client_factory(huggingface_hub.get_session()))
        else:  # pragma: no cover - huggingface_hub < 1.0
            huggingface_hub.configure_http_backend(backend_factory=_requests_session_factory())
        _client_installed = True
    previous, _limit = _limit, limit
    try:
        yield limit
    finally:
        _limit = previous
