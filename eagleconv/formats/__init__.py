"""The registry of checkpoint layouts, and format detection.

Each layout is one module with one :class:`~eagleconv.formats.base.Layout` subclass registered by ``@register``.
A new layout touches these files, and nothing else in the package needs to change (docs/architecture.md, "A new
layout", says the same; tests/docs/test_recipes.py holds both to the code):

- ``eagleconv/formats/<name>.py``: the layout, named as its module: renames, config fields, detection, ``holds``
  (each architecture it holds, the class it writes for it) and ``verdicts``.
- ``eagleconv/synthetic/<name>.py``: its producer's synthetic recipe (none for a layout that ``needs_target``).

What a layout holds is read when asked, from its ``holds`` and the architectures' ``layouts``
(:mod:`~eagleconv.formats.base.holding`), so layouts and architectures register in either order.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import AmbiguousLayoutError, FormatError, UsageError
from ..support.registry import import_entries, registrar
from .base import Layout, Seen
from .base.reading import ReadResult, read_drafter
from .base.renames import DDP_HINT, ddp_prefixed
from .base.writing import write_config

if TYPE_CHECKING:
    from ..support.jsonio import JSONValue

LAYOUTS: dict[str, type[Layout]] = {}


register = registrar(LAYOUTS, "layout")
"""Class decorator: add a layout to the registry (names must be unique).  What it holds is read when asked
(:mod:`~eagleconv.formats.base.holding`), so it may come before or after the architectures it holds."""


def get_layout(name: str) -> type[Layout]:
    try:
        return LAYOUTS[name]
    except KeyError:
        raise UsageError(f"unknown format {name!r}; choose one of: {', '.join(LAYOUTS)}") from None


def detect_layout(config: Mapping[str, JSONValue] | None, names: set[str] | None, metadata: Mapping[str, str] | None = None,
                  weights_kind: str = "safetensors", path: str | Path | None = None) -> tuple[type[Layout], list[str]]:
    """The best-matching layout for a config plus tensor names, with the reasons.

    Detection uses both: ``architectures`` alone lies too often (SafeAILab
    checkpoints say LlamaForCausalLM).
    """
    if config is None:
        raise FormatError("no config.json: cannot tell which drafter layout this is", path)
    seen = Seen(config, names, metadata or {}, weights_kind)
    scored = []
    for layout in LAYOUTS.values():
        score, reasons = layout.detect(seen)
        if score > 0:
            scored.append((score, layout.name, layout, reasons))
    if not scored:
        hint = f"; {DDP_HINT}" if names and ddp_prefixed(names) else ""
        raise FormatError(
            "not an EAGLE-3 drafter layout eagleconv knows (no fc.weight with midlayer.*/layers.N.* tensors, "
            "no speculators_model_type 'eagle3')" + hint, path, code="EC002")
    scored.sort(key=lambda s: (-s[0], s[1]))
    best = [s for s in scored if s[0] == scored[0][0]]
    if len(best) > 1:
        # The choice decides the aux-id numbering, so it is never made by registry order.
        tied = [s[1] for s in best]
        why = "; ".join(f"{s[1]}: {', '.join(s[3])}" for s in best)
        raise AmbiguousLayoutError(
            f"the layout is ambiguous: {' and '.join(tied)} fit equally ({why}); the choice decides the aux layer "
            f"numbering, so pass {' or '.join(f'--from {n}' for n in tied)}", path, candidates=tied)
    return scored[0][2], scored[0][3]


import_entries(__name__, __path__)

__all__ = ["LAYOUTS", "Layout", "ReadResult", "detect_layout", "get_layout", "read_drafter", "register", "write_config"]
