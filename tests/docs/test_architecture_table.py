"""docs/architecture.md's table is drawn from the code: a row per folder, in the import test's layer order, and
every module of a folder named in its row (issue 34: the page had drifted, missing modules the code had)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_import_graph import LAYERS, PACKAGE

PAGE = PACKAGE.parent / "docs" / "architecture.md"


def rows(text: str) -> dict[str, str]:
    """Layer name (``io``, ``errors``, ``""`` for ``__init__.py``) -> the row's text, in the page's order."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"\| `eagleconv/([\w.]+)(/|\.py)` \|", line)
        if m:
            name, kind = m.groups()
            out["" if (name, kind) == ("__init__", ".py") else name] = line
    return out


def missing(text: str) -> list[str]:
    """Every module under a folder that its row does not name (as `name.py`, or `sub/name.py` in a subfolder)."""
    table = rows(text)
    out = []
    for layer, row in table.items():
        folder = PACKAGE / layer
        if not layer or not folder.is_dir():
            continue
        named = set(re.findall(r"`([^`]+)`", row))
        for path in sorted(folder.rglob("*.py")):
            relative = path.relative_to(folder)
            if relative == Path("__init__.py"):
                continue  # the folder's own row
            spelled = {str(relative), path.name} if relative.parent == Path(".") else {str(relative)}
            if path.name == "__init__.py":
                spelled |= {f"{relative.parent}/"}
            if not spelled & named:
                out.append(f"eagleconv/{layer}/{relative}")
    return out


def test_a_row_per_layer_in_the_layer_order():
    assert list(rows(PAGE.read_text())) == list(LAYERS), \
        "docs/architecture.md's table: one row per entry of tests/test_import_graph.py's LAYERS, bottom to top"


def test_every_module_is_in_the_table():
    assert not missing(PAGE.read_text()), "modules docs/architecture.md's table does not name"


def test_the_check_sees_a_missing_module():
    """Drop one module's name from its row: the check names that module."""
    text = PAGE.read_text().replace("`weights.py`", "weights")
    assert missing(text) == ["eagleconv/forward/weights.py"]
