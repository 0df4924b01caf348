"""The draft-to-target vocabulary mapping: checks and exact derivations.

Every trainer and engine stores ``d2t`` as *offsets*: ``target_id = i + d2t[i]``.
``t2d`` is the boolean membership mask over the target vocabulary.  One is
derivable from the other exactly when the mapping is valid, which is what
lets a conversion drop ``t2d`` (ModelOpt) and rebuild it later (SpecForge).

These vectors are small (a draft vocab of offsets, a target vocab of bytes),
so this module works on raw bytes with the standard library: ``convert``
checks them without paying for a numpy import.
"""

from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass, field

from ..io.dtypes import DTYPE_SIZES, INT_DTYPES

_ARRAY_CODES = {"I8": "b", "U8": "B", "I16": "h", "U16": "H", "I32": "i", "U32": "I", "I64": "q", "U64": "Q"}


def int_values(data: bytes, dtype: str) -> array:
    """A little-endian integer vector's values (safetensors stores little-endian)."""
    values = array(_ARRAY_CODES[dtype])
    if values.itemsize != DTYPE_SIZES[dtype]:  # pragma: no cover - exotic C ABI
        raise ValueError(f"no native {dtype} array type on this platform")
    values.frombytes(data)
    if sys.byteorder == "big":  # pragma: no cover
        values.byteswap()
    return values


@dataclass
class VocabCheck:
    problems: list[str] = field(default_factory=list)
    target_ids: list[int] | None = None  # absolute target ids when d2t is a valid offset vector


def check_d2t(data: bytes, dtype: str, shape: tuple[int, ...], vocab_size: int, draft_vocab_size: int) -> VocabCheck:
    """Check d2t's raw bytes against the vocab sizes; on success ``target_ids`` holds i + d2t[i]."""
    out = VocabCheck()
    if dtype not in INT_DTYPES:
        out.problems.append(f"d2t has dtype {dtype}; it must be an integer offset vector")
        return out
    if len(shape) != 1 or shape[0] != draft_vocab_size:
        out.problems.append(f"d2t has shape {list(shape)}, expected [{draft_vocab_size}] (draft_vocab_size)")
        return out
    offsets = int_values(data, dtype)
    ids = [i + d for i, d in enumerate(offsets)]
    if draft_vocab_size < vocab_size and not any(offsets):
        out.problems.append(
            f"d2t is all zeros under a compressed vocab ({draft_vocab_size} < {vocab_size}): draft id i would "
            "always mean target id i, which is almost never what was trained"
        )
    if _looks_absolute(offsets, ids, vocab_size):
        out.problems.append("d2t holds absolute target ids, not offsets (target_id = i + d2t[i]); "
                            "subtract arange(draft_vocab_size) to convert")
        return out
    bad = [i for i, t in enumerate(ids) if not 0 <= t < vocab_size]
    if bad:
        out.problems.append(f"{len(bad)} d2t entries map outside [0, {vocab_size}); first: i={bad[0]} -> {ids[bad[0]]}")
        return out
    duplicates = len(ids) - len(set(ids))
    if duplicates:
        out.problems.append(f"d2t maps {duplicates} draft ids onto target ids already taken (duplicates)")
        return out
    out.target_ids = ids
    return out


def _looks_absolute(offsets: array, ids: list[int], vocab_size: int) -> bool:
    """Sorted in-range values that fail as offsets: someone stored the target ids themselves."""
    if not any(offsets) or not all(0 <= d < vocab_size for d in offsets):
        return False
    if not all(a < b for a, b in zip(offsets, offsets[1:], strict=False)):
        return False
    return max(ids) >= vocab_size or len(set(ids)) != len(ids)


def check_t2d(data: bytes, dtype: str, shape: tuple[int, ...], vocab_size: int, draft_vocab_size: int,
              target_ids: list[int] | None) -> list[str]:
    """Check t2d's dtype, length, count, and agreement with d2t's target ids."""
    if dtype not in ("BOOL", "U8", "I8"):
        return [f"t2d has dtype {dtype}; it must be a boolean mask"]
    if len(shape) != 1 or shape[0] != vocab_size:
        return [f"t2d has shape {list(shape)}, expected [{vocab_size}] (vocab_size)"]
    problems = []
    marked = len(data) - data.count(0)
    if marked != draft_vocab_size:
        problems.append(f"t2d marks {marked} target ids, expected draft_vocab_size = {draft_vocab_size}")
    if target_ids is not None:
        missing = sum(1 for i in target_ids if not data[i])
        if missing:
            problems.append(f"t2d is false at {missing} target ids that d2t maps to")
    return problems


def t2d_from_target_ids(target_ids: list[int], vocab_size: int) -> bytes:
    """The BOOL t2d mask for these target ids."""
    mask = bytearray(vocab_size)
    for i in target_ids:
        mask[i] = 1
    return bytes(mask)


def identity_d2t(draft_vocab_size: int) -> bytes:
    """An I64 all-zero offset vector: draft id i is target id i."""
    return bytes(8 * draft_vocab_size)
