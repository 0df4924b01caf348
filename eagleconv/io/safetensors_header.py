"""A strict pre-parser for safetensors headers, in pure Python.

It checks everything the format promises before a single tensor byte is read:
a capped header length, duplicate-free JSON, known dtypes, non-negative shapes,
offsets that tile the data section exactly (no gaps, overlaps or trailing bytes)
and ``size == prod(shape) * itemsize``.  It adds policy on top of what the
safetensors library checks (duplicate keys, a lower size cap, a tensor-count cap).

Its promise is one way: every header it accepts, safetensors' ``safe_open`` and
``load_file`` accept too (the property tests and the fuzzer assert it).  So it is
never more lenient than serde_json's reading of the header: ``__metadata__`` is
null or a str -> str map, ``-0`` is no integer, and a shape's element count must
fit in an int64 even when a dimension is 0, whatever the order of the dimensions
(safetensors multiplies them in order, with overflow checks; torch needs int64).
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UnsafeInputError
from ..support.jsonio import loads_strict
from .dtypes import DTYPE_SIZES

MAX_HEADER_BYTES = 25_000_000  # huggingface_hub's cap; a drafter header is kilobytes
MAX_TENSORS = 10_000
METADATA_KEY = "__metadata__"
_MAX_ELEMENTS = 2**63  # torch's int64 sizes; below safetensors' usize


def _header_int(text: str) -> int:
    """serde_json reads ``-0`` as a float and an integer past a double's range as an error: so do we."""
    value = int(text)
    if text == "-0" or abs(value) > 1.7976931348623157e308:
        raise ValueError(f"the integer {text[:20]}{'...' if len(text) > 20 else ''} is not one serde_json reads")
    return value


def _short(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fits(shape: list[int]) -> bool:
    """The element count, zero dimensions left out, fits in an int64: then it fits in every order.

    safetensors multiplies the dimensions in order in a usize, so ``[2**63, 2, 0]`` overflows
    and ``[0, 2**63, 2]`` does not; torch keeps every dimension in an int64.
    """
    return math.prod(d for d in shape if d) < _MAX_ELEMENTS


@dataclass(frozen=True)
class HeaderEntry:
    """One tensor as the header describes it; offsets are absolute file offsets."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass
class SafetensorsHeader:
    path: str | Path  # a str for a remote file (hf://ORG/NAME@COMMIT/FILE), which a Path would mangle
    entries: dict[str, HeaderEntry]
    metadata: dict[str, str] = field(default_factory=dict)
    data_start: int = 0
    file_size: int = 0


def _bad(path: str | Path, message: str) -> UnsafeInputError:
    return UnsafeInputError(f"bad safetensors header: {message}", path)


def parse_header_bytes(path: str | Path, prefix: bytes, header: bytes, file_size: int) -> SafetensorsHeader:
    """Validate a header already read from ``path`` (split out so it can be fuzzed)."""
    (n,) = struct.unpack("<Q", prefix)
    data_start = 8 + n
    try:
        raw = loads_strict(header, path, parse_int=_header_int)
    except UnsafeInputError as exc:
        raise UnsafeInputError(f"bad safetensors header: {exc.message}", path, code=exc.code) from exc
    if not isinstance(raw, dict):
        raise _bad(path, "header is not a JSON object")
    metadata = raw.pop(METADATA_KEY, None)
    if metadata is None:  # absent or null: what safetensors reads as no metadata
        metadata = {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise _bad(path, f"__metadata__ must map strings to strings, not {_short(metadata)}")
    if len(raw) > MAX_TENSORS:
        raise _bad(path, f"{len(raw)} tensors exceed the limit of {MAX_TENSORS}")

    entries: list[HeaderEntry] = []
    for name, info in raw.items():
        if not name or not isinstance(info, dict):
            raise _bad(path, f"tensor {name!r} has no description")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
            raise _bad(path, f"tensor {name!r} has unknown dtype {_short(dtype)}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise _bad(path, f"tensor {name!r} has an invalid shape {_short(shape)}")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
            or offsets[1] < offsets[0]
        ):
            raise _bad(path, f"tensor {name!r} has invalid data_offsets {_short(offsets)}")
        expected = math.prod(shape) * DTYPE_SIZES[dtype]
        if offsets[1] - offsets[0] != expected:
            raise _bad(
                path,
                f"tensor {name!r} occupies {offsets[1] - offsets[0]} bytes but shape {_short(shape)} x {dtype} "
                f"needs {expected}",
            )
        if not _fits(shape):  # only an empty tensor gets here with a huge shape: its size matched, 0
            raise _bad(path, f"tensor {name!r} has shape {_short(shape)}, whose element count overflows 64 bits "
                             "(even with a dimension of 0, safetensors or torch refuses it)")
        entries.append(HeaderEntry(name, dtype, tuple(shape), data_start + offsets[0], data_start + offsets[1]))

    # Offsets must tile [0, data_size) exactly: no holes, no overlaps, no trailing bytes.
    position = data_start
    for entry in sorted(entries, key=lambda e: (e.start, e.end)):
        if entry.start != position:
            kind = "overlaps the previous tensor" if entry.start < position else "leaves a gap before it"
            raise _bad(path, f"tensor {entry.name!r} {kind} (offset {entry.start - data_start})")
        position = entry.end
    if position != file_size:
        if position > file_size:
            raise UnsafeInputError(
                f"file is truncated: header describes {position} bytes, file has {file_size}", path
            )
        raise _bad(path, f"{file_size - position} trailing bytes after the last tensor")
    return SafetensorsHeader(path, {e.name: e for e in entries}, dict(metadata), data_start, file_size)


def header_length(path: str | Path, prefix: bytes, file_size: int, max_header_bytes: int = MAX_HEADER_BYTES) -> int:
    """The header length the first 8 bytes state, once it is known to be capped and inside the file.

    Checked before the header is read, so a hostile length costs nothing (a remote file's size is the server's).
    """
    if len(prefix) < 8:
        raise UnsafeInputError("file is too short to be safetensors", path)
    if prefix[:4] == b"PK\x03\x04":
        raise UnsafeInputError("file is a zip archive (a torch pickle), not safetensors", path)
    (n,) = struct.unpack("<Q", prefix[:8])
    if n > max_header_bytes:
        raise UnsafeInputError(f"header length {n} exceeds the {max_header_bytes}-byte cap", path)
    if 8 + n > file_size:
        raise UnsafeInputError(f"header length {n} runs past the end of the file ({file_size} bytes)", path)
    return int(n)


def read_header(path: str | Path, max_header_bytes: int = MAX_HEADER_BYTES) -> SafetensorsHeader:
    """Read and validate the header of one .safetensors file."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            file_size = os.fstat(fh.fileno()).st_size
            prefix = fh.read(8)
            header = fh.read(header_length(path, prefix, file_size, max_header_bytes))
    except OSError as exc:
        raise UnsafeInputError(f"cannot read: {exc.strerror or exc}", path) from exc
    return parse_header_bytes(path, prefix, header, file_size)


def build_header(entries: list[tuple[str, str, tuple[int, ...], int]],
                 metadata: dict[str, str] | None) -> tuple[bytes, list[int]]:
    """Serialise a header for tensors written in the given order.

    ``entries`` are (name, dtype, shape, nbytes).  Returns the full prefix
    (8-byte length + JSON padded with spaces to a multiple of 8, as the
    safetensors library does) and the relative start offset of each tensor.
    """
    header: dict[str, object] = {}
    if metadata:
        header[METADATA_KEY] = dict(metadata)
    offsets = []
    position = 0
    for name, dtype, shape, nbytes in entries:
        if name == METADATA_KEY:
            raise ValueError("a tensor may not be named __metadata__")
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [position, position + nbytes]}
        offsets.append(position)
        position += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, offsets
