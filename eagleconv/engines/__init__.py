"""Engine profiles: how each inference engine release reads an EAGLE-3/3.1 drafter.

Each engine is one module that registers :class:`~eagleconv.engines.base.EngineProfile`
objects with ``register``.  Users name a profile as ``vllm`` (the engine's
default release), ``llama.cpp`` / ``llama.cpp:b11434``, ``vllm:0.32`` / ``vllm 0.32`` (a given one) or ``all`` (the
default release of every serving engine; library consumers such as speculators
are named explicitly).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import ArgumentTypeError, UsageError
from .base import EngineProfile, EngineView, Subject, engine_view

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
    return profile


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


# Importing the engine modules registers their profiles (vllm first: it is the default engine).
from . import vllm, sglang, trtllm, tokenspeed, speculators, llamacpp  # noqa: E402,F401,I001

__all__ = ["DEFAULTS", "PROFILES", "EngineProfile", "EngineView", "Subject", "engine_view", "register",
           "resolve_engines"]
