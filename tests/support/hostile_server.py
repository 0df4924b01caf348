"""A hostile HTTP server on 127.0.0.1 (real sockets, raw bytes): llama-server's endpoints, any of which can be
made to misbehave (drip, endless or lying bodies, redirects, NaN, nesting, wrong types).

Untouched, it is a well-behaved llama-server without ``--metrics`` (``/metrics`` answers 404), so ``measure
--engine llama.cpp`` reads the replies' timings and writes a report.  A
``Behaviour`` writes the whole answer itself, so a test can send what no HTTP library would.
"""

from __future__ import annotations

import json
import socketserver
import threading
import time
from collections.abc import Callable
from typing import BinaryIO

Behaviour = Callable[[BinaryIO, threading.Event], None]
MODEL = "fake/target"
TOKENS = [5, 6, 7, 8]


def reply(status: int, body: object, headers: tuple[tuple[str, str], ...] = (),
          content_type: str = "application/json") -> Behaviour:
    """One answer: ``body`` as given (bytes, str) or as JSON (anything else; ``json.dumps`` writes NaN as is)."""
    data = body if isinstance(body, bytes) else body.encode() if isinstance(body, str) else json.dumps(body).encode()

    def send(out: BinaryIO, stop: threading.Event) -> None:
        length = () if any(k.lower() == "content-length" for k, _ in headers) else (f"Content-Length: {len(data)}",)
        head = [f"HTTP/1.1 {status} X", f"Content-Type: {content_type}", *length, "Connection: close",
                *(f"{k}: {v}" for k, v in headers)]
        out.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)

    return send


DRIP_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"


def drip(every: float = 0.2, limit: float = 10.0, prefix: bytes = b"", head: bytes = DRIP_HEAD,
         byte: bytes = b" ") -> Behaviour:
    """``head`` (headers, by default) at once, then ``byte`` every ``every`` s for ``limit`` s (no Content-Length:
    the body never ends before the connection does; a ``head`` that stops inside the headers drips those)."""
    def send(out: BinaryIO, stop: threading.Event) -> None:
        out.write(head + prefix)
        out.flush()
        end = time.monotonic() + limit
        while time.monotonic() < end and not stop.wait(every):
            out.write(byte)
            out.flush()

    return send


def endless(piece: bytes = b"1" * 65536, limit: float = 20.0) -> Behaviour:
    """A chunked 200 whose chunks never end (for ``limit`` s): the body has no size to check up front."""
    def send(out: BinaryIO, stop: threading.Event) -> None:
        out.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
        end = time.monotonic() + limit
        while time.monotonic() < end and not stop.is_set():
            out.write(b"%x\r\n%s\r\n" % (len(piece), piece))

    return send


GOOD: dict[str, Behaviour] = {
    "/v1/models": reply(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]}),
    "/props": reply(200, {"build_info": "b1-hostile"}),
    # no /metrics: a 404 (an older llama-server's; today's answers 501, which test_channel tests on its own), so
    # each test of another endpoint fails before the fix for its own bug, not for the 501
    "/metrics": reply(404, {"error": "not found"}),
    "/completion": reply(200, {"tokens": TOKENS, "timings": {"draft_n": 3, "draft_n_accepted": 2}}),
}


class HostileServer:
    """``behaviours`` replace GOOD's answer per path ("/metrics") or per method and path ("GET /x"), "*" any other; ``seen`` records (method, path, headers) of each request."""

    def __init__(self, behaviours: dict[str, Behaviour] | None = None):
        self.behaviours = {**GOOD, **(behaviours or {})}
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.stop_event = threading.Event()
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HostileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[socketserver.StreamRequestHandler]:
        srv = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline(65537).decode("latin-1").split()
                headers: dict[str, str] = {}
                while (h := self.rfile.readline(65537)) not in (b"\r\n", b"\n", b""):
                    name, _, value = h.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                self.rfile.read(int(headers.get("content-length", 0)))
                if len(line) < 2:
                    return
                path = line[1].split("?")[0]
                srv.seen.append((line[0], path, headers))
                behaviour = srv.behaviours.get(f"{line[0]} {path}") or srv.behaviours.get(path) or \
                    srv.behaviours.get("*") or reply(404, {"error": "not found"})
                try:
                    behaviour(self.wfile, srv.stop_event)
                except OSError:  # the client gave up: what the test wants
                    pass

        return Handler
