"""The streamed numeric scan: NaN/Inf, all-zero fc/lm_head, norm-weight statistics; and weight dtypes (EC053).

Tensors are read in chunks of at most ``chunk_bytes`` through
``TensorStore.iter_raw_chunks``, which reuses one buffer, so at most one chunk
of one tensor is in memory.  NaN/Inf are found on the raw bits (no float
decode); only norm weights (a few KB) are decoded, for their statistics.
"""

from __future__ import annotations

from collections.abc import Callable

from ..formats.base.reading import ReadResult
from ..io.dtypes import FLOAT_DTYPES, nonfinite_mask, to_float32
from ..io.finite import NEVER_ZERO
from ..io.tensor_store import CHUNK_BYTES, TensorStore
from ..spec.report import Finding

ZERO_CHECKED = ("fc.weight", "lm_head.weight")


def _is_norm(canonical: str) -> bool:
    return canonical.endswith(("norm.weight", "layernorm.weight")) or canonical.startswith("fc_norm.")


def _not_zero(chunk, dtype: str) -> bool:
    import numpy as np

    if dtype in NEVER_ZERO:
        return True
    if chunk.dtype.kind == "f":
        return bool(np.any(chunk != 0))
    sign = {1: 0x7F, 2: 0x7FFF}[chunk.dtype.itemsize]  # raw BF16 / FP8 bits: ignore the sign (-0.0)
    return bool(np.any(chunk & sign))


def scan_tensor(store: TensorStore, name: str, dtype: str, chunk_bytes: int,
                on_bytes: Callable[[int], None] | None = None) -> tuple[int, int | None, bool]:
    """(non-finite count, first non-finite flat index, any non-zero element), one chunk at a time."""
    import numpy as np

    count, first, nonzero, offset = 0, None, False, 0
    for chunk in store.iter_raw_chunks(name, chunk_bytes):
        mask = nonfinite_mask(chunk, dtype)
        if mask is not None:
            hits = int(np.count_nonzero(mask))
            if hits and first is None:
                first = offset + int(np.argmax(mask))
            count += hits
        if not nonzero:
            nonzero = _not_zero(chunk, dtype)
        offset += chunk.size
        if on_bytes:
            on_bytes(chunk.nbytes)
    return count, first, nonzero


def dtype_findings(read: ReadResult) -> list[Finding]:
    """EC053 for a weight or bias stored as integers or BOOL: header facts only, so also without the scan.

    Every canonical ``*.weight`` / ``*.bias`` (fc, norms, projections, lm_head, embed) is a float an engine
    multiplies by; an integer one is a quantised tensor without its scales, or the wrong tensor.  Engines copy
    it into their float parameter without complaint, so the drafter loads and computes with the integers.
    """
    out = []
    for canonical in sorted(read.tensors):
        info, stored = read.tensors[canonical], read.canonical[canonical]
        if canonical.endswith((".weight", ".bias")) and info.dtype not in FLOAT_DTYPES:
            out.append(Finding(code="EC053", severity="error", tensor=stored,
                               message=f"{stored} is stored as {info.dtype}, not a float dtype: engines copy its "
                                       "integers into a float parameter and run them as weights (a quantised tensor "
                                       "without its scales, or the wrong tensor)"))
    return out


def scanned_bytes(read: ReadResult) -> int:
    """How many bytes the scan reads (for a progress bar's total)."""
    return sum(i.nbytes for i in read.tensors.values() if i.dtype in FLOAT_DTYPES)


def numeric_findings(read: ReadResult, store: TensorStore, chunk_bytes: int = CHUNK_BYTES,
                     on_bytes: Callable[[int], None] | None = None) -> list[Finding]:
    out: list[Finding] = []
    for canonical in sorted(read.tensors):
        info = read.tensors[canonical]
        stored = read.canonical[canonical]
        if info.dtype not in FLOAT_DTYPES or info.numel == 0:
            continue
        count, first, nonzero = scan_tensor(store, stored, info.dtype, chunk_bytes, on_bytes)
        if count:
            out.append(Finding(code="EC060", severity="error", tensor=stored,
                               message=f"{stored} has {count} NaN/Inf value(s) of {info.numel}; first at flat index {first}"))
        if canonical in ZERO_CHECKED and not nonzero:
            out.append(Finding(code="EC061", severity="warning", tensor=stored,
                               message=f"{stored} is entirely zero: uninitialised or wiped; the drafter proposes garbage"))
        if _is_norm(canonical) and len(info.shape) == 1 and not count:
            values = to_float32(store.read_raw(stored), info.dtype)
            ones = " (all exactly 1.0: never trained, or folded into fc)" if bool((values == 1.0).all()) else ""
            out.append(Finding(code="EC062", severity="info", tensor=stored,
                               message=f"{stored}: mean {values.mean(dtype='float64'):.4g}, min {values.min():.4g}, "
                                       f"max {values.max():.4g}{ones}"))
    return out
