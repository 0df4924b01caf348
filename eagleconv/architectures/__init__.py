"""The registry of drafter architectures, and family detection.

Each architecture is one module with one
:class:`~eagleconv.architectures.base.Architecture` subclass registered by
``@register``; ``get(spec.architecture)`` returns it.  Modules are discovered from this directory, so nothing
else has to list one.  A new architecture touches these files (docs/architecture.md, "A new architecture", says
the same; tests/docs/test_recipes.py holds both to the code):

- ``eagleconv/architectures/<name>.py``: the family, named as its module; its ``layouts`` names the layouts written
  before it that hold it, and the class each writes.
- ``fixtures/<example>/``: each of its ``examples``, written by ``python fixtures/generate.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..support.registry import import_entries, registrar
from .base import Architecture, Expected

if TYPE_CHECKING:
    from ..support.jsonio import JSONValue

ARCHITECTURES: dict[str, type[Architecture]] = {}


register = registrar(ARCHITECTURES, "architecture")
"""Class decorator: add an architecture to the registry (names must be unique)."""


def get(name: str) -> type[Architecture]:
    """The architecture called ``name`` (``spec.architecture``); KeyError names the known ones."""
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise KeyError(f"unknown drafter architecture {name!r}; known: {', '.join(ARCHITECTURES)}") from None


def names() -> tuple[str, ...]:
    return tuple(ARCHITECTURES)


def detect(model_type: object, config_keys: set[str] | Mapping[str, JSONValue],
           tensor_names: set[str] = frozenset(),  # type: ignore[assignment]
           *, fallback: bool = True) -> type[Architecture] | None:
    """The family a checkpoint is, from its decoder model_type, config keys and canonical tensor names.

    ``fallback=False`` (config-only callers that must not guess) returns None
    for a model_type no architecture claims instead of the fallback family.
    """
    keys = set(config_keys)
    for arch in sorted(ARCHITECTURES.values(), key=lambda a: a.priority):
        if arch.claims(model_type, keys, set(tensor_names)):
            return arch
    for arch in ARCHITECTURES.values():
        if arch.fallback and (fallback or model_type is None):
            return arch
    return None


import_entries(__name__, __path__)

__all__ = ["ARCHITECTURES", "Architecture", "Expected", "detect", "get", "names", "register"]
