"""Every Hub request gets a connect and read limit (huggingface_hub sends many without one), one deadline for its
body and a cap on it, and a Hub that keeps answering 5xx is retried only within that limit, without huggingface_hub's
retry warnings.

A read limit alone is per socket read: a Hub that sends its headers and then a byte a second never trips it.  So
each response's body (every redirect hop's too) is read against a deadline, ``--timeout`` after the request started
plus one second per MIN_RATE bytes received (a checkpoint's gigabytes take minutes on a real link; a drip gains
nothing), and against a cap: MAX_API_BODY for the Hub's JSON answers, the declared size for a file (h11 holds a
body to its Content-Length), MAX_FILE_BODY for a file sent chunked.

On both of huggingface_hub's clients, the status line and headers are held to ``--timeout`` too.  httpx (>= 1.0):
a Client whose responses' byte streams check each chunk; it hands out no socket before the headers end, so each
request is sent from a thread of its own while its caller watches their deadline (a Hub that drips them keeps that
thread, not the caller).  requests (0.x): a read of urllib3's blocks until its whole ``amt`` arrives, so the check
between chunks is not enough; each connection's response is watched (io.http's Watchdog, from the status line on)
and its socket shut down at the deadline, which the body's reader moves on as its pieces arrive."""

from __future__ import annotations

import contextvars
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import UsageError
from ..io.http import Watchdog
from .base import CONNECT_TIMEOUT, DEFAULT_TIMEOUT, HubError, HubTimeoutError, TIMEOUT_ENV

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
_started = threading.local()  # .at: when the request this thread is sending started (a redirect's hops share it)

MIN_RATE = 256 * 1024  # bytes per second a body must average, past the first --timeout seconds
MAX_API_BODY = 64 * 1024 * 1024  # a Hub JSON answer (a repo's info, a tree page): a 100k-file repo's is ~10 MB
MAX_FILE_BODY = 1 << 40  # a file the Hub sends chunked, without its size: 1 TiB
_WATCH_EVERY = 0.05  # httpx: how often a request's caller looks at its headers' deadline
_PIECE = 64 * 1024  # huggingface_hub 0.x: a body is read in pieces this big, each counted before the next


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


class _Waiting:
    """httpx: a request's wait for its answer's headers, ``deadline`` (None while none is awaited)."""

    def __init__(self, started: float, limit: float):
        self.started, self.limit = started, limit
        self.deadline: float | None = None


def _httpx_client_factory(template: _HttpxClient) -> Callable[[], Any]:  # httpx or httpx2, as the Hub uses
    """huggingface_hub >= 1.0: an httpx(2) Client subclass like its default one (same event hooks) with limits."""
    http = sys.modules[type(template).__module__.split(".")[0]]
    hooks = template.event_hooks

    class Stream(http.SyncByteStream):  # type: ignore[name-defined]
        """A body read against its request's deadline and its cap; its read timeout is eagleconv's error too."""

        def __init__(self, inner: _ByteStream, method: str, url: str, limit: float, started: float, cap: int):
            self.inner, self.what, self.started, self.cap = inner, (method, url, limit), started, cap

        def __iter__(self) -> Iterator[bytes]:
            deadline = _Deadline(self.what[2], self.started)
            try:
                for chunk in self.inner:
                    yield _counted(chunk, deadline, self.cap, self.what)
            except http.TimeoutException:
                raise _timed_out(*self.what) from None

        def close(self) -> None:
            self.inner.close()

    class Sent(http.SyncByteStream):  # type: ignore[name-defined]
        """A request's body: once its last byte is sent, the wait for the answer's headers is timed."""

        def __init__(self, inner: _ByteStream, waiting: _Waiting):
            self.inner, self.waiting = inner, waiting

        def __iter__(self) -> Iterator[bytes]:
            yield from self.inner
            self.waiting.deadline = time.monotonic() + self.waiting.limit

        def close(self) -> None:
            self.inner.close()

    class Client(http.Client):  # type: ignore[name-defined]
        def send(self, request: Any, **kwargs: Any) -> Any:
            """httpx's send, in a thread of its own while this one watches the headers' deadline: httpx hands out
            no socket to shut down before they end, so a Hub that drips them keeps that thread, not the caller."""
            limit = _limit
            if limit is None:
                return super().send(request, **kwargs)
            old = request.extensions.get("timeout") or {}
            request.extensions["timeout"] = {"connect": _limited(old.get("connect"), min(CONNECT_TIMEOUT, limit)),
                                             "read": _limited(old.get("read"), limit),
                                             "write": _limited(old.get("write"), limit),
                                             "pool": _limited(old.get("pool"), limit)}
            url = str(request.url).split("?")[0]
            waiting, outcome, done, send = _Waiting(time.monotonic(), limit), [], threading.Event(), super().send

            def work() -> None:
                _started.at, _started.waiting = waiting.started, waiting
                try:
                    outcome.append(send(request, **kwargs))
                except Exception as exc:  # noqa: BLE001 - raised in the caller's thread
                    outcome.append(exc)
                finally:
                    done.set()

            threading.Thread(target=contextvars.copy_context().run, args=(work,), daemon=True).start()
            while not done.wait(_WATCH_EVERY):
                if waiting.deadline is not None and time.monotonic() > waiting.deadline:
                    raise _timed_out(request.method, url, limit)
            response = outcome[0] if outcome else HubError(f"no answer to {request.method} {url}")
            if isinstance(response, http.TimeoutException):
                raise _timed_out(request.method, url, limit) from None
            if isinstance(response, BaseException):
                raise response
            _bound_retries(response.status_code, response.reason_phrase, request.method, url, limit)
            return response

        def _send_single_request(self, request: Any) -> Any:
            """Each hop's headers watched, and its body wrapped before httpx reads it (it reads a redirect's, and a
            non-streamed answer's)."""
            waiting = getattr(_started, "waiting", None)
            if waiting is not None:
                if "content-length" in request.headers or "transfer-encoding" in request.headers:
                    request.stream = Sent(request.stream, waiting)  # an upload: timed from its last byte
                else:
                    waiting.deadline = waiting.started + waiting.limit
            try:
                response = super()._send_single_request(request)
            finally:
                if waiting is not None:
                    waiting.deadline = None
            limit = _limit
            if limit is not None and isinstance(response.stream, http.SyncByteStream):
                url = str(request.url).split("?")[0]
                response.stream = Stream(response.stream, request.method, url, limit,
                                         getattr(_started, "at", time.monotonic()),
                                         _cap(url, response.headers.get("Content-Length")))
            return response

    return lambda: Client(event_hooks=hooks, follow_redirects=True, timeout=None)


class _Deadline:
    """One response's deadline: ``started`` + the limit + one second per MIN_RATE bytes of its body received."""

    def __init__(self, limit: float, started: float):
        self.limit, self.started, self.received = limit, started, 0

    def __call__(self) -> float:
        return self.started + self.limit + self.received / MIN_RATE


def _counted(chunk: bytes, deadline: _Deadline, cap: int, what: tuple[str, str, float], fired: bool = False) -> bytes:
    """``chunk``, once counted against its body's cap and deadline (both clients read bodies through this)."""
    deadline.received += len(chunk)
    if deadline.received > cap:
        raise HubError(f"the Hub's answer to {what[0]} {what[1]} is over {cap} bytes")
    if fired or time.monotonic() > deadline():
        raise _timed_out(*what)
    return chunk


class _Body:
    """huggingface_hub 0.x: a response's ``raw`` (urllib3's, which requests reads) read in pieces against its
    deadline and cap.  A read blocked in a drip is ended by the connection's watchdog; its error is eagleconv's."""

    def __init__(self, raw: Any, dog: Watchdog, deadline: _Deadline, method: str, url: str, cap: int):
        self._raw, self._dog, self._deadline, self._cap = raw, dog, deadline, cap
        self._what = (method, url, deadline.limit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def _took(self, chunk: bytes) -> bytes:
        return _counted(chunk, self._deadline, self._cap, self._what, fired=self._dog.fired)

    @contextmanager
    def _reading(self) -> Iterator[None]:
        try:
            yield
        except HubError:
            self._dog.cancel()
            raise
        except Exception:
            self._dog.cancel()
            if self._dog.fired:
                raise _timed_out(*self._what) from None
            raise

    def stream(self, amt: int | None = _PIECE, decode_content: bool | None = None) -> Iterator[bytes]:
        with self._reading():
            for chunk in self._raw.stream(min(amt or _PIECE, _PIECE), decode_content=decode_content):
                yield self._took(chunk)
            self._dog.cancel()
            if self._dog.fired:  # the shutdown reads as the end of a body that runs to the connection's close
                raise _timed_out(*self._what)

    def read(self, amt: int | None = None, decode_content: bool | None = None, **kwargs: Any) -> bytes:
        if amt is None:
            return b"".join(self.stream(_PIECE, decode_content))
        with self._reading():
            return self._took(self._raw.read(amt, decode_content=decode_content, **kwargs))

    def release_conn(self) -> None:
        self._dog.cancel()
        self._raw.release_conn()

    def close(self) -> None:
        self._dog.cancel()
        self._raw.close()


def _cap(url: str, declared: str | None) -> int:
    """MAX_API_BODY for the Hub's JSON answers; a file's declared size, or MAX_FILE_BODY when it is sent chunked."""
    if "/resolve/" not in url:
        return MAX_API_BODY
    return int(declared) if declared is not None and declared.isdigit() else MAX_FILE_BODY


def _watched(connection: type) -> type:
    """urllib3's connection class, its response (status line, headers, body) watched from when the request is sent:
    the watchdog shuts the socket down at the deadline, whichever read is blocked."""

    class Watched(connection):
        def getresponse(self, *args: Any, **kwargs: Any) -> Any:
            old = getattr(self, "_eagleconv_dog", None)
            if old is not None:  # this connection's previous response
                old.cancel()
            limit = _limit
            if limit is None or self.sock is None:
                return super().getresponse(*args, **kwargs)
            # a request's redirect hops share its start; an upload's answer is timed from the body's last byte
            sent = getattr(_started, "at", None)
            deadline = _Deadline(limit, time.monotonic() if sent is None or _started.upload else sent)
            self._eagleconv_dog = dog = Watchdog(self, deadline)
            _started.dog = (dog, deadline)
            return super().getresponse(*args, **kwargs)

    Watched.__name__ = Watched.__qualname__ = connection.__name__
    return Watched


_POOLS: dict[type, type] = {}


def _watch_pools(manager: Any) -> Any:
    """A urllib3 PoolManager (or proxy manager) whose pools make Watched connections."""
    def watched(pool: Any) -> type:
        if pool not in _POOLS:
            _POOLS[pool] = type(pool.__name__, (pool,), {"ConnectionCls": _watched(pool.ConnectionCls)})
            _POOLS[_POOLS[pool]] = _POOLS[pool]
        return _POOLS[pool]

    manager.pool_classes_by_scheme = {k: watched(v) for k, v in manager.pool_classes_by_scheme.items()}
    return manager


def _requests_session_factory() -> type[requests.Session]:
    """huggingface_hub 0.x (requests): a Session whose every request has eagleconv's limits, and whose adapter's
    connections are watched and bodies bounded as the httpx client's are."""
    import requests
    from requests.adapters import HTTPAdapter

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            _watch_pools(self.poolmanager)

        def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
            return _watch_pools(super().proxy_manager_for(proxy, **kwargs))

        def build_response(self, req: requests.PreparedRequest, resp: Any) -> requests.Response:
            response = super().build_response(req, resp)
            watched, _started.dog = getattr(_started, "dog", None), None
            if watched is not None and _limit is not None:
                dog, deadline = watched
                url = (req.url or "").split("?")[0]
                response.raw = _Body(response.raw, dog, deadline, req.method or "", url,
                                     _cap(url, response.headers.get("Content-Length")))
            return response

    class Session(requests.Session):
        def __init__(self) -> None:
            super().__init__()
            self.mount("https://", Adapter())
            self.mount("http://", Adapter())

        def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
            limit = _limit
            if limit is None:
                return super().send(request, **kwargs)
            old = kwargs.get("timeout")
            connect, read = old if isinstance(old, tuple) else (old, old)
            kwargs["timeout"] = (_limited(connect, min(CONNECT_TIMEOUT, limit)), _limited(read, limit))
            method, url = request.method or "", (request.url or "").split("?")[0]
            outer = getattr(_started, "at", None) is None  # not a redirect hop (requests sends those inside)
            if outer:
                _started.at, _started.upload, _started.dog = time.monotonic(), request.body is not None, None
            try:
                response = super().send(request, **kwargs)
            except requests.RequestException as exc:
                watched = getattr(_started, "dog", None)
                if isinstance(exc, requests.Timeout) or (watched is not None and watched[0].fired):
                    raise _timed_out(method, url, limit) from None
                raise
            finally:
                if outer:
                    _started.at = None
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
