"""The fast subset, ``pytest -m "not slow"`` (issue 35 item 3): what it leaves out exists, the core paths stay in,
and the README and docs/testing.md name it."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SLOW_PATHS

REPO = Path(__file__).resolve().parents[1]
CORE = ("tests/io/", "tests/formats/", "tests/conversion/", "tests/validation/", "tests/engines/", "tests/cli/",
        "tests/hub/", "tests/test_import_graph.py")


def test_every_slow_path_is_a_test_file_or_folder():
    for entry in SLOW_PATHS:
        path = REPO / entry.split("::")[0]
        assert path.exists(), entry
        if "::" in entry:
            assert f"def {entry.split('::')[1]}(" in path.read_text(), entry


def test_the_core_paths_stay_in_the_fast_subset():
    for core in CORE:
        assert not any(slow.startswith(core) and slow.endswith("/") for slow in SLOW_PATHS), core
        kept = [p for p in (REPO / core).glob("test_*.py")] if core.endswith("/") else [REPO / core]
        assert any(not any(f"{p.relative_to(REPO).as_posix()}".startswith(s) for s in SLOW_PATHS) for p in kept), core


def test_the_docs_name_the_fast_subset():
    command = 'python -m pytest -q -m "not slow"'
    assert command in (REPO / "README.md").read_text() and command in (REPO / "docs" / "testing.md").read_text()
