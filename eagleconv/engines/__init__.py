"""Engine profiles: how each inference engine release reads an EAGLE-3/3.1 drafter.

Each engine is one module in this directory that registers
:class:`~eagleconv.engines.base.EngineProfile` objects with ``register``; modules are discovered from the
directory, so nothing else lists them.  Users name a profile as ``vllm`` (the engine's default release),
``llama.cpp`` / ``llama.cpp:b11434``, ``vllm:0.32`` / ``vllm 0.32`` (a given one) or ``all`` (the default
release of every serving engine; library consumers such as speculators are named explicitly).

A new engine touches exactly these files (tests/engines/test_plugin_engine.py registers one from a test alone
and keeps this list true):

* ``eagleconv/engines/<engine>.py``: the profile, as data plus named checks; ``rank`` places it in listings,
  ``register(..., in_all=False)`` keeps it out of ``all``;
* ``decode_loop`` names how simulate decodes for it: an existing loop (``vllm``, ``llamacpp``) or, if it
  decodes differently, the loop module it adds beside them, ``eagleconv/simulation/<loop>.py``;
* ``server`` names the protocol its servers speak, if measure can read them: an existing one (``vllm``,
  ``llama.cpp``) or the ``ServerProfile`` it adds to ``eagleconv/measurement/servers.py``.

Nothing else lists engines: validate's and simulate's ``--engine``, ``all``, the findings reference and
``measure --engine``'s choices are read from this registry.
"""

from __future__ import annotations

from ..support.registry import import_entries
from .base import EngineProfile, EngineView, Subject, engine_view
from .registry import DEFAULTS, NOT_IN_ALL, PROFILES, register, resolve_engines

import_entries(__name__, __path__)  # every engine module registers its profiles (listed in their ``rank`` order)

__all__ = ["DEFAULTS", "NOT_IN_ALL", "PROFILES", "EngineProfile", "EngineView", "Subject", "engine_view", "register",
           "resolve_engines"]
