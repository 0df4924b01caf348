"""The registry of engine profiles and the names users give them.

A module of its own, so that each engine module registers its profiles without importing the package that
imports it (``engines/__init__`` imports every module in its directory to fill this registry).  The order
the modules are imported in says nothing: profiles are kept in their engines' ``rank`` order (vLLM first, the
default engine), then in the order each engine registered them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..errors import ArgumentTypeError, UsageError
from .base import EngineProfile

PROFILES: dict[str, EngineProfile] = {}
DEFAULTS: dict[str, str] = {}
NOT_IN_ALL: set[str] = set()  # engines ``all`` leaves out (a training library; llama.cpp, which has no fc_norm)


def register(profile: EngineProfile, *, default: bool = False, in_all: bool = True) -> EngineProfile:
    """Add a profile; the first one of an engine (or one marked default) is what ``--engine NAME`` picks."""
    if profile.label in PROFILES:
        raise ValueError(f"engine profile {profile.label!r} registered twice")
    PROFILES[profile.label] = profile
    if not in_all:
        NOT_IN_ALL.add(profile.engine)
    if default or profile.engine not in DEFAULTS:
        DEFAULTS[profile.engine] = profile.label
    _by_rank(PROFILES, lambda label: PROFILES[label].rank)
    _by_rank(DEFAULTS, lambda engine: PROFILES[DEFAULTS[engine]].rank)
    return profile


def _by_rank(table: dict[str, Any], rank: Callable[[str], int]) -> None:
    """Reorder ``table`` in place (others hold it by name) by rank, keeping the registration order within one."""
    ordered = sorted(table.items(), key=lambda item: rank(item[0]))  # stable
    table.clear()
    table.update(ordered)


def resolve_engines(names: Iterable[str] | str) -> list[EngineProfile]:
    """Profiles for user-given names: 'vllm', 'vllm:0.32', 'vllm 0.32', 'vllm==0.32' or 'all'."""
    if isinstance(names, str):
        names = [names]
    listed = list(names) if isinstance(names, Iterable) else None
    if listed is None or not all(isinstance(n, str) for n in listed):
        raise ArgumentTypeError(f"engines must be an engine name or a list of names (e.g. ['vllm', 'sglang']), "
                                f"not {names!r:.80}")
    names = listed
    out: list[EngineProfile] = []
    for raw in names:
        name = raw.strip().lower().replace("==", " ").replace(":", " ").replace("@", " ")
        if name == "all":
            picked = [PROFILES[label] for engine, label in DEFAULTS.items() if engine not in NOT_IN_ALL]
        elif name in DEFAULTS:
            picked = [PROFILES[DEFAULTS[name]]]
        elif " ".join(name.split()) in PROFILES:
            picked = [PROFILES[" ".join(name.split())]]
        else:
            raise UsageError(f"unknown engine {raw!r}; choose one of: all, {', '.join(DEFAULTS)}, "
                             f"{', '.join(label.replace(' ', ':') for label in PROFILES)}")
        out += [p for p in picked if p not in out]
    return out
