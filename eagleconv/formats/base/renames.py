"""Tensor names: a layout's first-match rename table, and a checkpoint's names mapped onto canonical ones.

Split from ``formats/base.py`` (issue 26): the rename rules are data a layout declares, and
:func:`map_names` is the strict accounting every read goes through (an unmapped, misspelled or
doubly-mapped name is an error, DDP's ``module.`` prefix gets a hint), so both live apart from the
config reading.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from ...spec.canonical import CANONICAL_NAME

_PLACEHOLDER = re.compile(r"\{(n|rest)\}")


@functools.cache
def _compile(pattern: str) -> re.Pattern[str]:
    parts, last = [], 0
    for m in _PLACEHOLDER.finditer(pattern):
        parts.append(re.escape(pattern[last:m.start()]))
        parts.append(r"(?P<n>\d+)" if m.group(1) == "n" else r"(?P<rest>.+)")
        last = m.end()
    parts.append(re.escape(pattern[last:]))
    return re.compile("^" + "".join(parts) + "$")


@dataclass(frozen=True)
class Rename:
    """``layout`` name pattern <-> ``canonical`` name pattern.  ``{n}``: an integer, ``{rest}``: the remainder."""

    layout: str
    canonical: str

    def apply(self, name: str, to_canonical: bool) -> str | None:
        pattern, template = (self.layout, self.canonical) if to_canonical else (self.canonical, self.layout)
        m = _compile(pattern).match(name)
        if m is None:
            return None
        return _PLACEHOLDER.sub(lambda p: m.group(p.group(1)), template)


def rename(table: tuple[Rename, ...], name: str, to_canonical: bool) -> str | None:
    """First matching rule wins; None when no rule matches."""
    for rule in table:
        out = rule.apply(name, to_canonical)
        if out is not None:
            return out
    return None


DDP_HINT = ("every tensor name starts with 'module.', the prefix DistributedDataParallel adds: save "
            "model.module.state_dict() (or strip the prefix) and convert that")


def ddp_prefixed(names: Iterable[str]) -> bool:
    """All names carry DDP's ``module.`` wrapper prefix (a common way to save a drafter that loads nowhere)."""
    names = list(names)
    return bool(names) and all(n.startswith("module.") for n in names)


class Named(Protocol):
    """What the accounting reads of a layout (a ``formats.base.Layout`` class): its tables, not the class, so
    this module stays a leaf the layout class imports its ``Rename`` from."""

    name: str
    renames: tuple[Rename, ...]
    loader_aliases: tuple[tuple[str, str], ...]
    spellings: tuple[Rename, ...]


def loader_alias(layout: Named, name: str) -> str:
    """``name`` after the layout loader's substring renames (the first that applies, at its first occurrence)."""
    for old, new in layout.loader_aliases:
        if old in name:
            return name.replace(old, new, 1)
    return name


def map_names(layout: Named, names: list[str]) -> tuple[dict[str, str], list[str]]:
    """Layout names -> canonical names, with strict accounting.  Returns (canonical->layout, errors)."""
    out: dict[str, str] = {}
    errors: list[str] = [DDP_HINT] if ddp_prefixed(names) else []
    for name in sorted(names):
        canonical = rename(layout.renames, name, to_canonical=True)
        spelled = name  # the name as the layout's rules read it: after its loader's substring renames
        if canonical is None or not CANONICAL_NAME.match(canonical):
            spelled = loader_alias(layout, name)
            canonical = rename(layout.renames, spelled, to_canonical=True) if spelled != name else None
        if canonical is None or not CANONICAL_NAME.match(canonical):
            respelled = rename(layout.spellings, name, to_canonical=True)
            if respelled is not None and CANONICAL_NAME.match(respelled):
                canonical, spelled = respelled, rename(layout.renames, respelled, to_canonical=False) or name
        if canonical is None or not CANONICAL_NAME.match(canonical):
            errors.append(f"unmapped tensor {name!r}: no {layout.name} rule maps it to a known drafter tensor")
            continue
        if rename(layout.renames, canonical, to_canonical=False) != spelled:
            errors.append(f"tensor {name!r} is not a {layout.name} name "
                          f"(its canonical name {canonical!r} is spelled differently there)")
            continue
        if canonical in out:
            errors.append(f"tensors {out[canonical]!r} and {name!r} both map to {canonical!r}")
            continue
        out[canonical] = name
    return out, errors
