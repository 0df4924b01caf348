"""``convert`` and ``simulate`` need the weights: an ``hf://`` source is refused in one line naming ``--download``
(exit 2, before any request to the loopback Hub, nothing written); with ``--download`` the snapshot is fetched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagleconv import convert
from eagleconv.errors import UsageError
from tests.support.hub import good, hub, run  # noqa: F401 - the loopback Hub fixture
from tests.support.hub_repos import publish

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "tiny-pair"


@pytest.mark.parametrize("command", [["convert", "hf://org/d", "OUT", "--to", "vllm"],
                                     ["simulate", "hf://org/d", "--target", str(PAIR / "target")]])
def test_hf_source_without_download_is_refused_before_any_request(hub, drafter, tmp_path, command):
    publish(hub, "org/d", good(drafter))
    out = tmp_path / "out"
    result = run(*[str(out) if a == "OUT" else a for a in command])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "hf://org/d" in lines[0] and f"{command[0]} needs the weights" in lines[0]
    assert "--download" in lines[0] and "Traceback" not in result.output
    assert hub.requests == [] and not out.exists()


def test_library_convert_downloads_unless_told_not_to(hub, drafter, tmp_path):
    src = good(drafter)
    publish(hub, "org/d", src)
    with pytest.raises(UsageError, match="--download"):
        convert("hf://org/d", tmp_path / "refused", "vllm", download=False)
    assert not (tmp_path / "refused").exists() and hub.requests == []
    report = convert("hf://org/d", tmp_path / "out", "vllm")  # a library caller who passes hf:// asks for it
    assert report.ok and (tmp_path / "out" / "config.json").exists()


def test_simulate_download_runs_the_snapshot(hub, tmp_path):
    pytest.importorskip("torch")
    publish(hub, "org/pair", PAIR / "eagle31")
    local = run("simulate", PAIR / "eagle31", "--target", PAIR / "target", "--max-tokens", "4", "--json")
    remote = run("simulate", "hf://org/pair", "--target", PAIR / "target", "--max-tokens", "4", "--json", "--download")
    assert local.exit_code == 0 and remote.exit_code == 0, remote.output
    assert hub.requests
    report = json.loads(remote.stdout[remote.stdout.index("{"):])
    assert report["tokens"] == json.loads(local.stdout[local.stdout.index("{"):])["tokens"]


def test_the_public_openers_download_hf_and_io_never_does(hub, drafter):
    """``eagleconv.open_checkpoint`` and ``load_drafter`` take ``hf://`` (the verified snapshot, downloaded a layer
    above io, issue 34); io.reader itself refuses it in one line, before any request, instead of reaching up."""
    import eagleconv
    from eagleconv.io import reader

    src = good(drafter)
    publish(hub, "org/d", src)
    with pytest.raises(UsageError, match="hf:// is downloaded by eagleconv.open_checkpoint"):
        reader.open_checkpoint("hf://org/d")
    assert hub.requests == []
    local = reader.open_checkpoint(src)
    store = eagleconv.open_checkpoint("hf://org/d")
    try:
        assert store.path != src and store.config == local.config and set(store.tensors) == set(local.tensors)
    finally:
        store.close()
        local.close()
    assert hub.requests
    loaded, expected = eagleconv.load_drafter("hf://org/d"), eagleconv.load_drafter(src)
    try:
        assert loaded.store.path == store.path and loaded.spec == expected.spec
    finally:
        loaded.close()
        expected.close()
