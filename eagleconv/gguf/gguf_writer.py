"""Writing llama.cpp's GGUF: staged, atomic, streamed (the single-file twin of io.writer).

``gguf.GGUFWriter`` writes the header, the metadata and the tensor table (its public API; typed arrays packed in
one pass, :func:`_writer_class`), then each tensor's bytes are appended here at the offsets the table states
(kernel copies where the dtype is kept), in a staging file published by one rename (:class:`StagedFile`).
The gguf writer would otherwise hold every tensor in memory until the end.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .gguf_file import DTYPE_TO_GGML, is_gguf
from ..io.durable import fsync_file
from ..io.staging import StagedDirectory
from ..io.writer import OutputTensor

if TYPE_CHECKING:
    import gguf

class StagedFile(StagedDirectory):
    """:class:`StagedDirectory`'s staging, publishing and clean-up for one file (a ``.gguf``).

    --overwrite replaces only a file that is a GGUF by its magic; an existing directory is refused.
    """

    def _check_replaceable(self) -> None:
        if not is_gguf(self.destination):
            raise UsageError("destination exists and is not a GGUF file; --overwrite replaces only a GGUF file",
                             self.shown)

    def __enter__(self) -> Path:
        try:
            from ..io.debris import staging_name
            from ..io.durable import make_parents

            self._created = make_parents(self.destination.parent)
            path = self.destination.parent / staging_name(self.destination, "partial")
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            self.path = path
        except BaseException as exc:  # noqa: BLE001 - _fail removes the staging file and re-raises
            self._fail(exc)
        return path

    def _publish(self) -> None:
        assert self.path is not None
        if self.durable:
            fsync_file(self.path)
        durable, self.durable = self.durable, False  # StagedDirectory would fsync the staging path as a directory
        try:
            super()._publish()
        finally:
            self.durable = durable
        if durable:
            from ..io.durable import fsync_dir

            fsync_dir(self.destination.parent)


# One tensor to write is what the safetensors writer takes: name, dtype (safetensors name), row-major shape,
# size, and a writer appending exactly ``nbytes`` bytes to the fd.
GgufTensor = OutputTensor


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: object  # what gguf.GGUFWriter.add_key_value packs as ``type``
    type: gguf.GGUFValueType
    sub_type: gguf.GGUFValueType | None = None  # an array's element type


def _writer_class() -> type[gguf.GGUFWriter]:
    """gguf.GGUFWriter, packing typed arrays in one pass (its own loop packs 10^5 tokens one call at a time: 1.7 s)."""
    import struct

    import gguf
    import numpy as np

    V = gguf.GGUFValueType
    numeric = {V.UINT8: "<u1", V.INT8: "<i1", V.UINT16: "<u2", V.INT16: "<i2", V.UINT32: "<u4", V.INT32: "<i4",
               V.FLOAT32: "<f4", V.UINT64: "<u8", V.INT64: "<i8", V.FLOAT64: "<f8", V.BOOL: "|b1"}

    class Writer(gguf.GGUFWriter):
        def _pack_val(self, val: Any, vtype: gguf.GGUFValueType, add_vtype: bool,
                      sub_type: gguf.GGUFValueType | None = None) -> bytes:
            if vtype != V.ARRAY or sub_type is None or not len(val) or self.endianess != gguf.GGUFEndian.LITTLE:
                return bytes(super()._pack_val(val, vtype, add_vtype, sub_type))
            head = (struct.pack("<I", vtype) if add_vtype else b"") + struct.pack("<IQ", sub_type, len(val))
            if sub_type in numeric:
                return head + np.asarray(val, dtype=numeric[sub_type]).tobytes()
            if sub_type == V.STRING:
                encoded = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in val]
                pack = struct.Struct("<Q").pack
                return head + b"".join(pack(len(e)) + e for e in encoded)
            return bytes(super()._pack_val(val, vtype, add_vtype, sub_type))
    return Writer


def header_writer(arch: str, kv: Sequence[KeyValue], tensors: Sequence[GgufTensor]) -> gguf.GGUFWriter:
    """A ``gguf.GGUFWriter`` holding the metadata and the tensor table (no data), in this order."""
    import gguf
    import numpy as np

    writer = _writer_class()(None, arch)
    for item in kv:
        if item.key != gguf.Keys.General.ARCHITECTURE:
            writer.add_key_value(item.key, item.value, item.type, item.sub_type)
    for t in tensors:
        writer.add_tensor_info(t.name, t.shape, np.dtype(np.float32), t.nbytes,
                               raw_dtype=gguf.GGMLQuantizationType[DTYPE_TO_GGML[t.dtype]])
    return writer


def write_gguf(staged_file: StagedFile, writer: gguf.GGUFWriter, tensors: Sequence[GgufTensor], *,
               on_bytes: Callable[[int], None] | None = None,
               verify: Callable[[Path], None] | None = None,
               check_values: Callable[[Any, Any], None] | None = None) -> int:
    """Write the GGUF file at ``staged_file``'s destination (published by one rename); returns its size.

    ``writer``: from :func:`header_writer`.  ``check_values(tensor, scan)``: each float tensor's NaN/Inf scan,
    read back from the staged file on a helper thread while the next is copied (as the safetensors writer
    does); ``verify(staged)`` runs before publishing.  Raising in either publishes nothing.
    """
    from ..io.writer import WRITEBACK, _prefetch_numpy, _Scanner, _Writeback, write_tensors

    with staged_file as staged:
        writer.write_header_to_file(path=staged)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        writer.close()
        alignment = writer.data_alignment
        fd = os.open(staged, os.O_RDWR)  # not O_APPEND: copy_file_range refuses such an fd
        scanner = _Scanner(fd, check_values) if check_values is not None else None
        # As the safetensors writer: start writeback of each large tensor as soon as it is written, on a helper
        # thread, so the closing fsync waits only for the tail.
        writeback = _Writeback(WRITEBACK if staged_file.durable else "off")
        if check_values is not None:
            _prefetch_numpy()
        try:
            position = write_tensors(fd, tensors, os.lseek(fd, 0, os.SEEK_END), writeback, scanner, on_bytes,
                                     alignment=alignment, shown=staged.name)
        finally:
            if scanner is not None:
                scanner.close()  # no scan may outlive the fd
            writeback.drain()
            writeback.close()
            os.close(fd)
        if verify is not None:
            verify(staged)
    return position



__all__ = ["GgufTensor", "KeyValue", "StagedFile", "header_writer", "write_gguf"]
