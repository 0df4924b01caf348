"""The fast subset, ``pytest -m "not slow"`` (issue 35 item 5): what it leaves out exists and says why, the core
paths stay in (a forward and a simulate through FAST_KEEP), and the README and docs/testing.md name it and what it
leaves out."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import FAST_KEEP, SLOW_PATHS

REPO = Path(__file__).resolve().parents[1]
CORE = ("tests/io/", "tests/formats/", "tests/conversion/", "tests/validation/", "tests/engines/", "tests/cli/",
        "tests/hub/", "tests/test_import_graph.py")


def _names_a_test(entry: str) -> bool:
    """``path`` exists; ``path::name`` (a prefix of a test's name) names a test function in it."""
    path = REPO / entry.split("::")[0]
    if not path.exists():
        return False
    return "::" not in entry or re.search(rf"^def {re.escape(entry.split('::')[1])}\w*\(", path.read_text(), re.M) is not None


def test_every_entry_names_a_test_and_says_why():
    for table in (SLOW_PATHS, FAST_KEEP):
        for entry, reason in table.items():
            assert _names_a_test(entry), entry
            assert reason.strip(), entry


def test_what_fast_keep_keeps_is_inside_a_slow_path():
    for entry in FAST_KEEP:
        assert any(entry.startswith(slow) for slow in SLOW_PATHS), entry


def test_the_core_paths_stay_in_the_fast_subset():
    for core in CORE:
        assert not any(slow.startswith(core) and slow.endswith("/") for slow in SLOW_PATHS), core
        kept = [p for p in (REPO / core).glob("test_*.py")] if core.endswith("/") else [REPO / core]
        assert any(not any(f"{p.relative_to(REPO).as_posix()}".startswith(s) for s in SLOW_PATHS) for p in kept), core
    # the forward on a tiny drafter and simulate on the tiny pair: one test each, from the folders left out
    assert {k.split("/")[1] for k in FAST_KEEP} >= {"forward", "simulation"}


def test_the_docs_name_the_fast_subset_and_what_it_leaves_out():
    command = 'python -m pytest -q -m "not slow"'
    testing = (REPO / "docs" / "testing.md").read_text()
    assert command in (REPO / "README.md").read_text() and command in testing
    for entry in (*SLOW_PATHS, *FAST_KEEP):
        name = entry.split("::")[0].removeprefix("tests/").removesuffix("/").removesuffix(".py")
        assert name in testing, name
