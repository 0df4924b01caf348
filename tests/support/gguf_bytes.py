"""GGUF files written byte by byte, for the hostile ones gguf's own GGUFWriter will not make (duplicate or
overlapping tensors, a BOOL alignment) and sparse ones whose bomb is a size (:class:`Hole`: an array stated in its
header and left as a hole in the file, so 3e8 elements cost no disk)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagleconv.gguf.gguf_file import read_header

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
UINT8, UINT32, INT32, FLOAT32, BOOL, UINT64 = 0, 4, 5, 6, 7, 10


@dataclass
class Hole:
    """An array of ``count`` elements of type ``sub`` whose bytes are a hole (zeros) in a sparse file."""

    count: int
    sub: int = UINT8


@dataclass
class Gguf:
    """A GGUF's parts: kv maps key -> (type, element type, value); tensors are (name, GGML type, ne, offset)."""

    kv: dict[str, tuple[int, int | None, Any]]
    tensors: list[tuple[str, int, tuple[int, ...], int]]
    data: bytes = field(repr=False)
    alignment: int = 32
    extra: list[tuple[str, tuple[int, int | None, Any]]] = field(default_factory=list)  # appended, even if repeated

    def __repr__(self) -> str:  # the keys and tensors a failing input changed, not megabytes of data
        kv = {k: (t, s, v if not isinstance(v, list) or len(v) < 8 else f"<{len(v)} items>")
              for k, (t, s, v) in self.kv.items()}
        return f"Gguf(kv={kv!r}, tensors={self.tensors!r}, extra={self.extra!r})"

    @classmethod
    def read(cls, path: Path) -> Gguf:
        header = read_header(path)
        return cls(dict(header.kv), list(header.tensors), Path(path).read_bytes()[header.data_start:])

    def set(self, key: str, vtype: int, value: Any, sub: int | None = None) -> Gguf:
        self.kv[key] = (vtype, sub, value)
        return self

    def write(self, path: Path) -> Path:
        with open(path, "wb") as f:
            items = [*self.kv.items(), *self.extra]
            f.write(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(items)))
            for key, (vtype, sub, value) in items:
                _string(f, key)
                f.write(struct.pack("<I", vtype))
                _value(f, vtype, sub, value)
            for name, ggml, ne, offset in self.tensors:
                _string(f, name)
                f.write(struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", ggml, offset))
            f.write(b"\0" * (-f.tell() % self.alignment))
            f.write(self.data)
        return path


def _string(f: Any, text: str | bytes) -> None:
    raw = text.encode() if isinstance(text, str) else text
    f.write(struct.pack("<Q", len(raw)) + raw)


def _value(f: Any, vtype: int, sub: int | None, value: Any) -> None:
    if vtype in SCALARS:
        f.write(struct.pack(SCALARS[vtype], value))
    elif vtype == STRING:
        _string(f, value)
    elif isinstance(value, Hole):
        f.write(struct.pack("<IQ", value.sub, value.count))
        f.seek(value.count * struct.calcsize(SCALARS[value.sub]), 1)  # a hole: the file stays sparse
    else:
        assert sub is not None
        f.write(struct.pack("<IQ", sub, len(value)))
        if sub == STRING:
            raw = [t.encode() if isinstance(t, str) else t for t in value]
            f.write(b"".join(struct.pack("<Q", len(r)) + r for r in raw))
        elif sub in SCALARS:
            f.write(struct.pack(f"<{len(value)}{SCALARS[sub][1]}", *value))
        else:
            for item in value:
                _value(f, sub, None, item)
