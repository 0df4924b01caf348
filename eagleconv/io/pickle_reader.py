"""Opt-in loading of torch pickles (.bin/.pt), only ever with ``weights_only=True``.

A pickle can run arbitrary code when loaded.  eagleconv refuses them unless the
user passes ``--allow-pickle``, and then uses torch's allow-list unpickler
explicitly, never a fallback.  torch >= 2.10 is required (CVE-2025-32434 and
CVE-2026-24747 broke ``weights_only`` in older releases).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import UnsafeInputError

MIN_TORCH = (2, 10)

# Sentences of torch's refusal that advise lowering the guard (weights_only=False, allow-listing globals,
# the env override): eagleconv never passes them on, because the refusal is the point.
_ADVICE = re.compile(r"weights_only|safe_globals|TORCH_FORCE|trust|can still be loaded|two options|^\(\d\)|"
                     r"documentation|arbitrary code|Do it only|only do|https?://", re.I)


# The weight pickle without an index: transformers' WEIGHTS_NAME, what SafeAILab EAGLE's trainer writes (formats/eagle.py).
WEIGHT_PICKLE = "pytorch_model.bin"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth")


def weight_pickles(listing: list[str], indexed: list[str] | None) -> tuple[list[str], list[str]]:
    """(the pickles that hold the weights, the directory's other pickles, which are never read).

    The weights are the shards ``indexed`` by pytorch_model.bin.index.json when there is one, else
    pytorch_model.bin.  A trainer's folder also holds optimizer.pt, scheduler.pt, rng_state.pth and
    training_args.bin: pickles of other things, which are not weights and which nothing should unpickle.
    """
    pickles = [n for n in listing if n.endswith(PICKLE_SUFFIXES)]
    chosen = sorted(indexed) if indexed is not None else [n for n in pickles if n == WEIGHT_PICKLE]
    return chosen, [n for n in pickles if n not in chosen]


def refusal_reason(exc: BaseException) -> str:
    """What torch objected to (the global it met...), without its advice on how to load the file anyway."""
    sentences = [s.strip() for line in str(exc).splitlines() for s in re.split(r"(?<=[.!?])\s+", line) if s.strip()]
    kept = [s for s in sentences if not _ADVICE.search(s)]
    return " ".join(kept[:2]) if kept else type(exc).__name__


def load_pickle_state_dict(path: Path) -> dict[str, Any]:
    from ..support._extras import need

    need("torch", "--allow-pickle (loading a .bin/.pt pickle)", path)
    import torch

    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if version < MIN_TORCH:
        raise UnsafeInputError(
            f"refusing to unpickle with torch {torch.__version__}: weights_only is unsafe before 2.10", path
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for hostile or corrupt pickles
        raise UnsafeInputError(f"torch's weights-only unpickler refused the pickle: {refusal_reason(exc)}; eagleconv "
                               "never loads it another way (convert it to safetensors where it was trained)",
                               path) from exc
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise UnsafeInputError("pickle does not hold a flat {name: tensor} state dict", path)
    from .torch_tensors import check_state_dict

    check_state_dict(state, path)
    return state
