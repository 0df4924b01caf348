"""Opt-in loading of torch pickles (.bin/.pt), only ever with ``weights_only=True``.

A pickle can run arbitrary code when loaded.  eagleconv refuses them unless the
user passes ``--allow-pickle``, and then uses torch's allow-list unpickler
explicitly, never a fallback.  torch >= 2.10 is required (CVE-2025-32434 and
CVE-2026-24747 broke ``weights_only`` in older releases).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UnsafeInputError

MIN_TORCH = (2, 10)


def load_pickle_state_dict(path: Path) -> dict[str, Any]:
    import torch

    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if version < MIN_TORCH:
        raise UnsafeInputError(
            f"refusing to unpickle with torch {torch.__version__}: weights_only is unsafe before 2.10", path
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for hostile or corrupt pickles
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsafeInputError(f"torch.load(weights_only=True) refused the pickle: {first_line}", path) from exc
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise UnsafeInputError("pickle does not hold a flat {name: tensor} state dict", path)
    return state
