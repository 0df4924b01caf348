"""The recipes for a new layout and a new architecture (docs/architecture.md, and the docstrings of
eagleconv/formats/__init__.py and eagleconv/architectures/__init__.py) name the files the code needs (issue 34).

Each recipe is a list of path patterns (``<name>``: the layout's or architecture's name, ``<example>``: one of its
examples).  The page and the package docstring state the same list; every shipped layout and architecture is
exactly those files, each named as what it registers; and what a layout writes for each architecture lives in
the layout's files, so the architecture modules need no edit for a new layout.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from eagleconv import architectures, synthetic
from eagleconv.formats import LAYOUTS

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "architecture.md"


def page_recipe(text: str, heading: str) -> list[str]:
    """The path patterns of the bullets under ``## {heading}`` on the page."""
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^- `([^`]+)`:", section, flags=re.M)


def docstring_recipe(module: str) -> list[str]:
    doc = importlib.import_module(module).__doc__ or ""
    return re.findall(r"^- ``([^`]+)``:", doc, flags=re.M)


LAYOUT_RECIPE = page_recipe(PAGE.read_text(), "A new layout")
ARCHITECTURE_RECIPE = page_recipe(PAGE.read_text(), "A new architecture")


def test_the_page_and_the_docstrings_state_the_same_recipes():
    assert LAYOUT_RECIPE == docstring_recipe("eagleconv.formats") == \
        ["eagleconv/formats/<name>.py", "eagleconv/synthetic/<name>.py"]
    assert ARCHITECTURE_RECIPE == docstring_recipe("eagleconv.architectures") == \
        ["eagleconv/architectures/<name>.py", "fixtures/<example>/"]


def registered(path: str, kind: str) -> str:
    """The name a package file registers (eagleconv/formats/vllm.py -> 'vllm'), checked against its module."""
    module = path.removesuffix(".py").replace("/", ".")
    table = {"formats": LAYOUTS, "synthetic": synthetic.RECIPES, "architectures": architectures.ARCHITECTURES}[kind]
    names = [name for name, cls in table.items() if cls.__module__ == module]
    assert len(names) == 1, f"{path} registers {names}: one {kind} entry per module"
    return names[0]


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_each_layout_is_the_recipes_files(name):
    layout = LAYOUTS[name]
    for pattern in LAYOUT_RECIPE:
        path = pattern.replace("<name>", name)
        if pattern.startswith("eagleconv/synthetic/") and layout.needs_target:
            assert not (REPO / path).exists(), f"{name} needs a target: a serving layout has no producer recipe"
            continue
        assert (REPO / path).is_file(), f"{path}: the recipe names it"
        assert registered(path, pattern.split("/")[1]) == name


def test_every_layout_and_recipe_module_is_one_the_recipe_names():
    """No module of formats/ or synthetic/ (but base and the package) stands outside the recipe."""
    for folder in ("formats", "synthetic"):
        modules = {p.stem for p in (REPO / "eagleconv" / folder).glob("*.py")} - {"__init__", "base"}
        held = {n for n, layout in LAYOUTS.items() if folder == "formats" or not layout.needs_target}
        assert modules == held, folder


@pytest.mark.parametrize("name", architectures.names())
def test_each_architecture_is_the_recipes_files(name):
    arch = architectures.get(name)
    for pattern in ARCHITECTURE_RECIPE:
        if "<example>" in pattern:
            for example in arch.examples:
                assert (REPO / pattern.replace("<example>", example.name) / "config.json").is_file(), example.name
        else:
            assert registered(pattern.replace("<name>", name), "architectures") == name


@pytest.mark.parametrize("name", architectures.names())
def test_what_a_layout_writes_lives_in_the_layouts_files(name):
    """A shipped architecture states nothing keyed by a shipped layout: no ``layouts`` entry, no producer-keyed
    synthetic name or override; so a new layout needs no edit in any architecture module."""
    arch = architectures.get(name)
    assert not set(arch.layouts) & set(LAYOUTS), f"{name}: move these to the layouts' holds"
    assert set(arch.synthetic_architecture) <= {"*"} and not arch.synthetic_overrides, \
        f"{name}: move these to the producers' recipes (eagleconv/synthetic/<name>.py)"
