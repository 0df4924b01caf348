"""The loopback Hub (tests/support/fake_hub.py) as a fixture, and the CLI helpers the Hub tests share."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from eagleconv.cli.main import cli
from eagleconv.hub import PushReport
from tests.support.fake_hub import TOKEN, FakeHub


def run(*args: str):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result


@pytest.fixture
def hub(monkeypatch, tmp_path_factory):
    """The loopback Hub, with huggingface_hub online (it read HF_HUB_OFFLINE=1 at import) and a token for it.

    Temporary files (push's staging and a dry run's kept copy) go to a test directory, not /tmp.
    """
    import tempfile

    from huggingface_hub import constants

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("tmp")))
    server = FakeHub().start()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    yield server
    server.stop()


def push_json(*args: str) -> tuple[int, PushReport]:
    result = run("push", *args, "--json")
    return result.exit_code, PushReport.model_validate_json(result.stdout)


def good(drafter) -> Path:
    """A clean speculators 3.1 drafter that names a Hub verifier (no warnings for vllm)."""
    return drafter(producer="speculators", eagle31=True)
