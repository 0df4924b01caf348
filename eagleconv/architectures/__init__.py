"""The registry of drafter architectures, and family detection.

Each architecture is one module with one
:class:`~eagleconv.architectures.base.Architecture` subclass registered by
``@register``; ``get(spec.architecture)`` returns it.  Adding a decoder family
is adding a module here (and a fixture); modules are discovered from this
directory, so nothing else has to list it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Architecture, Expected

ARCHITECTURES: dict[str, type[Architecture]] = {}


def register(cls: type[Architecture]) -> type[Architecture]:
    """Class decorator: add an architecture to the registry (names must be unique)."""
    if cls.name in ARCHITECTURES:
        raise ValueError(f"architecture {cls.name!r} registered twice")
    ARCHITECTURES[cls.name] = cls
    return cls


def get(name: str) -> type[Architecture]:
    """The architecture called ``name`` (``spec.architecture``); KeyError names the known ones."""
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise KeyError(f"unknown drafter architecture {name!r}; known: {', '.join(ARCHITECTURES)}") from None


def names() -> tuple[str, ...]:
    return tuple(ARCHITECTURES)


def detect(model_type: object, config_keys: set[str] | Mapping[str, Any], tensor_names: set[str] = frozenset(),  # type: ignore[assignment]
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


def _register_all() -> None:
    """Import every architecture module in this package; each registers itself with ``@register``."""
    import pkgutil
    from importlib import import_module

    for module in pkgutil.iter_modules(__path__):
        if module.name != "base":
            import_module(f"{__name__}.{module.name}")


_register_all()

__all__ = ["ARCHITECTURES", "Architecture", "Expected", "detect", "get", "names", "register"]
