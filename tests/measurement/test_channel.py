"""measure through the bounded HTTP channel (issue 36 items 1, 2, 8, 13-15; issue 35 item 2; issue 34's typed
errors), against tests/support/hostile_server.py on 127.0.0.1: real sockets, raw bytes."""

from __future__ import annotations

import base64
import json
import time

import pytest
from click.testing import CliRunner

from eagleconv.cli.main import cli
from eagleconv.io.http import MAX_CONCURRENCY, HTTPRefusedError, HTTPStatusError, HTTPTimeoutError
from eagleconv.measurement import MeasureError, measure
from tests.support.hostile_server import TOKENS, HostileServer, drip, endless, reply

PROMPTS = [[1, 17, 42], [1, 5, 5, 64]]


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(PROMPTS))
    return path


def run(url: str, prompts, *args: str):
    return CliRunner().invoke(cli, ["measure", url, "--prompts", str(prompts), "--engine", "llama.cpp",
                                    "--max-tokens", "8", *args])


def one_error_line(result, expect: str) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("eagleconv: error: ") and expect in lines[0], lines
    assert "Traceback" not in result.output and "internal error" not in result.output
    return lines[0]


@pytest.mark.parametrize("path", ["/completion", "/metrics", "/v1/models"])
def test_a_drip_ends_at_the_deadline_not_per_read(prompts, path):
    """Headers, then a byte every 0.2 s: every read returns in time, the request must still end at --timeout."""
    with HostileServer({path: drip(every=0.2, limit=30)}) as srv:
        start = time.monotonic()
        result = run(srv.url, prompts, "--timeout", "1")
        elapsed = time.monotonic() - start
    one_error_line(result, "no answer within 1 s")
    # the drip runs 30 s (a per-read timeout waits it out); slack for a loaded machine, not a speed claim
    assert elapsed < 12, elapsed


@pytest.mark.parametrize("path, behaviour, expect", [
    ("/metrics", endless(), "over the 16777216 bytes"),  # chunked, no size up front
    ("/completion", reply(200, b"[" + b"0," * 10, headers=(("Content-Length", str(10 ** 12)),)), "1000000000000 bytes"),
    ("/completion", reply(200, b"x", headers=(("Content-Encoding", "gzip"),)), "gzip-encoded"),
])
def test_bodies_are_capped_per_endpoint(prompts, path, behaviour, expect):
    with HostileServer({path: behaviour}) as srv:
        line = one_error_line(run(srv.url, prompts), expect)
    assert srv.url + path in line


@pytest.mark.parametrize("path, body, expect", [
    ("/completion", '{"tokens": [5, NaN], "timings": {}}', "non-standard JSON constant NaN"),
    ("/completion", '{"tokens": [5, 6], "timings": {"draft_n": Infinity}}', "non-standard JSON constant Infinity"),
    ("/completion", "[" * 100000 + "]" * 100000, "nested deeper than"),
    ("/v1/models", '{"data": ' + "[" * 5000 + "]" * 5000 + "}", "nested deeper than"),
    ("/v1/models", '{"data": 5}', "not an object whose data lists models"),
    ("/v1/models", "null", "not an object whose data lists models"),
])
def test_json_goes_through_the_strict_reader(prompts, path, body, expect):
    with HostileServer({path: reply(200, body)}) as srv:
        line = one_error_line(run(srv.url, prompts), expect)
    assert srv.url + path in line


def test_a_deeply_nested_4xx_body_is_one_line(prompts):
    with HostileServer({"/completion": reply(400, "[" * 100000 + "]" * 100000)}) as srv:
        one_error_line(run(srv.url, prompts), "prompt 0 refused: HTTP 400")


def test_nan_counters_in_metrics_are_refused(prompts):
    text = ("# TYPE llamacpp:spec_decode_num_drafts_total counter\nllamacpp:spec_decode_num_drafts_total NaN\n")
    with HostileServer({"/metrics": reply(200, text, content_type="text/plain")}) as srv:
        one_error_line(run(srv.url, prompts), "llamacpp:spec_decode_num_drafts_total is nan, not a count")


@pytest.mark.parametrize("token", [425.9, "425", True, -1, 10 ** 30])
def test_token_ids_from_the_server_are_validated_not_coerced(prompts, token):
    body = {"tokens": [5, token], "timings": {"draft_n": 3, "draft_n_accepted": 2}}
    with HostileServer({"/completion": reply(200, body)}) as srv:
        one_error_line(run(srv.url, prompts), f"the server returned {json.dumps(token)} as a token id")


def test_negative_timings_are_refused(prompts):
    body = {"tokens": TOKENS, "timings": {"draft_n": -500, "draft_n_accepted": 2}}
    with HostileServer({"/completion": reply(200, body)}) as srv:
        one_error_line(run(srv.url, prompts), "timings.draft_n is -500, not a count")


@pytest.mark.parametrize("content, expect", [
    ([[1] * 1_048_581], "1048581 tokens, over eagleconv's limit"),
    ([[1, 2 ** 64 + 1]], "token id 18446744073709551617 is beyond"),
])
def test_prompts_obey_simulates_bounds(tmp_path, content, expect):
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(content))
    with HostileServer() as srv:
        one_error_line(run(srv.url, path), expect)
    assert not any(method == "POST" for method, _, _ in srv.seen)  # nothing was sent


def test_concurrency_has_a_documented_bound(prompts):
    with HostileServer() as srv:
        result = run(srv.url, prompts, "--concurrency", "100000")
        assert result.exit_code == 2 and f"1<=x<={MAX_CONCURRENCY}" in result.output, result.output
        result = run(srv.url, prompts, "--concurrency", str(MAX_CONCURRENCY), "--json")
    assert result.exit_code == 0, result.output
    assert "--concurrency C" in CliRunner().invoke(cli, ["measure", "--help"]).output


def test_a_redirect_is_refused_and_named(prompts):
    with HostileServer() as other:
        with HostileServer({"/completion": reply(307, b"", headers=(("Location", other.url + "/completion"),))}) \
                as srv:
            one_error_line(run(srv.url, prompts), "HTTP 307 redirects to " + other.url)
    assert other.seen == []  # not re-POSTed elsewhere


def test_credentials_are_sent_never_printed(prompts):
    with HostileServer() as srv:
        secret_url = srv.url.replace("http://", "http://user:s3cret@")
        result = run(secret_url, prompts, "--json")
        assert result.exit_code == 0, result.output
        assert "s3cret" not in result.output and json.loads(result.stdout)["url"] == srv.url
        assert srv.seen[0][2]["authorization"] == "Basic " + base64.b64encode(b"user:s3cret").decode()
        srv.behaviours["/completion"] = reply(500, {"error": "boom"})
        line = one_error_line(run(secret_url, prompts), "HTTP 500")
    assert "s3cret" not in line and "user" not in line


@pytest.mark.parametrize("metrics", [
    reply(501, {"error": {"code": 501, "message": "Start it with --metrics"}}),  # llama-server without --metrics
    reply(404, {"error": "not found"}),
    reply(200, "<html>a proxy's page</html>", content_type="text/html"),  # any answer that is not Prometheus text
])
def test_llama_server_without_metrics_falls_back_to_timings(prompts, metrics):
    with HostileServer({"/metrics": metrics}) as srv:
        result = run(srv.url, prompts, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["num_draft_tokens"] == 3 * len(PROMPTS) and report["num_accepted_tokens"] == 2 * len(PROMPTS)
    assert any(n.startswith("source: the replies' timings") and "/metrics" in n for n in report["notes"])


def test_errors_are_typed_with_their_status(tmp_path):
    with HostileServer({"/completion": reply(400, {"error": {"message": "Token id 9 is out of vocabulary"}})}) as srv:
        with pytest.raises(MeasureError) as info:
            measure(srv.url, PROMPTS, engine="llama.cpp", max_tokens=8)
        assert isinstance(info.value, HTTPStatusError) and info.value.status == 400
        srv.behaviours["/completion"] = drip(every=0.1, limit=5)
        with pytest.raises(TimeoutError) as timeout:
            measure(srv.url, PROMPTS, engine="llama.cpp", max_tokens=8, timeout=0.5)
        assert isinstance(timeout.value, HTTPTimeoutError)
        url = srv.url
    with pytest.raises(ConnectionRefusedError) as refused:
        measure(url, PROMPTS, engine="llama.cpp", max_tokens=8)
    assert isinstance(refused.value, HTTPRefusedError) and refused.value.status is None


def test_measure_never_tells_errors_apart_by_their_text():
    """Issue 34: the client tested "refused" in a message and run.py " HTTP 4"; types and statuses do it now."""
    import ast
    from pathlib import Path

    import eagleconv.io.http
    import eagleconv.measurement

    files = [*Path(eagleconv.measurement.__file__).parent.glob("*.py"), Path(eagleconv.io.http.__file__)]
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
                right = ast.unparse(node.comparators[0])
                if ".message" in right or "str(exc" in right or "text.lower()" in right:
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
