"""An on-disk checkpoint's tensor bytes: pread from the very file a header came from, or a kernel copy.

Split from ``io/reader.py`` (issue 26).  :class:`Checkpoint` is what :func:`~eagleconv.io.reader.open_checkpoint`
returns; it holds at most one weight file open, refuses a file renamed, replaced or rewritten since its
header was read, and copies tensor bytes file to file with copy_file_range/sendfile so they never enter
Python (:func:`copy_range`).
"""

from __future__ import annotations

import errno as _errno
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UnsafeInputError
from .dtypes import DTYPE_SIZES, raw_numpy_dtype
from .durable import write_all
from .tensor_store import CHUNK_BYTES, TensorInfo, TensorStore

if TYPE_CHECKING:
    import numpy as np

    from .state_dict import StateDictTensors

@dataclass(frozen=True)
class _Location:
    path: Path
    start: int
    end: int
    identity: tuple[int, ...] | None = None  # _identity() of the file whose header gave start/end


def _identity(file: Path | int, shown: Path) -> tuple[int, ...]:
    """Which file (a path or an open fd), and which version: one renamed, replaced or rewritten since differs."""
    try:
        st = os.stat(file)
    except OSError:  # resolve_inside (or the open) found it a moment ago
        raise UnsafeInputError(_SWAPPED, shown) from None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


_SWAPPED = "changed while being read: renamed, replaced or rewritten since its header was read"


class Checkpoint(TensorStore):
    """A drafter checkpoint directory: config.json plus weights.

    Construction validates every header (and the index against the headers)
    but reads no tensor data.  At most one weight file is open at a time.
    """

    def __init__(self, directory: Path, config: dict[str, Any] | None, weights_kind: str,
                 files: list[str], tensors: dict[str, TensorInfo], locations: dict[str, _Location],
                 metadata: dict[str, str], notes: list[str], memory: StateDictTensors | None = None):
        self.path = directory
        self.config = config
        self.weights_kind = weights_kind
        self.files = files
        self.tensors = tensors
        self.metadata = metadata
        self.notes = notes
        self._locations = locations
        self._memory = memory  # pickle checkpoints are loaded whole, under --allow-pickle only
        self._fd: int | None = None
        self._fd_path: Path | None = None

    @property
    def label(self) -> str:
        """How reports name this checkpoint: its directory (a header-only Hub read: hf://ORG/NAME@COMMIT)."""
        return str(self.path)

    @property
    def in_memory(self) -> bool:
        """Whether the tensors are held in memory (a pickle, a state dict), not read from their files."""
        return self._memory is not None

    # -- raw access ---------------------------------------------------------
    def _fd_for(self, loc: _Location) -> int:
        """The open shard ``loc`` is in: the very file its header came from, or UnsafeInputError naming it."""
        if self._fd_path != loc.path:
            self.close()
            try:
                fd = os.open(loc.path, os.O_RDONLY)
            except (FileNotFoundError, NotADirectoryError):
                raise UnsafeInputError(_SWAPPED, loc.path) from None
            if loc.identity is not None and _identity(fd, loc.path) != loc.identity:
                os.close(fd)
                raise UnsafeInputError(_SWAPPED, loc.path)
            self._fd, self._fd_path = fd, loc.path
            advise_sequential(fd)
        assert self._fd is not None
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._fd_path = None, None

    def _pread_exact(self, fd: int, size: int, offset: int, path: Path) -> bytes:
        data = os.pread(fd, size, offset)
        if len(data) != size:
            raise UnsafeInputError(f"file shrank while reading ({len(data)} of {size} bytes)", path)
        return data

    def read_bytes(self, name: str) -> bytes:
        if self._memory is not None:
            return self._memory.read_bytes(name)
        loc = self._locations[name]
        return self._pread_exact(self._fd_for(loc), loc.end - loc.start, loc.start, loc.path)

    def read_range(self, name: str, offset: int, size: int) -> bytes:
        """``size`` of the tensor's stored bytes from ``offset`` (streaming a tensor in blocks)."""
        if self._memory is not None:
            return self._memory.read_bytes(name)[offset:offset + size]
        loc = self._locations[name]
        if offset < 0 or offset + size > loc.end - loc.start:
            raise ValueError(f"range {offset}+{size} outside tensor {name!r}")
        return self._pread_exact(self._fd_for(loc), size, loc.start + offset, loc.path)

    def copy_range_into(self, name: str, offset: int, size: int, out_fd: int) -> None:
        """Append ``size`` of the tensor's stored bytes from ``offset`` to ``out_fd`` (a kernel copy from a file)."""
        if self._memory is not None:
            write_all(out_fd, self.read_range(name, offset, size))
            return
        loc = self._locations[name]
        if offset < 0 or offset + size > loc.end - loc.start:
            raise ValueError(f"range {offset}+{size} outside tensor {name!r}")
        copy_range(self._fd_for(loc), loc.start + offset, size, out_fd, loc.path)

    def iter_raw_chunks(self, name: str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[np.ndarray]:
        if self._memory is not None:
            yield from self._memory.iter_raw_chunks(name, chunk_bytes)
            return
        import numpy as np

        info, loc = self.tensors[name], self._locations[name]
        itemsize = DTYPE_SIZES[info.dtype]
        step = max(itemsize, chunk_bytes - chunk_bytes % itemsize)
        buffer = bytearray(min(step, loc.end - loc.start))
        fd = self._fd_for(loc)
        offset = loc.start
        while offset < loc.end:
            size = min(step, loc.end - offset)
            view = memoryview(buffer)[:size]
            got = os.preadv(fd, [view], offset)
            if got != size:
                raise UnsafeInputError(f"file shrank while reading ({got} of {size} bytes)", loc.path)
            yield np.frombuffer(view, dtype=raw_numpy_dtype(info.dtype))
            offset += size

    def copy_into(self, name: str, out_fd: int) -> None:
        if self._memory is not None:
            self._memory.copy_into(name, out_fd)
            return
        loc = self._locations[name]
        copy_range(self._fd_for(loc), loc.start, loc.end - loc.start, out_fd, loc.path)


def advise_sequential(fd: int) -> None:
    """Tell the kernel a file is read front to back (doubles readahead, as ``cp`` does).

    Tensors are read in offset order or close to it; on a cold page cache this
    roughly halves the time copy_file_range spends waiting for reads.  Advisory
    only: ignored where unsupported.
    """
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        try:
            advise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        except OSError:
            pass


def copy_range(src_fd: int, offset: int, count: int, out_fd: int, src_path: Path) -> None:
    """Copy ``count`` bytes from ``src_fd`` at ``offset`` to the current position of ``out_fd``.

    Uses the kernel (copy_file_range, then sendfile) so the bytes never enter
    Python; falls back to a bounded pread/write loop.
    """
    remaining = count
    for copier in (_copy_file_range, _sendfile):
        try:
            while remaining:
                done = copier(src_fd, offset, remaining, out_fd)
                if done == 0:
                    raise UnsafeInputError("file shrank while copying", src_path)
                offset += done
                remaining -= done
            return
        except (OSError, AttributeError) as exc:
            if isinstance(exc, OSError) and exc.errno not in _FALLBACK_ERRNOS:
                raise
    while remaining:
        data = os.pread(src_fd, min(remaining, CHUNK_BYTES), offset)
        if not data:
            raise UnsafeInputError("file shrank while copying", src_path)
        os.write(out_fd, data)
        offset += len(data)
        remaining -= len(data)


def _copy_file_range(src_fd: int, offset: int, count: int, out_fd: int) -> int:
    return os.copy_file_range(src_fd, out_fd, min(count, 1 << 30), offset)


def _sendfile(src_fd: int, offset: int, count: int, out_fd: int) -> int:
    return os.sendfile(out_fd, src_fd, offset, min(count, 1 << 30))



_FALLBACK_ERRNOS = {_errno.EXDEV, _errno.ENOSYS, _errno.EOPNOTSUPP, _errno.EINVAL, _errno.EBADF, _errno.ENOTSUP}
