"""The public API is stated once (``eagleconv._EXPORTS``): ``__all__`` is derived from it, the TYPE_CHECKING
block spells the same imports for type checkers, docs/library.md lists the same names, and nothing private or
module-shaped leaks through it."""

from __future__ import annotations

import ast
import subprocess
import sys
import types
from pathlib import Path

import eagleconv

ROOT = Path(__file__).resolve().parents[1]


def _type_checking_names() -> dict[str, str]:
    """name -> module, from the ``if TYPE_CHECKING:`` block of eagleconv/__init__.py."""
    tree = ast.parse((ROOT / "eagleconv" / "__init__.py").read_text())
    block = next(node for node in tree.body
                 if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    names: dict[str, str] = {}
    for stmt in block.body:
        assert isinstance(stmt, ast.ImportFrom) and stmt.level == 1, ast.unparse(stmt)
        for alias in stmt.names:
            assert alias.asname is None, ast.unparse(stmt)
            names[alias.name] = f"eagleconv.{stmt.module}"
    return names


def test_all_is_the_exports_table():
    assert eagleconv.__all__ == ["__version__", *eagleconv._EXPORTS]
    assert len(set(eagleconv.__all__)) == len(eagleconv.__all__)


def test_every_public_name_imports_from_where_it_is_said_to_live():
    for name, module in eagleconv._EXPORTS.items():
        value = getattr(eagleconv, name)
        assert not isinstance(value, types.ModuleType), f"{name} is a module, not an API object"
        home = sys.modules[module]
        assert getattr(home, name) is value, f"{name}: not the object {module} defines"


def test_type_checking_block_matches_the_exports():
    assert _type_checking_names() == dict(eagleconv._EXPORTS)


def test_nothing_private_leaks():
    assert not [name for name in eagleconv.__all__ if name.startswith("_") and name != "__version__"]
    public = {name for name in vars(eagleconv) if not name.startswith("_")}
    # what a lazy import may have cached is in __all__; the rest of the namespace is the TYPE_CHECKING name and
    # subpackages the import system set on the package
    stray = {name for name in public - set(eagleconv.__all__)
             if name != "TYPE_CHECKING" and not isinstance(getattr(eagleconv, name), types.ModuleType)}
    assert not stray, stray


def test_star_import_gives_exactly_all():
    out = subprocess.run([sys.executable, "-c", "from eagleconv import *; import eagleconv; names = set(dir()); "
                          "print([n for n in eagleconv.__all__ if n not in names])"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_library_docs_list_the_api():
    text = (ROOT / "docs" / "library.md").read_text()
    missing = [name for name in eagleconv.__all__ if f"`{name}`" not in text]
    assert not missing, f"docs/library.md does not list {missing}"


def test_version_is_stated_once():
    from eagleconv._version import __version__

    assert eagleconv.__version__ is __version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "eagleconv._version.__version__" in pyproject
    assert "\nversion =" not in pyproject.split("[tool.")[0]
