"""The committed example drafters are what the seeded generator produces, and each is detected correctly."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

from eagleconv import inspect
from eagleconv.io.reader import open_checkpoint

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
spec = importlib.util.spec_from_file_location("fixture_generator", FIXTURES / "generate.py")
generator = importlib.util.module_from_spec(spec)
spec.loader.exec_module(generator)


def digests(path: Path) -> dict[str, str]:
    with open_checkpoint(path, allow_pickle=True) as store:
        return {n: hashlib.sha256(store.read_raw(n).tobytes()).hexdigest() for n in store.tensors}


@pytest.mark.parametrize("name", sorted(generator.examples()))
def test_committed_fixture_matches_generator(tmp_path, name):
    generator.main(tmp_path)
    committed = FIXTURES / name
    assert (committed / "config.json").read_text() == (tmp_path / name / "config.json").read_text()
    assert digests(committed) == digests(tmp_path / name)


@pytest.mark.parametrize("name", sorted(generator.examples()))
def test_committed_fixture_is_detected_as_its_producer(name):
    recipe = generator.examples()[name]
    report = inspect(FIXTURES / name, allow_pickle=True)
    assert report.format == recipe.producer
    assert report.architecture == recipe.architecture
    assert report.eagle_version == ("3.1" if recipe.eagle31 else "3")


def test_every_committed_drafter_fixture_is_an_architecture_example():
    """fixtures/generate.py lists nothing itself: the examples are the registered architectures' (plus tiny-pair)."""
    committed = {p.name for p in FIXTURES.iterdir() if p.is_dir() and (p / "config.json").exists()}
    assert committed == set(generator.examples())
