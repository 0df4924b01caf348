"""A small speculative-decoding server on 127.0.0.1 for the measure tests: real sockets, vLLM's or llama-server's API.

Its "target" is a fixed integer recurrence (greedy next token of a sequence); its "drafter" proposes the target's
tokens except where a seeded hash says it errs, so acceptance varies by prompt, round and position.  It decodes as
vLLM counts (a prefill token, then rounds of K drafts verified with one bonus token; the last round counted in full
though its tokens past max_tokens are cut) and keeps Prometheus counters as the engine names them.

``reference(prompts, max_tokens)`` returns what simulate would report for the same engine (tokens, every proposal,
counters), computed by its own decode, so a test compares measure's reading of the server with it.

Failure switches (``server.fail``): "no-spec" (no speculative counters: decoding off), "not-json" (an HTML reply),
"slow" (the completion answers after ``slow_s``), "backwards" (the counters reset after the first request),
"traffic" (each request also counts another client's tokens), "flip" (prompt 1's token 5 is the target's runner-up,
a near-tie with margin 0.01), "lag" (the counters update 0.2 s after the reply, as vLLM's may).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VOCAB = 1000
MODEL = "fake/target"


def target_next(seq: list[int]) -> int:
    return (seq[-1] * 31 + (seq[-2] if len(seq) > 1 else 0) * 17 + len(seq)) % VOCAB


def drafter_next(seq: list[int], step: int) -> int:
    true = target_next(seq)
    errs = (seq[-1] * 7 + len(seq) * 13 + step * 5) % 10 < 3 + step  # errs more at later draft steps
    return (true + 1) % VOCAB if errs else true


class Engine:
    """Greedy speculative decoding with vLLM's counting; ``flip`` makes one token a near-tie's runner-up."""

    def __init__(self, k: int = 3, flip: tuple[int, int] | None = None):
        self.k, self.flip = k, flip

    def decode(self, prompt: list[int], max_tokens: int, n: int | None = None):
        def greedy(s: list[int]) -> int:
            out = len(s) - len(prompt)
            return (target_next(s) + 1) % VOCAB if self.flip == (n, out) else target_next(s)

        seq = list(prompt) + [greedy(list(prompt))]
        drafts, per_pos, rounds = [], [0] * self.k, 0

        def propose(s: list[int]) -> list[int]:
            d, s = [], list(s)
            for step in range(self.k):
                d.append(drafter_next(s, step))
                s.append(d[-1])
            return d

        drafts.append(propose(seq))
        while len(seq) - len(prompt) < max_tokens:
            d, accepted = drafts[-1], 0
            while accepted < self.k and d[accepted] == greedy(seq + d[:accepted]):
                per_pos[accepted] += 1
                accepted += 1
            seq += d[:accepted] + [greedy(seq + d[:accepted])]
            rounds += 1
            drafts.append(propose(seq))
        return seq[len(prompt):][:max_tokens], drafts, rounds, per_pos


def reference(prompts: list[list[int]], max_tokens: int, k: int = 3) -> dict:
    """What ``eagleconv simulate --json`` reports for this engine (its own decode, prompt by prompt)."""
    engine = Engine(k)
    tokens, drafts, rounds, per_pos = [], [], 0, [0] * k
    for p in prompts:
        t, d, r, pp = engine.decode(p, max_tokens)
        tokens.append(t)
        drafts.append(d)
        rounds += r
        per_pos = [a + b for a, b in zip(per_pos, pp)]
    return {"tokens": tokens, "drafts": drafts, "num_drafts": rounds, "num_draft_tokens": rounds * k,
            "num_accepted_tokens": sum(per_pos), "accepted_per_position": per_pos,
            "acceptance_length": 1 + sum(per_pos) / rounds, "engine": "vllm:0.32", "num_speculative_tokens": k,
            "max_tokens": max_tokens, "target_runtime": "fake", "notes": []}


class _Server(ThreadingHTTPServer):
    """A client may close its end while an answer is still being written (measure stops reading at its first
    error): that is the client's right, not a server failure, so it is not printed into the test's stderr."""

    def handle_error(self, request: object, client_address: object) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]  # socketserver types it loosely


class FakeServer:
    def __init__(self, engine: str = "vllm", k: int = 3, metrics: bool = True) -> None:
        self.engine, self.k, self.metrics = engine, k, metrics
        self.fail: str | None = None
        self.slow_s = 2.0
        self.requests: list[tuple[str, str]] = []
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "generated": 0}
        self.per_pos = [0] * k
        self.lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FakeServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def prometheus(self) -> str:
        c, lines = self.counters, []
        prefix = "vllm:" if self.engine == "vllm" else "llamacpp:"
        label = '{engine="0",model_name="fake/target"}' if self.engine == "vllm" else ""
        gen = "vllm:generation_tokens" if self.engine == "vllm" else "llamacpp:tokens_predicted"
        lines += [f"# TYPE {gen}_total counter", f"{gen}_total{label} {float(c['generated'])}"]
        if self.fail != "no-spec" or self.engine == "llama.cpp":  # llama-server exports them at 0 when off
            for name, key in (("num_drafts", "drafts"), ("num_draft_tokens", "draft_tokens"),
                              ("num_accepted_tokens", "accepted")):
                lines += [f"# TYPE {prefix}spec_decode_{name}_total counter",
                          f"{prefix}spec_decode_{name}_total{label} {float(c[key])}"]
            lines.append(f"# TYPE {prefix}spec_decode_num_accepted_tokens_per_pos_total counter")
            for pos, v in enumerate(self.per_pos):
                pl = (label[:-1] + f',position="{pos}"}}') if label else f'{{position="{pos}"}}'
                lines.append(f"{prefix}spec_decode_num_accepted_tokens_per_pos_total{pl} {float(v)}")
        return "\n".join(lines) + "\n"

    def complete(self, prompt: list[int], max_tokens: int, logprobs: bool) -> dict:
        flip = (1, 5) if self.fail == "flip" else None
        n = 1 if flip and prompt == self.flip_prompt else None
        tokens, drafts, rounds, per_pos = Engine(self.k, flip).decode(prompt, max_tokens, n)
        spec = self.fail != "no-spec"

        def count() -> None:
            with self.lock:
                if self.fail == "backwards" and self.counters["generated"]:
                    self.counters = {k: 0 for k in self.counters}  # another replica's (or a restart's) counters
                    self.per_pos = [0] * self.k
                    return
                c = self.counters
                c["generated"] += len(tokens) + (7 if self.fail == "traffic" else 0)
                if spec:
                    c["drafts"] += rounds
                    c["draft_tokens"] += rounds * self.k
                    c["accepted"] += sum(per_pos)
                    self.per_pos = [a + b for a, b in zip(self.per_pos, per_pos)]

        if self.fail == "lag":
            threading.Timer(0.2, count).start()
        else:
            count()
        margins = [0.01 if flip and n == 1 and i == 5 else 1.5 for i in range(len(tokens))]
        return {"tokens": tokens, "margins": margins if logprobs else None,
                "draft_n": rounds * self.k if spec else 0, "draft_n_accepted": sum(per_pos) if spec else 0}

    flip_prompt: list[int] | None = None


def _handler(srv: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, payload: object, content_type: str = "application/json") -> None:
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            srv.requests.append(("GET", self.path))
            if self.path == "/health":
                self._send(200, {})
            elif self.path == "/metrics" and srv.metrics:
                self._send(200, srv.prometheus(), "text/plain; version=0.0.4")
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            elif self.path == "/version" and srv.engine == "vllm":
                self._send(200, {"version": "0.32.0-fake"})
            elif self.path == "/props" and srv.engine == "llama.cpp":
                self._send(200, {"build_info": "b11434-fake"})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            srv.requests.append(("POST", self.path))
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            want = "/v1/completions" if srv.engine == "vllm" else "/completion"
            if self.path != want:
                return self._send(404, {"error": "not found"})
            if srv.fail == "not-json":
                return self._send(200, "<html><body>502 Bad Gateway</body></html>", "text/html")
            if srv.fail == "slow":
                time.sleep(srv.slow_s)
            prompt = body["prompt"]
            if any(t >= VOCAB for t in prompt):
                bad = next(t for t in prompt if t >= VOCAB)
                msg = f"Token id {bad} is out of vocabulary"
                return self._send(400, {"error": {"message": msg, "type": "BadRequestError", "code": 400}}
                                  if srv.engine == "vllm" else {"error": {"code": 400, "message": msg}})
            if srv.engine == "vllm":
                if "model" in body and body["model"] != MODEL:
                    return self._send(404, {"error": {"message": f"The model `{body['model']}` does not exist."}})
                out = srv.complete(prompt, body["max_tokens"], bool(body.get("logprobs")))
                lp = None
                if out["margins"] is not None:
                    lp = {"top_logprobs": [{f"t{t}": -0.1, "alt": -0.1 - m} for t, m in zip(out["tokens"],
                                                                                          out["margins"])]}
                return self._send(200, {"object": "text_completion", "model": MODEL, "choices": [
                    {"index": 0, "text": "", "token_ids": out["tokens"], "logprobs": lp, "finish_reason": "length"}]})
            out = srv.complete(prompt, body["n_predict"], bool(body.get("n_probs")))
            probs = None
            if out["margins"] is not None:
                probs = [{"id": t, "logprob": -0.1, "top_logprobs": [{"id": t, "logprob": -0.1},
                                                                    {"id": 0, "logprob": -0.1 - m}]}
                         for t, m in zip(out["tokens"], out["margins"])]
            self._send(200, {"content": "", "tokens": out["tokens"], "completion_probabilities": probs,
                             "timings": {"draft_n": out["draft_n"], "draft_n_accepted": out["draft_n_accepted"]}})

    return Handler
