"""The one bounded HTTP channel for the requests eagleconv makes itself (``measure``'s server): one deadline from
connect to the last byte, a body cap per call, no redirects followed, JSON through the strict reader, and a URL's
``user:secret@`` never printed.

requests' (urllib3's) timeout is per socket read: a server that sends its headers and then a byte a second never
trips it, and its body grows without limit.  Here a watchdog shuts the socket down when the request's deadline
passes, whichever read is blocked (status line, headers, chunked framing, body), and the body is read in pieces
against its cap.  Every failure is an :class:`HTTPError` naming the request, typed by what happened (the status, a
timeout, a refused connection), never told apart by its text.
"""

from __future__ import annotations

import base64
import http.client
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

from ..errors import EagleconvError, UsageError
from ..support.jsonio import JSONValue, loads_strict

CONNECT_TIMEOUT = 10.0
MAX_BODY = 16 * 1024 * 1024  # the default cap on one reply's body; callers pass one per endpoint
MAX_CONCURRENCY = 256  # requests in flight at once (a thread and a connection each); vLLM's benchmarks go to 256
_PIECE = 64 * 1024
_GONE = 1e-6  # a socket's read timeout once its request is past the deadline


class HTTPError(EagleconvError):
    """A request that failed: ``where`` is "METHOD URL" (credentials removed), ``status`` the HTTP status when the
    server answered one."""

    def __init__(self, message: str, where: str, status: int | None = None):
        self.where, self.status = where, status
        super().__init__(message, where)


class HTTPStatusError(HTTPError):
    """The server answered ``status`` >= 300 (a redirect is not followed)."""


class HTTPTimeoutError(HTTPError, TimeoutError):
    """No complete answer (connect to the last byte) within the request's deadline."""


class HTTPConnectionError(HTTPError, ConnectionError):
    """No connection, or the server closed it before answering in full."""


class HTTPRefusedError(HTTPConnectionError, ConnectionRefusedError):
    """Nothing listens on that host and port."""


class HTTPBodyError(HTTPError):
    """An answer over its cap, in an encoding eagleconv does not decode, or not the strict JSON asked for."""


def redact(url: str) -> str:
    """``url`` without its ``user:secret@`` (what every report and error line prints)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])) if "@" in parts.netloc else url


def short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass
class Reply:
    status: int
    body: bytes
    where: str

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> JSONValue:
        """The body through the strict JSON reader (no NaN, no duplicate keys, bounded depth): HTTPBodyError."""
        try:
            value: JSONValue = loads_strict(self.body, self.where)
        except EagleconvError as exc:
            raise HTTPBodyError(f"the reply is not JSON eagleconv accepts ({exc.message}): "
                                f"{short(self.text) or 'empty'}", self.where, self.status) from None
        return value


class Watchdog:
    """Shuts ``conn``'s socket (the one it holds now: http.client lets go of it once a response will close it) down
    at its deadline: a blocked read returns at once, and the request fails.
    ``deadline`` is a time, or a function giving the current one (the Hub's body deadline grows as bytes arrive),
    asked again when the time it gave passes."""

    def __init__(self, conn: http.client.HTTPConnection, deadline: float | Callable[[], float]):
        self.sock, self.fired, self._lock, self._cancelled = conn.sock, False, threading.Lock(), False
        self._deadline = deadline if callable(deadline) else lambda: deadline
        self._arm()

    def _arm(self) -> None:
        self._timer = threading.Timer(max(0.0, self._deadline() - time.monotonic()), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._cancelled:
                return
            if self._deadline() > time.monotonic():
                self._arm()
                return
            self.fired = True
            sock = self.sock
            if sock is not None:
                try:  # every later read times out at once (Linux still delivers bytes that arrive after a shutdown),
                    sock.settimeout(_GONE)
                    # and the blocked one wakes: the plain socket's shutdown (an SSL socket's own would unwrap it)
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except (OSError, TypeError):  # TypeError: TLS inside a TLS proxy (urllib3's SSLTransport)
                    pass

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            self._timer.cancel()


class Channel:
    """Requests to one server (``base_url``, which may hold ``user:secret@`` for basic auth) under ``timeout``
    seconds each, connect to last byte.  Thread-safe: each request has its own connection."""

    def __init__(self, base_url: str, timeout: float):
        parts = urlsplit(base_url)
        self.url = redact(base_url).rstrip("/")
        try:
            port = parts.port
        except ValueError:
            raise UsageError(f"{self.url}: the port is not a number from 0 to 65535") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"{self.url}: not an http:// or https:// URL")
        self.timeout, self._parts, self._port = timeout, parts, port
        self._auth = _basic_auth(parts)

    def request(self, method: str, path: str, body: bytes | None = None, *, cap: int = MAX_BODY,
                content_type: str = "application/json") -> Reply:
        """The reply (any status below 300); HTTPStatusError for a redirect or a status >= 400 is the caller's to
        raise (``Reply.status``), so it can read the body of a 4xx."""
        where = f"{method} {self.url}{path}"
        deadline = time.monotonic() + self.timeout
        connect = min(CONNECT_TIMEOUT, self.timeout)
        kind = http.client.HTTPSConnection if self._parts.scheme == "https" else http.client.HTTPConnection
        conn = kind(self._parts.hostname or "", self._port, timeout=connect)
        try:
            conn.connect()
        except OSError as exc:
            conn.close()
            if isinstance(exc, TimeoutError):
                raise HTTPTimeoutError(f"no connection within {connect:g} s", where) from None
            if isinstance(exc, ConnectionRefusedError):
                raise HTTPRefusedError("connection refused (is the server running, on this port?)", where) from None
            raise HTTPConnectionError(f"connection failed ({short(str(exc.strerror or exc))})", where) from None
        dog = Watchdog(conn, deadline)
        late = HTTPTimeoutError(f"no answer within {self.timeout:g} s, connect to last byte (--timeout SECONDS sets "
                                "the limit)", where)
        try:
            answer = self._exchange(conn, dog, method, path, body, cap, content_type, where)
        except HTTPError:
            raise
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if dog.fired:
                raise late from None
            raise HTTPConnectionError(f"connection failed ({type(exc).__name__}: {short(str(exc)) or 'closed'})",
                                      where) from None
        finally:
            dog.cancel()
            conn.close()
        if dog.fired:  # the shutdown can read as the end of a body that runs to the connection's close
            raise late
        return answer

    def _exchange(self, conn: http.client.HTTPConnection, dog: Watchdog, method: str, path: str, body: bytes | None, cap: int,
                  content_type: str, where: str) -> Reply:
        headers = {"Accept-Encoding": "identity", "Connection": "close"}
        if body is not None:
            headers["Content-Type"] = content_type
        if self._auth:
            headers["Authorization"] = self._auth
        conn.sock.settimeout(self.timeout)  # a read's own limit; the watchdog's is the total
        conn.request(method, (self._parts.path.rstrip("/") + path) or "/", body=body, headers=headers)
        response = conn.getresponse()
        status = response.status
        if 300 <= status < 400:
            target = redact(response.getheader("Location") or "nowhere")
            raise HTTPStatusError(f"HTTP {status} redirects to {short(target)}: eagleconv does not follow redirects; "
                                  "give that URL if it is the server", where, status)
        encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            raise HTTPBodyError(f"the reply is {short(encoding, 20)}-encoded; eagleconv asked for identity", where,
                                status)
        length = response.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > cap:
            raise HTTPBodyError(f"the reply is {int(length)} bytes, over the {cap} bytes this endpoint may send",
                                where, status)
        data = bytearray()
        while not dog.fired and (piece := response.read1(_PIECE)):
            data += piece
            if len(data) > cap:
                raise HTTPBodyError(f"the reply is over the {cap} bytes this endpoint may send", where, status)
        return Reply(status, bytes(data), where)


def _basic_auth(parts: SplitResult) -> str | None:
    if parts.username is None:
        return None
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return "Basic " + base64.b64encode(pair).decode()
