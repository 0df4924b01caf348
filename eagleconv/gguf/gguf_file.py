"""GGUF files (llama.cpp's format) read as a checkpoint, and written staged, atomically and streamed.

Reading: :func:`open_gguf` parses the header (:func:`read_header`: bounded by the file size, strict, checked
against ``gguf.GGUFReader`` in the tests, and fast on a target's 163840-token vocabulary, where GGUFReader takes
13 s; nothing but the header is read) and returns a :class:`GgufCheckpoint`: the tensors under
their GGUF names with row-major shapes (GGUF lists dimensions innermost first), their byte ranges in the
file, and the key/value metadata.  What llama.cpp's converter does to the bytes is undone on the way out,
so a reader sees what every other layout stores: ``d2t`` as offsets (GGUF holds absolute target ids,
``d2t + arange``) and the llama Q/K rows in Hugging Face's order (its converter applies
``LlamaModel.permute``, the rotary row order ggml's RoPE expects).

Writing is :mod:`~eagleconv.gguf.gguf_writer`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..support.bounds import MAX_GGUF_ELEMENTS, MAX_GGUF_KEYS, MAX_GGUF_TENSORS, MAX_GGUF_TEXT
from ..errors import EagleconvError, FormatError, UnsafeInputError
from ..io.checkpoint import Checkpoint, _identity, _Location
from ..io.tensor_store import TensorInfo
from ..io.durable import write_all
from .gguf_keys import config_from_kv

if TYPE_CHECKING:
    import numpy as np

GGUF_MAGIC = b"GGUF"
# GGML type name <-> safetensors dtype name, for the types eagleconv copies (quantised blocks are not tensors it reads)
GGML_TO_DTYPE: dict[str, str] = {"F32": "F32", "F16": "F16", "BF16": "BF16", "F64": "F64", "I8": "I8", "I16": "I16",
                                 "I32": "I32", "I64": "I64"}
DTYPE_TO_GGML = {v: k for k, v in GGML_TO_DTYPE.items()}
# Tensor names whose rows llama.cpp's converter reorders for ggml's RoPE, and the metadata key of their head count.
ROPE_ROWS = {"blk.{n}.attn_q.weight": "{arch}.attention.head_count", "blk.{n}.attn_k.weight": "{arch}.attention.head_count_kv"}
ABSOLUTE_IDS = "d2t"  # stored as absolute target ids: d2t[i] + i
# d2t's integer types read back: llama.cpp writes I64 and aborts on any other at the first draft, which
# ``validate --engine llama.cpp`` reports (an I32 d2t is read, not refused, so that it can say so)
ID_DTYPES = {"I64": "<i8", "I32": "<i4"}
# Token arrays of the target's tokenizer: kept out of the config view, counted in ``metadata`` instead.
BULKY_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.merges")


def is_gguf(path: str | Path) -> bool:
    """A regular file that starts with GGUF's magic."""
    try:
        with open(path, "rb") as f:
            return os.path.isfile(path) and f.read(4) == GGUF_MAGIC
    except OSError:
        return False


# -- the two row orders and the id storage -----------------------------------------------------------------

def rope_rows(block: np.ndarray, heads: int, *, to_gguf: bool) -> np.ndarray:
    """``block``'s rows (a [rows, row_bytes] uint8 view of whole heads) in ggml's rotary order or back.

    llama.cpp's ``LlamaModel.permute``: per head, rows ``(2, hd/2)`` become ``(hd/2, 2)`` (interleaved pairs).
    """
    rows = block.shape[0]
    half = rows // heads // 2
    if rows % (2 * heads):
        raise FormatError(f"{rows} rows do not split into {heads} heads of an even size")
    shape = (heads, 2, half, block.shape[1]) if to_gguf else (heads, half, 2, block.shape[1])
    return block.reshape(shape).swapaxes(1, 2).reshape(block.shape)


def copy_rope_rows(read: Callable[[int, int], bytes], shape: tuple[int, ...], itemsize: int, heads: int,
                   out_fd: int, *, to_gguf: bool, convert: Callable[[bytes], bytes] | None = None) -> None:
    """Append a [rows, cols] tensor to ``out_fd`` with its rows reordered, one head at a time (bounded memory).

    ``read(offset, size)``: the source tensor's bytes at ``offset``; ``convert``: applied to each reordered head.
    """
    import numpy as np

    rows, row_bytes = shape[0], (shape[1] if len(shape) > 1 else 1) * itemsize
    per_head = rows // heads
    for h in range(heads):
        start = h * per_head * row_bytes
        block = np.frombuffer(read(start, per_head * row_bytes), dtype=np.uint8).reshape(per_head, row_bytes)
        ordered = np.ascontiguousarray(rope_rows(block, 1, to_gguf=to_gguf))
        write_all(out_fd, convert(ordered.tobytes()) if convert is not None else ordered.data)


def copy_rope_rows_kernel(copy: Callable[[int, int, int], None], shape: tuple[int, ...], itemsize: int, heads: int,
                          out_fd: int) -> None:
    """:func:`copy_rope_rows` into ggml's order by kernel copies of single rows (``copy(offset, size, fd)``): no
    byte passes through Python (benchmarks/RESULTS.md, "convert --to gguf")."""
    rows, row_bytes = shape[0], (shape[1] if len(shape) > 1 else 1) * itemsize
    per_head = rows // heads
    half = per_head // 2
    for h in range(heads):
        base = h * per_head
        for i in range(half):
            copy((base + i) * row_bytes, row_bytes, out_fd)
            copy((base + half + i) * row_bytes, row_bytes, out_fd)


def absolute_ids(offsets: np.ndarray) -> np.ndarray:
    """d2t offsets -> the absolute target ids llama.cpp stores (I64)."""
    import numpy as np

    return offsets.astype(np.int64).reshape(-1) + np.arange(offsets.size, dtype=np.int64)


# -- reading ------------------------------------------------------------------------------------------------

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
MAX_DIMS = 4  # GGML_MAX_DIMS


@dataclass
class GgufHeader:
    """A GGUF file's header: metadata (key -> (type, element type, value)), tensor table, where data starts."""

    kv: dict[str, tuple[int, int | None, Any]]
    tensors: list[tuple[str, int, tuple[int, ...], int]]  # name, GGML type, ne (innermost first), offset in data
    data_start: int
    size: int


class _Cursor:
    """A walk over the header: every read bounded by the file, everything decoded by the budget of
    :data:`~eagleconv.support.bounds.MAX_GGUF_ELEMENTS` array elements and :data:`~eagleconv.support.bounds.MAX_GGUF_TEXT` bytes
    of text (a sparse file can state a 3e8-element array in 3 MB on disk)."""

    def __init__(self, data: memoryview, path: Path):
        self.data, self.pos, self.path = data, 0, path
        self.elements = self.text = 0

    def take(self, fmt: str) -> Any:
        import struct

        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise FormatError(f"not a readable GGUF file: the header ends early (at byte {self.pos})", self.path)
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def _over_text(self, what: str) -> UnsafeInputError:
        return UnsafeInputError(f"{what}: the header's strings pass eagleconv's limit of {MAX_GGUF_TEXT} bytes "
                                "(docs/security.md)", self.path)

    def string(self, decode: bool = True, what: str = "a key") -> Any:  # str, bytes where not UTF-8, None: not decoded
        n = self.take("<Q")
        if self.pos + n > len(self.data):
            raise FormatError(f"not a readable GGUF file: a string of {n} bytes at byte {self.pos} runs past the end",
                              self.path)
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        if not decode:
            return None
        self.text += n
        if self.text > MAX_GGUF_TEXT:
            raise self._over_text(what)
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return bytes(raw)

    def strings(self, count: int, decode: bool, what: str) -> list[str] | list[bytes] | int:
        """``count`` strings (bytes where not UTF-8) in one tight loop: a vocabulary has 10^5 of them."""
        import struct

        unpack, data, pos, end = struct.Struct("<Q").unpack_from, self.data, self.pos, len(self.data)
        budget = MAX_GGUF_TEXT - self.text if decode else end
        out: list[bytes] = []
        for _ in range(count):
            if pos + 8 > end:
                break
            (n,) = unpack(data, pos)
            pos += 8 + n
            if pos > end:
                break
            if decode:
                budget -= n
                if budget < 0:
                    raise self._over_text(what)
                out.append(bytes(data[pos - n:pos]))
        else:
            self.pos = pos
            if not decode:
                return count
            self.text = MAX_GGUF_TEXT - budget
            try:
                return [b.decode("utf-8") for b in out]
            except UnicodeDecodeError:
                return out
        raise FormatError(f"not a readable GGUF file: an array of {count} strings runs past the end", self.path)

    def value(self, vtype: int, decode: bool, key: str) -> tuple[int | None, Any]:
        import struct

        if vtype in _SCALARS:
            return None, self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return None, self.string(decode, f"metadata key {key!r}")
        if vtype != _ARRAY:
            raise FormatError(f"not a readable GGUF file: unknown value type {vtype} at byte {self.pos}", self.path)
        sub, count = self.take("<I"), self.take("<Q")
        self.elements += count  # walked or decoded, an array's elements are paid for before they are read
        if self.elements > MAX_GGUF_ELEMENTS:
            raise UnsafeInputError(f"metadata key {key!r} is an array of {count} elements: past eagleconv's limit of "
                                   f"{MAX_GGUF_ELEMENTS} array elements in a GGUF header (docs/security.md)", self.path)
        if sub in _SCALARS:
            size = struct.calcsize(_SCALARS[sub]) * count
            if self.pos + size > len(self.data):
                raise FormatError(f"not a readable GGUF file: an array of {count} runs past the end", self.path)
            import numpy as np

            values = np.frombuffer(self.data, dtype=_SCALARS[sub], count=count, offset=self.pos).tolist() \
                if decode else count
            self.pos += size
            return sub, values
        if sub == _STRING:
            if count > len(self.data) // 8:
                raise FormatError(f"not a readable GGUF file: an array of {count} strings cannot fit", self.path)
            return sub, self.strings(count, decode, f"metadata key {key!r}")
        raise FormatError(f"not a readable GGUF file: arrays of type {sub} are not read", self.path)


def read_header(path: str | Path, *, skip: Sequence[str] = ()) -> GgufHeader:
    """Parse a GGUF header (version 2 or 3), bounded by the file's size; ``skip``: keys whose arrays are
    walked but not decoded (their value is their length).

    gguf.GGUFReader builds a numpy view per array element: 13 s and 300 MB for a 163840-token vocabulary
    (benchmarks/RESULTS.md, "convert --to gguf"); this walks it in a fraction of a second.  The tests check
    it against GGUFReader on llama.cpp's own output.
    """
    import mmap

    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 24:
                raise FormatError("not a readable GGUF file: shorter than a GGUF header", path)
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise UnsafeInputError(f"cannot read: {exc.strerror or exc}", path) from None
    try:
        c = _Cursor(memoryview(data), path)
        if bytes(c.data[:4]) != GGUF_MAGIC:
            raise FormatError("not a GGUF file (no GGUF magic)", path)
        c.pos = 4
        version = c.take("<I")
        if version not in (2, 3):
            raise FormatError(f"GGUF version {version} is not read (2 and 3 are)", path)
        n_tensors, n_kv = c.take("<Q"), c.take("<Q")
        if n_tensors > size // 24 or n_kv > size // 12:
            raise FormatError(f"not a readable GGUF file: {n_tensors} tensors and {n_kv} keys cannot fit", path)
        if n_tensors > MAX_GGUF_TENSORS or n_kv > MAX_GGUF_KEYS:
            raise UnsafeInputError(f"the header states {n_tensors} tensors and {n_kv} keys: past eagleconv's limits of "
                                   f"{MAX_GGUF_TENSORS} and {MAX_GGUF_KEYS} (docs/security.md)", path)
        kv: dict[str, tuple[int, int | None, Any]] = {}
        for _ in range(n_kv):
            key = c.string()
            vtype = c.take("<I")
            sub, value = c.value(vtype, key not in skip, key)
            if key in kv:
                raise FormatError(f"not a readable GGUF file: key {key!r} appears twice", path)
            kv[key] = (vtype, sub, value)
        tensors = []
        seen: set[str] = set()
        for _ in range(n_tensors):
            name = c.string(what="a tensor name")
            if name in seen:  # gguf's GGUFReader: "Found duplicated tensor"; which copy a reader takes is its own
                raise FormatError(f"not a readable GGUF file: tensor {name!r} appears twice", path)
            seen.add(name)
            n_dims = c.take("<I")
            if not 1 <= n_dims <= MAX_DIMS:
                raise FormatError(f"not a readable GGUF file: tensor {name!r} has {n_dims} dimensions", path)
            ne = tuple(c.take("<Q") for _ in range(n_dims))
            tensors.append((name, c.take("<I"), ne, c.take("<Q")))
        vtype, _, alignment = kv.get("general.alignment", (4, None, 32))
        if vtype != 4 or alignment <= 0 or alignment & (alignment - 1):  # llama.cpp reads it as a UINT32 only
            raise FormatError(f"not a readable GGUF file: general.alignment {alignment!r} is not a UINT32 power of 2",
                              path)
        misaligned = next((t for t in tensors if t[3] % alignment), None)
        if misaligned is not None:
            raise FormatError(f"not a readable GGUF file: tensor {misaligned[0]!r} starts at offset {misaligned[3]}, "
                              f"not a multiple of general.alignment {alignment}", path)
        data_start = c.pos + (-c.pos % alignment)
        del c
        return GgufHeader(kv, tensors, data_start, size)
    finally:
        try:
            data.close()
        except BufferError:  # a view is still alive only if parsing failed midway; the map goes with it
            pass

class GgufCheckpoint(Checkpoint):
    """A GGUF drafter: a Checkpoint whose ``d2t`` and Q/K bytes are served as the other layouts store them."""

    def __init__(self, *args: Any, rope_heads: dict[str, int], kv: dict[str, Any], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.rope_heads = rope_heads
        self.kv = kv

    def _raw(self, name: str, offset: int, size: int) -> bytes:
        loc = self._locations[name]
        return self._pread_exact(self._fd_for(loc), size, loc.start + offset, loc.path)

    def read_bytes(self, name: str) -> bytes:
        import numpy as np

        info = self.tensors[name]
        data = self._raw(name, 0, info.nbytes)
        if name == ABSOLUTE_IDS:
            ids = np.frombuffer(data, dtype=ID_DTYPES[info.dtype])
            return (ids - np.arange(ids.size, dtype=ids.dtype)).astype(ids.dtype).tobytes()
        if name in self.rope_heads:
            row = info.nbytes // info.shape[0]
            block = np.frombuffer(data, dtype=np.uint8).reshape(info.shape[0], row)
            return np.ascontiguousarray(rope_rows(block, self.rope_heads[name], to_gguf=False)).tobytes()
        return data

    def read_range(self, name: str, offset: int, size: int) -> bytes:
        if name == ABSOLUTE_IDS or name in self.rope_heads:
            return self.read_bytes(name)[offset:offset + size]
        return super().read_range(name, offset, size)

    def iter_raw_chunks(self, name: str, chunk_bytes: int = 1 << 20):
        if name == ABSOLUTE_IDS or name in self.rope_heads:
            yield self.read_raw(name).reshape(-1)
            return
        yield from super().iter_raw_chunks(name, chunk_bytes)

    def copy_into(self, name: str, out_fd: int) -> None:
        info = self.tensors[name]
        if name in self.rope_heads:
            copy_rope_rows(lambda off, n: self._raw(name, off, n), info.shape, info.nbytes // max(info.numel, 1),
                           self.rope_heads[name], out_fd, to_gguf=False)
        elif name == ABSOLUTE_IDS:
            write_all(out_fd, self.read_bytes(name))
        else:
            super().copy_into(name, out_fd)


def _template_match(name: str, template: str) -> bool:
    head, _, tail = template.partition("{n}")
    middle = name[len(head): len(name) - len(tail)] if name.startswith(head) and name.endswith(tail) else ""
    return middle.isdigit()


def _refuse_overlaps(locations: Mapping[str, _Location], path: Path) -> None:
    """Two tensors sharing bytes: gguf's own writer never does it, and a reader that edits one edits both."""
    spans = sorted((loc.start, loc.end, name) for name, loc in locations.items() if loc.end > loc.start)
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        if start < end:
            raise FormatError(f"not a readable GGUF file: tensors {first!r} and {second!r} share bytes", path)


def open_gguf(path: str | Path) -> GgufCheckpoint:
    """Open a GGUF drafter: its header parsed, no tensor data read.  A malformed file is one FormatError.

    Its config is the metadata read as an HF-style config.json (:func:`~eagleconv.gguf.gguf_keys.config_from_kv`).
    """
    import gguf
    import numpy as np

    path = Path(path)
    header = read_header(path, skip=BULKY_KEYS)
    kv = {key: (float(str(np.float32(v))) if t == 6 else v) for key, (t, _, v) in header.kv.items()
          if key not in BULKY_KEYS}
    counts = {key: str(header.kv[key][2]) for key in BULKY_KEYS if key in header.kv}
    size = header.size
    raw_tensors = []
    for name, ggml, ne, offset in header.tensors:
        try:
            type_name = gguf.GGMLQuantizationType(ggml).name
        except ValueError:
            raise FormatError(f"tensor {name!r} has unknown GGML type {ggml}", path) from None
        block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ggml)]
        numel = 1
        for d in ne:
            numel *= d
        raw_tensors.append((name, type_name, tuple(reversed(ne)), header.data_start + offset,
                            numel // block * type_size))
    arch = kv.get("general.architecture")
    tensors: dict[str, TensorInfo] = {}
    locations: dict[str, _Location] = {}
    rope_heads: dict[str, int] = {}
    identity = _identity(path, path)  # tensors are read from this very file later, or refused as swapped
    for name, ggml_type, shape, start, nbytes in raw_tensors:
        dtype = GGML_TO_DTYPE.get(ggml_type)
        if dtype is None:
            raise FormatError(f"tensor {name!r} is {ggml_type}: eagleconv reads GGUF drafters stored as "
                              f"{', '.join(GGML_TO_DTYPE)} (a quantised drafter cannot be converted back exactly)", path)
        info = TensorInfo(name, dtype, shape, path.name)
        if info.nbytes != nbytes or start + nbytes > size:
            raise FormatError(f"tensor {name!r} ({ggml_type}, shape {list(shape)}) does not fit the file", path)
        if name == ABSOLUTE_IDS and dtype not in ID_DTYPES:
            raise FormatError(f"d2t is {dtype}; llama.cpp stores it as I64 absolute target ids", path)
        tensors[name] = info
        locations[name] = _Location(path, start, start + nbytes, identity)
    _refuse_overlaps(locations, path)
    try:  # the metadata read as a config, bounded as config.json is (eagleconv.support.bounds)
        config = config_from_kv(kv, tensors)
    except EagleconvError as exc:
        raise type(exc)(exc.message, exc.path or path, exc.code) from None
    for name, info in tensors.items():
        for template, key in ROPE_ROWS.items():
            if _template_match(name, template):
                heads = kv.get(key.format(arch=arch))
                shape = info.shape
                if not isinstance(heads, int) or heads <= 0 or len(shape) != 2 or shape[0] % (2 * heads):
                    raise FormatError(f"{name}: shape {list(shape)} does not split into {key.format(arch=arch)} = "
                                      f"{heads!r} heads of an even size", path)
                rope_heads[name] = heads
    metadata = {f"gguf:{k}": v for k, v in counts.items()}
    notes = ["d2t read from llama.cpp's absolute target ids (d2t + arange) as offsets"] if ABSOLUTE_IDS in tensors else []
    if rope_heads:
        notes.append("attn_q/attn_k rows read back from llama.cpp's rotary order into Hugging Face's")
    return GgufCheckpoint(path, config, "gguf", [path.name], tensors, locations, metadata, notes,
                          rope_heads=rope_heads, kv=kv)


def open_if_gguf(path: Path) -> GgufCheckpoint | None:
    """``io.reader.open_checkpoint``'s ``open_file``: a GGUF drafter opened, None for a file of any other kind."""
    return open_gguf(path) if is_gguf(path) else None


__all__ = ["GgufCheckpoint", "GgufHeader", "absolute_ids", "copy_rope_rows", "copy_rope_rows_kernel", "is_gguf",
           "open_gguf", "open_if_gguf", "read_header", "rope_rows"]
