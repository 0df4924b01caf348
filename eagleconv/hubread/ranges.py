"""Bounded HTTP reads of a Hub repository's files: byte ranges, small JSON answers, and nothing else.

The header-only ``hf://`` reader (``hubread.remote``) and ``audit`` read a repository
through here.  huggingface_hub builds the headers (``build_hf_headers``: the
token, the user agent), in the same way from 0.30 to 2.x; the URLs are its
``/api/models/ORG/NAME/revision/REV`` and ``/ORG/NAME/resolve/COMMIT/FILE``; the request itself is the standard library's, so that every answer is
read through one bounded ``read(n)``: a server that ignores ``Range`` or sends
an endless body costs at most the bytes asked for.  Every byte of every answer
is counted (``bytes_read``).  A 429 is honoured with its ``Retry-After`` (at
most ``MAX_RETRY_AFTER`` seconds, ``RETRIES`` times); a 5xx is retried as often
after ``BACKOFF`` seconds; then the failure is a :class:`HubHTTPError` saying
which status, and the row or the command reports it.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

from ..support.jsonio import MAX_JSON_BYTES, loads_strict
from .base import HubError, HubTimeoutError, hub_endpoint
from .timeouts import MIN_RATE, hub_timeout

_PIECE = 64 * 1024  # bytes asked of one socket read; the deadline is checked between reads

RETRIES = 3  # tries after the first, for a 429 or a 5xx
MAX_RETRY_AFTER = 30.0  # seconds: a longer Retry-After is waited this long, then the next answer decides
BACKOFF = 1.0  # seconds before retrying a 5xx (doubled each time)
DEFAULT_ENDPOINT = "https://huggingface.co"
_T = TypeVar("_T")


class HubHTTPError(HubError):
    """The Hub answered with an error status: ``status``, its ``X-Error-Code`` and ``Retry-After`` (seconds)."""

    def __init__(self, message: str, path: str | None = None, *, status: int = 0, error_code: str | None = None,
                 retry_after: float | None = None):
        super().__init__(message, path)
        self.status, self.error_code, self.retry_after = status, error_code, retry_after


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds (an integer; an HTTP date is read as 'soon'), or None."""
    if not value:
        return None
    value = value.strip()
    return float(value) if value.isdigit() else 1.0


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def with_retries(call: Callable[[], _T]) -> _T:
    """``call()``, again after a 429 (waiting its Retry-After, bounded) or a 5xx, at most RETRIES more times."""
    for attempt in range(RETRIES + 1):
        try:
            return call()
        except HubHTTPError as exc:
            if attempt == RETRIES or not (exc.status == 429 or exc.status >= 500):
                raise
            wait = exc.retry_after if exc.status == 429 and exc.retry_after is not None else BACKOFF * 2**attempt
            _sleep(min(wait, MAX_RETRY_AFTER))
    raise AssertionError("unreachable")


class _NoCrossHostAuth(urllib.request.HTTPRedirectHandler):
    """Follow redirects (the Hub sends LFS files to a CDN) without handing the token to another host."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urlsplit(newurl).netloc != urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_NoCrossHostAuth)
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class RangeReader:
    """Reads parts of one Hub's files, counting the bytes; safe to share between threads."""

    def __init__(self, endpoint: str | None = None, token: str | bool | None = None,
                 timeout: float | None = None) -> None:
        from huggingface_hub.utils import build_hf_headers

        self.endpoint = (hub_endpoint(endpoint) or DEFAULT_ENDPOINT).rstrip("/")
        self.timeout = hub_timeout(timeout)
        self.headers = dict(build_hf_headers(token=token, library_name="eagleconv"))
        self.bytes_read = 0
        self.requests = 0
        self._lock = threading.Lock()

    def file_url(self, repo_id: str, filename: str, commit: str) -> str:
        """``hf_hub_url``'s resolve URL, built here: importing ``huggingface_hub.file_download`` for it costs more
        than a drafter's whole header read."""
        return f"{self.endpoint}/{repo_id}/resolve/{quote(commit, safe='')}/{quote(filename)}"

    def info_url(self, repo_id: str, revision: str | None) -> str:
        return f"{self.endpoint}/api/models/{repo_id}/revision/{quote(revision or 'main', safe='')}"

    def _count(self, n: int) -> None:
        with self._lock:
            self.bytes_read += n
            self.requests += 1

    def _open(self, url: str, headers: dict[str, str]) -> Any:
        request = urllib.request.Request(url, headers={**self.headers, **headers})
        try:
            return _OPENER.open(request, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            self._count(0)
            code = exc.headers.get("X-Error-Code") if exc.headers else None
            retry = retry_after_seconds(exc.headers.get("Retry-After")) if exc.headers else None
            exc.close()
            raise HubHTTPError(f"the Hub answered {exc.code} {exc.reason}" + (f" ({code})" if code else ""), url,
                               status=exc.code, error_code=code, retry_after=retry) from None
        except TimeoutError:
            raise HubTimeoutError(f"no answer within {self.timeout:g} s", url) from None
        except OSError as exc:
            raise HubError(f"cannot reach the Hub: {getattr(exc, 'reason', exc)}", url) from None

    def _read(self, response: Any, limit: int, url: str, started: float) -> bytes:
        """At most ``limit`` bytes of the answer, read piece by piece against one deadline per request (issue 36):
        ``timeout`` after the request started plus a second per MIN_RATE bytes received, so a drip of a byte just
        inside each read's timeout ends as soon as the deadline passes, not after ``limit`` reads."""
        pieces: list[bytes] = []
        got = 0
        try:
            while got < limit:
                piece: bytes = response.read1(min(_PIECE, limit - got))
                if not piece:
                    break
                pieces.append(piece)
                got += len(piece)
                if got < limit and time.monotonic() > started + self.timeout + got / MIN_RATE:
                    raise HubTimeoutError(f"no answer within {self.timeout:g} s (a deadline per request, plus a "
                                          f"second per {MIN_RATE // 1024} KiB received: {got} bytes came)", url)
        except TimeoutError:
            raise HubTimeoutError(f"the answer stalled (no byte within {self.timeout:g} s)", url) from None
        except OSError as exc:
            raise HubError(f"the answer broke off: {exc}", url) from None
        finally:
            response.close()
        self._count(got)
        return b"".join(pieces)

    def read_range(self, url: str, start: int, length: int) -> tuple[bytes, int]:
        """Bytes ``[start, start + length)`` of the file at ``url`` (fewer only at its end), and its size."""
        def once() -> tuple[bytes, int]:
            started = time.monotonic()
            response = self._open(url, {"Range": f"bytes={start}-{start + length - 1}",
                                        "Accept-Encoding": "identity"})
            if response.status == 206:
                match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
                if match is None or int(match[1]) != start or match[3] == "*":
                    response.close()
                    raise HubError(f"the Hub answered a range request with Content-Range "
                                   f"{response.headers.get('Content-Range')!r}, not bytes {start}-.../SIZE", url)
                size = int(match[3])
            elif start == 0:  # Range ignored: the whole file comes, of which we read what we asked for
                size = int(response.headers.get("Content-Length") or -1)
                if size < 0:
                    response.close()
                    raise HubError("the Hub ignored the Range request and named no Content-Length", url)
            else:
                response.close()
                raise HubError(f"the Hub ignored the Range request (answered {response.status}): header-only "
                               "reading needs ranges; --download fetches the snapshot instead", url)
            want = max(0, min(length, size - start))
            data = self._read(response, want, url, started)
            if len(data) != want:
                raise HubError(f"the answer was truncated: {len(data)} of {want} bytes", url)
            return data, size

        return with_retries(once)

    def read_small(self, url: str, limit: int = MAX_JSON_BYTES) -> bytes:
        """A whole answer (a config.json, an index, an API answer) of at most ``limit`` bytes."""
        def once() -> bytes:
            started = time.monotonic()
            response = self._open(url, {"Accept-Encoding": "identity"})
            declared = response.headers.get("Content-Length")
            data = self._read(response, limit + 1, url, started)
            if len(data) > limit:
                raise HubError(f"the answer is larger than {limit} bytes", url)
            if declared is not None and declared.isdigit() and len(data) != int(declared):
                raise HubError(f"the answer was truncated: {len(data)} of {declared} bytes", url)
            return data

        return with_retries(once)

    def read_json(self, url: str) -> Any:
        """A JSON answer of at most MAX_JSON_BYTES, strictly parsed."""
        return loads_strict(self.read_small(url), url)
