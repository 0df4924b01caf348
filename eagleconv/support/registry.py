"""What the layout and architecture registries share: one module per entry, a unique name each.

Kept free of heavy imports: the CLI lists layout names from here without
importing the layouts, so ``--help`` stays fast.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Iterable
from importlib import import_module
from typing import ClassVar, Protocol, TypeVar


class _Named(Protocol):
    name: ClassVar[str]


T = TypeVar("T", bound=type[_Named])


def entry_modules(locations: Iterable[str]) -> tuple[str, ...]:
    """The registry's entry modules in a package directory, sorted: every module but ``base``."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(list(locations)) if m.name != "base"))


def import_entries(package: str, locations: Iterable[str]) -> None:
    """Import every entry module of ``package``; each registers itself with its ``@register``."""
    for name in entry_modules(locations):
        import_module(f"{package}.{name}")


def registrar(table: dict[str, T], kind: str) -> Callable[[T], T]:
    """A class decorator adding a class to ``table`` under its ``name`` (names must be unique)."""
    def register(cls: T) -> T:
        if cls.name in table:
            raise ValueError(f"{kind} {cls.name!r} registered twice")
        table[cls.name] = cls
        return cls
    return register
