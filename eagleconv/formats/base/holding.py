"""Which architectures a layout holds, and the class name it writes for each: computed when asked, never copied.

Two tables say it, one on each side, so whichever comes second needs no edit in the first:

* a layout's ``holds`` (architecture name -> :class:`~eagleconv.architectures.base.InLayout`) covers the
  architectures that existed when the layout was written;
* an architecture's ``layouts`` (layout name -> ``InLayout``) covers the layouts that existed when it was written
  (a plugin family says how ``vllm`` writes it).

``Layout.architectures`` and ``Layout.model_types`` are properties of the layout class (:class:`Holding` is its
metaclass) read from both tables and the live architecture registry each time, so a layout registered before an
architecture, or after one, sees it.  A pair stated on both sides is an error the contract tests catch; the layout's
entry is read first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ... import architectures

if TYPE_CHECKING:
    from ...architectures.base import Architecture, InLayout


class Holding(type):
    """The metaclass of :class:`~eagleconv.formats.base.Layout`: what the layout holds, read from the tables."""

    name: str
    holds: Mapping[str, InLayout]

    def holding(cls, architecture: str) -> InLayout | None:
        """How this layout writes ``architecture`` (None: it cannot hold it, or no such architecture is registered)."""
        arch = architectures.ARCHITECTURES.get(architecture)
        if arch is None:
            return None
        held = cls.holds.get(architecture)
        return held if held is not None else arch.layouts.get(cls.name)

    def held(cls) -> list[tuple[type[Architecture], InLayout]]:
        """The registered architectures this layout holds, with how it writes each: the fallback family first, then
        by name, so listings and messages read the same whatever the import order."""
        pairs = [(a, cls.holding(a.name)) for a in architectures.ARCHITECTURES.values()]
        return sorted(((a, h) for a, h in pairs if h is not None), key=lambda p: (not p[0].fallback, p[0].name))

    @property
    def architectures(cls) -> dict[str, tuple[str, ...]]:
        """Architecture name -> the config ``architectures`` this layout writes for it."""
        return {a.name: h.classes for a, h in cls.held()}

    @property
    def model_types(cls) -> dict[str, str]:
        """The model_types this layout rewrites (source -> written), over every architecture it holds."""
        return {k: v for _, h in cls.held() for k, v in h.model_types.items()}
