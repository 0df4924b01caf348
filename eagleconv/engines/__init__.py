"""Engine profiles: how each inference engine release reads an EAGLE-3/3.1 drafter.

Each engine is one module that registers :class:`~eagleconv.engines.base.EngineProfile`
objects with ``register``.  Users name a profile as ``vllm`` (the engine's
default release), ``llama.cpp`` / ``llama.cpp:b11434``, ``vllm:0.32`` / ``vllm 0.32`` (a given one) or ``all`` (the
default release of every serving engine; library consumers such as speculators
are named explicitly).
"""

from __future__ import annotations

from .base import EngineProfile, EngineView, Subject, engine_view
from .registry import DEFAULTS, NOT_IN_ALL, PROFILES, register, resolve_engines

# Importing the engine modules registers their profiles (vllm first: it is the default engine).
from . import vllm, sglang, trtllm, tokenspeed, speculators, llamacpp  # noqa: F401

__all__ = ["DEFAULTS", "NOT_IN_ALL", "PROFILES", "EngineProfile", "EngineView", "Subject", "engine_view", "register",
           "resolve_engines"]
