"""``validate`` / ``inspect`` / ``lint`` on ``hf://`` read config, index and safetensors headers by range requests
from the loopback Hub (tests/support/fake_hub.py), and report what ``validate --no-numeric`` reports on the files."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

import eagleconv.hubread.ranges as ranges
from eagleconv import inspect, lint, validate
from eagleconv.errors import EagleconvError
from eagleconv.hub import HubError
from tests.support.fake_hub import Sparse
from tests.support.hub import hub, run  # noqa: F401 - the loopback Hub fixture
from tests.support.hub_repos import (
    big_drafter,
    directory_files,
    fixture_checkpoints,
    header_bytes,
    publish,
    write_sparse,
)

ENGINES = ["vllm", "sglang", "llama.cpp"]
SPECULATORS = fixture_checkpoints()["fixtures/speculators-llama-eagle31"]
SHARDED_INDEX = "model.safetensors.index.json"


def outcome(call, *args, shown: str, **kwargs) -> dict:
    """A report as JSON with ``shown`` (where it was read from) replaced by PATH, or the exception it raised."""
    try:
        report = call(*args, **kwargs)
    except EagleconvError as exc:
        kind = next(c.__name__ for c in type(exc).__mro__ if c.__module__ == "eagleconv.errors")
        return {"raised": kind, "code": exc.code, "exit": exc.exit_code,
                "message": exc.message.replace(shown, "PATH")}
    return json.loads(report.model_dump_json(exclude={"path", "hub"}).replace(shown, "PATH"))


def same_as_local(fake, repo_id: str, directory: Path) -> dict:
    """validate hf:// against validate --no-numeric of the files; both outcomes equal, the remote one returned."""
    remote = outcome(validate, f"hf://{repo_id}", engines=ENGINES, shown=f"hf://{repo_id}@{_commit(fake, repo_id)}")
    local = outcome(validate, directory, engines=ENGINES, numeric=False, shown=str(directory))
    if "raised" in local:  # the refusal is the same kind; the remote message may add --download
        assert (remote["raised"], remote["code"], remote["exit"]) == (local["raised"], local["code"], local["exit"])
    else:
        assert remote == local
    return remote


def _commit(fake, repo_id: str) -> str:
    return fake.repos[repo_id].refs["main"]


@pytest.fixture
def loopback(hub, monkeypatch):
    """The loopback Hub, with 5xx retries at once and Retry-After 0 (a test that waits sets its own)."""
    monkeypatch.setattr(ranges, "BACKOFF", 0.0)
    hub.retry_after = 0
    return hub


# -- the same report as the files give ---------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(fixture_checkpoints()))
def test_every_fixture_reads_the_same_from_its_headers(loopback, name):
    directory = fixture_checkpoints()[name]
    publish(loopback, name, directory)
    remote = same_as_local(loopback, name, directory)
    weights = sum(len(b) for n, b in directory_files(directory).items() if n.endswith(".safetensors"))
    if "raised" not in remote:
        report = validate(f"hf://{name}", engines=ENGINES)
        assert report.hub is not None and report.hub.commit == _commit(loopback, name) and report.hub.header_only
        assert not report.numeric_scan and report.path == f"hf://{name}@{report.hub.commit}"
        assert report.hub.bytes_transferred < 70_000 or report.hub.bytes_transferred < weights / 4


def test_inspect_and_lint_read_the_same_from_the_hub(loopback):
    publish(loopback, "org/spec-eagle3", SPECULATORS)
    commit = _commit(loopback, "org/spec-eagle3")
    remote = inspect(f"hf://org/spec-eagle3@{commit}")
    local = inspect(SPECULATORS)
    assert remote.hub is not None and remote.hub.commit == commit and remote.hub.revision == commit
    assert remote.model_dump(exclude={"path", "hub"}) == local.model_dump(exclude={"path", "hub"})
    before = len(loopback.requests)
    linted = lint("hf://org/spec-eagle3", engines=ENGINES)
    assert linted.hub is not None and linted.path == f"hf://org/spec-eagle3@{commit}/config.json"
    assert [f.model_dump() for f in linted.findings] == [
        f.model_dump() for f in lint(SPECULATORS / "config.json", engines=ENGINES).findings]
    assert [p for _, p in loopback.requests[before:] if "/resolve/" in p] == [
        f"/org/spec-eagle3/resolve/{commit}/config.json"]  # lint reads config.json alone


def _hostile(directory: Path) -> dict[str, dict[str, bytes]]:
    files = directory_files(directory)
    weights = files["model.safetensors"]
    (n,) = struct.unpack("<Q", weights[:8])
    header, data = json.loads(weights[8:8 + n]), weights[8 + n:]
    first = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0] if kv[0] != "__metadata__" else -1)
    name = next(k for k, _ in first if k != "__metadata__")
    past_end = dict(header, **{name: {**header[name], "data_offsets": [0, header[name]["data_offsets"][1] + 8]}})
    sharded = header_bytes(header) + data
    variants = {
        "huge-length": struct.pack("<Q", 2**40) + weights[8:],
        "length-past-end": struct.pack("<Q", len(weights)) + weights[8:],
        "bad-json": struct.pack("<Q", n) + b"}" + weights[9:8 + n] + data,
        "offsets-past-end": header_bytes(past_end) + data,
        "truncated-data": weights[:-5],
        "zip": b"PK\x03\x04" + weights[4:],
        "too-short": b"\x01\x02",
    }
    out = {k: {**files, "model.safetensors": v} for k, v in variants.items()}
    out["duplicate-config-key"] = {**files, "config.json": files["config.json"][:-2] + b', "fc_norm": true}'}
    out["index-names-a-missing-tensor"] = {"config.json": files["config.json"], "model-00001-of-00001.safetensors":
                                           sharded, SHARDED_INDEX: json.dumps({"weight_map": {
                                               **{k: "model-00001-of-00001.safetensors" for k in header
                                                  if k != "__metadata__"}, "ghost": "model-00001-of-00001.safetensors"}
                                           }).encode()}
    out["index-escapes"] = {**out["index-names-a-missing-tensor"], SHARDED_INDEX: json.dumps(
        {"weight_map": {name: "../model.safetensors"}}).encode()}
    return out


@pytest.mark.parametrize("variant", sorted(_hostile(SPECULATORS)))
def test_hostile_repositories_are_refused_as_their_files_are(loopback, variant, tmp_path):
    files = _hostile(SPECULATORS)[variant]
    directory = tmp_path / variant
    directory.mkdir()
    for name, data in files.items():
        (directory / name).write_bytes(data)
    repo = f"hostile/{variant}"
    loopback.add(repo, dict(files))
    remote = same_as_local(loopback, repo, directory)
    assert remote.get("raised") or any(f["code"] == "EC001" for f in remote["findings"]), remote
    assert sum(1 for _, p in loopback.requests if "/resolve/" in p) <= 4  # a huge length costs nothing more


def test_a_5_gb_drafter_is_judged_from_less_than_a_megabyte(loopback, tmp_path):
    files = big_drafter()
    assert files["model.safetensors"].size > 5 * 10**9
    loopback.add("big/drafter", files)
    report = validate("hf://big/drafter", engines=ENGINES)
    assert report.hub is not None and report.hub.bytes_transferred <= 1_000_000
    assert report.hub.requests <= 6
    local = validate(write_sparse(files, tmp_path / "big"), engines=ENGINES, numeric=False)
    assert report.model_dump(exclude={"path", "hub"}) == local.model_dump(exclude={"path", "hub"})


def test_the_commit_pins_every_read_when_a_push_lands_between_them(loopback):
    publish(loopback, "org/moving", SPECULATORS)
    first = _commit(loopback, "org/moving")
    broken = {**directory_files(SPECULATORS), "config.json": b'{"not": "a drafter"}'}
    loopback.on_info = lambda repo_id: loopback.add(repo_id, broken)  # the push lands right after the info answer
    report = validate("hf://org/moving", engines=ENGINES)
    loopback.on_info = None
    assert report.hub is not None and report.hub.commit == first != _commit(loopback, "org/moving")
    assert report.format == "speculators"
    assert all(first in p for _, p in loopback.requests if "/resolve/" in p)


# -- what needs the data, and failures --------------------------------------------------------------

def test_what_needs_the_data_says_download(loopback):
    publish(loopback, "org/spec-eagle3", SPECULATORS)
    before = len(loopback.requests)
    result = run("validate", "hf://org/spec-eagle3", "--forward")
    assert result.exit_code == 2 and "--download" in result.output and "Traceback" not in result.output
    assert len(loopback.requests) == before  # refused before any request
    text = run("validate", "hf://org/spec-eagle3").output
    assert "headers only" in text and "--download" in text
    loopback.add("org/pickled", directory_files(fixture_checkpoints()["fixtures/eagle-llama-eagle3"]))
    result = run("validate", "hf://org/pickled")
    assert result.exit_code == 2 and "--download --allow-pickle" in result.output


def test_a_429_is_honoured_then_the_read_goes_on(loopback, monkeypatch):
    publish(loopback, "org/busy", SPECULATORS)
    loopback.throttle["org/busy"] = 2
    loopback.retry_after = 7
    waits: list[float] = []
    monkeypatch.setattr(ranges, "_sleep", waits.append)
    report = validate("hf://org/busy")
    assert report.format == "speculators" and waits == [7.0, 7.0]
    loopback.throttle["org/busy"], loopback.retry_after = 10, 3600  # never lets up, and asks for an hour
    with pytest.raises(HubError, match="429"):
        validate("hf://org/busy")
    assert waits[2:] == [ranges.MAX_RETRY_AFTER] * ranges.RETRIES


@pytest.mark.parametrize("switch, message", [("broken", "500"), ("truncate", "truncated")])
def test_a_failing_hub_is_one_line_naming_it(loopback, switch, message):
    publish(loopback, "org/bad", SPECULATORS)
    if switch == "broken":
        loopback.broken.add("org/bad")
    else:
        loopback.truncate.add("org/bad")
    with pytest.raises(HubError, match=message):
        validate("hf://org/bad")
    result = run("validate", "hf://org/bad")
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_a_slow_hub_times_out(loopback, monkeypatch):
    publish(loopback, "org/slow", SPECULATORS)
    loopback.slow["org/slow"] = 1.0
    monkeypatch.setenv("EAGLECONV_HUB_TIMEOUT", "0.2")
    with pytest.raises(HubError, match="no answer within 0.2 s"):
        validate("hf://org/slow")


def test_the_fake_hub_serves_sparse_ranges(loopback):
    sparse = Sparse(b"abc", 10)
    assert sparse.slice(1, 5) == b"bc\0\0" and len(sparse) == 10


def test_a_dripping_hub_ends_at_the_requests_deadline():
    """Issue 36 on the header reader: each byte comes well inside the per-read timeout, so only a deadline per
    request (``--timeout`` after it started, plus a second per MIN_RATE bytes) ends the read; the drip runs 60 s."""
    import time

    from eagleconv.hubread.ranges import RangeReader
    from tests.support.hostile_server import HostileServer, drip

    with HostileServer({"GET /org/d/resolve/main/config.json": drip(every=0.05, limit=60, prefix=b"{")}) as srv:
        reader = RangeReader(srv.url, token=False, timeout=1.0)
        start = time.monotonic()
        with pytest.raises(HubError, match="no answer within 1 s"):
            reader.read_small(f"{srv.url}/org/d/resolve/main/config.json")
        assert time.monotonic() - start < 1 + 20, time.monotonic() - start  # the drip runs 60 s; load slack
