"""safetensors dtype names, their sizes, and numpy views of their raw bytes.

numpy has no bfloat16 or float8, so those are viewed as unsigned integers and
decoded explicitly where values are needed (float8 through a 256-entry table).  This keeps torch out of every
header-only and streaming code path; numpy itself is imported only when
values are read, so header-only commands start fast.
"""

from __future__ import annotations

import math
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

DTYPE_SIZES: dict[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}

FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2", "F8_E8M0"})
INT_DTYPES = frozenset({"U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64"})
FLOAT8_DTYPES = frozenset({"F8_E4M3", "F8_E5M2", "F8_E8M0"})

# Raw storage view for each dtype (little-endian, as safetensors stores it).
_RAW_NUMPY: dict[str, str] = {
    "BOOL": "|b1", "U8": "|u1", "I8": "|i1", "F8_E4M3": "|u1", "F8_E5M2": "|u1", "F8_E8M0": "|u1",
    "I16": "<i2", "U16": "<u2", "F16": "<f2", "BF16": "<u2",
    "I32": "<i4", "U32": "<u4", "F32": "<f4",
    "I64": "<i8", "U64": "<u8", "F64": "<f8",
}

# safetensors float dtype -> the torch_dtype name a config.json states for it
CONFIG_DTYPE_NAMES: dict[str, str] = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}

TORCH_TO_SAFETENSORS: dict[str, str] = {
    "torch.bool": "BOOL", "torch.uint8": "U8", "torch.int8": "I8", "torch.int16": "I16",
    "torch.uint16": "U16", "torch.float16": "F16", "torch.bfloat16": "BF16", "torch.int32": "I32",
    "torch.uint32": "U32", "torch.float32": "F32", "torch.int64": "I64", "torch.uint64": "U64",
    "torch.float64": "F64", "torch.float8_e4m3fn": "F8_E4M3", "torch.float8_e5m2": "F8_E5M2",
    "torch.float8_e8m0fnu": "F8_E8M0",
}

# numpy dtype name -> safetensors dtype (bfloat16 and the float8s are ml_dtypes' names, where it is installed)
NUMPY_TO_SAFETENSORS: dict[str, str] = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16", "float16": "F16",
    "bfloat16": "BF16", "int32": "I32", "uint32": "U32", "float32": "F32", "int64": "I64", "uint64": "U64",
    "float64": "F64", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "float8_e8m0fnu": "F8_E8M0",
}


def raw_numpy_dtype(dtype: str) -> np.dtype:
    import numpy as np

    return np.dtype(_RAW_NUMPY[dtype])


def _float8_value(byte: int, dtype: str) -> float:
    """The value of one float8 bit pattern (OCP formats, as torch's float8_e4m3fn / e5m2 / e8m0fnu read them)."""
    if dtype == "F8_E8M0":  # an exponent alone: no sign, no zero, no Inf; 0xFF is NaN
        return math.nan if byte == 0xFF else math.ldexp(1.0, byte - 127)
    exp_bits, bias = {"F8_E4M3": (4, 7), "F8_E5M2": (5, 15)}[dtype]
    man_bits = 7 - exp_bits
    sign = -1.0 if byte & 0x80 else 1.0
    exp, man = (byte >> man_bits) & ((1 << exp_bits) - 1), byte & ((1 << man_bits) - 1)
    if dtype == "F8_E4M3" and (byte & 0x7F) == 0x7F:  # e4m3fn: no Inf, S.1111.111 is NaN
        return math.nan
    if dtype == "F8_E5M2" and exp == 0x1F:  # IEEE-like: Inf and NaN
        return sign * math.inf if man == 0 else math.nan
    if exp == 0:  # subnormal
        return sign * math.ldexp(man, 1 - bias - man_bits)
    return sign * math.ldexp((1 << man_bits) + man, exp - bias - man_bits)


@cache
def float8_table(dtype: str) -> np.ndarray:
    """float32 value of each of the 256 bit patterns of a float8 dtype: decoding is one lookup."""
    import numpy as np

    return np.array([_float8_value(b, dtype) for b in range(256)], dtype=np.float32)


def to_float32(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Decode a raw array of ``dtype`` to float32 (exact for BF16/F16/F32 and the float8 formats)."""
    import numpy as np

    if dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if dtype in ("F16", "F32", "F64"):
        return raw.astype(np.float32)
    if dtype in FLOAT8_DTYPES:
        return float8_table(dtype)[raw]
    if dtype in INT_DTYPES or dtype == "BOOL":
        return raw.astype(np.float32)
    raise ValueError(f"cannot decode {dtype} values")


def nonfinite_mask(raw: np.ndarray, dtype: str) -> np.ndarray | None:
    """Boolean mask of NaN/Inf elements, computed on the raw bits (no float decode).

    Returns None for dtypes that cannot hold non-finite values.
    """
    import numpy as np

    if dtype == "BF16":
        return (raw & 0x7F80) == 0x7F80
    if dtype == "F16":
        return (raw.view(np.uint16) & 0x7C00) == 0x7C00
    if dtype in ("F32", "F64"):
        return ~np.isfinite(raw)
    if dtype == "F8_E5M2":
        return (raw & 0x7C) == 0x7C
    if dtype == "F8_E4M3":
        return (raw & 0x7F) == 0x7F
    if dtype == "F8_E8M0":
        return raw == 0xFF
    return None
