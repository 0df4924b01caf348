"""Where the CI tiers cache what the real-engine tests need: the llama.cpp build and the SmolLM2 pair.

One place for the lookup, so every test that needs either skips (or runs) by the same rule.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@functools.cache
def llamacpp_build() -> Path | None:
    """The cached llama.cpp b11434 build (holds bin/ and src/), or None: ``.ci/llamacpp-env --cached`` builds
    nothing and names the directory only when a finished build is there."""
    found = subprocess.run(["bash", str(REPO / ".ci" / "llamacpp-env"), "--cached"], capture_output=True, text=True)
    out = found.stdout.strip()
    return Path(out) if found.returncode == 0 and out else None


def smollm2_pair() -> Path | None:
    """The built SmolLM2 pair (``.ci/smollm2``, fixtures/smollm2/build.py): ``EAGLECONV_SMOLLM2_PAIR`` if set, else
    the newest finished one in the cache (``$XDG_CACHE_HOME`` or ~/.cache), or None."""
    env = os.environ.get("EAGLECONV_SMOLLM2_PAIR")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    candidates = [Path(env)] if env else sorted((cache / "eagleconv-ci" / "eagleconv").glob("smollm2-*"), reverse=True)
    return next((p for p in candidates if (p / "READY").exists()), None)
