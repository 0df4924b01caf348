"""The draft-to-target vocabulary mapping: checks and exact derivations.

Every trainer and engine stores ``d2t`` as *offsets*: ``target_id = i + d2t[i]``.
``t2d`` is the boolean membership mask over the target vocabulary.  One is
derivable from the other exactly when the mapping is valid, which is what
lets a conversion drop ``t2d`` (ModelOpt) and rebuild it later (SpecForge).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .io.dtypes import INT_DTYPES


@dataclass
class VocabCheck:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    target_ids: np.ndarray | None = None  # absolute target ids when d2t is a valid offset vector


def check_d2t(d2t: np.ndarray, d2t_dtype: str, vocab_size: int, draft_vocab_size: int) -> VocabCheck:
    """Check a raw d2t vector against the vocab sizes; on success ``target_ids`` holds i + d2t[i]."""
    out = VocabCheck()
    if d2t_dtype not in INT_DTYPES:
        out.problems.append(f"d2t has dtype {d2t_dtype}; it must be an integer offset vector")
        return out
    if d2t.ndim != 1 or d2t.shape[0] != draft_vocab_size:
        out.problems.append(f"d2t has shape {list(d2t.shape)}, expected [{draft_vocab_size}] (draft_vocab_size)")
        return out
    offsets = d2t.astype(np.int64)
    ids = np.arange(draft_vocab_size, dtype=np.int64) + offsets
    if draft_vocab_size < vocab_size and not offsets.any():
        out.problems.append(
            f"d2t is all zeros under a compressed vocab ({draft_vocab_size} < {vocab_size}): draft id i would "
            "always mean target id i, which is almost never what was trained"
        )
    looks_absolute = bool(np.all((offsets >= 0) & (offsets < vocab_size))) and bool(np.all(np.diff(offsets) > 0)) \
        and offsets.any() and (ids.max() >= vocab_size or np.unique(ids).size != ids.size)
    if looks_absolute:
        out.problems.append("d2t holds absolute target ids, not offsets (target_id = i + d2t[i]); "
                            "subtract arange(draft_vocab_size) to convert")
        return out
    bad = np.flatnonzero((ids < 0) | (ids >= vocab_size))
    if bad.size:
        i = int(bad[0])
        out.problems.append(f"{bad.size} d2t entries map outside [0, {vocab_size}); first: i={i} -> {int(ids[i])}")
        return out
    unique = np.unique(ids)
    if unique.size != ids.size:
        out.problems.append(f"d2t maps {ids.size - unique.size} draft ids onto target ids already taken (duplicates)")
        return out
    out.target_ids = ids
    return out


def check_t2d(t2d: np.ndarray, t2d_dtype: str, vocab_size: int, draft_vocab_size: int,
              target_ids: np.ndarray | None) -> list[str]:
    """Check t2d's dtype, length, count, and agreement with d2t's target ids."""
    problems = []
    if t2d_dtype not in ("BOOL", "U8", "I8"):
        return [f"t2d has dtype {t2d_dtype}; it must be a boolean mask"]
    if t2d.ndim != 1 or t2d.shape[0] != vocab_size:
        return [f"t2d has shape {list(t2d.shape)}, expected [{vocab_size}] (vocab_size)"]
    mask = t2d.astype(bool)
    if int(mask.sum()) != draft_vocab_size:
        problems.append(f"t2d marks {int(mask.sum())} target ids, expected draft_vocab_size = {draft_vocab_size}")
    if target_ids is not None and not bool(mask[target_ids].all()):
        missing = int((~mask[target_ids]).sum())
        problems.append(f"t2d is false at {missing} target ids that d2t maps to")
    return problems


def t2d_from_target_ids(target_ids: np.ndarray, vocab_size: int) -> np.ndarray:
    mask = np.zeros(vocab_size, dtype=bool)
    mask[target_ids] = True
    return mask


def identity_d2t(draft_vocab_size: int) -> np.ndarray:
    return np.zeros(draft_vocab_size, dtype=np.int64)
