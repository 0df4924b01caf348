"""Filesystem primitives that a crash or a race cannot turn into a half-written or replaced output.

Split from ``io/staging.py`` (issue 26): fsync of files and directories, writes
that create a new file and never truncate one, complete writes to an fd, the
parents a write creates (and takes away again), and renameat2(2)'s two
renames: one that never replaces an existing entry, one that swaps two.
Staging (:mod:`eagleconv.io.staging`) and crash recovery
(:mod:`eagleconv.io.debris`) are built from these.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterable
from pathlib import Path

def make_parents(directory: Path) -> list[Path]:
    """Create ``directory`` and its missing ancestors; return the ones created, deepest first."""
    missing = []
    probe = directory
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    directory.mkdir(parents=True, exist_ok=True)
    return missing


def remove_parents(created: list[Path]) -> None:
    """Remove what :func:`make_parents` created, deepest first, stopping at one that is no longer empty."""
    for directory in created:
        try:
            os.rmdir(directory)
        except OSError:
            return


def fsync_dir(path: Path) -> None:
    """fsync a directory, so the entries renamed or created in it survive a power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str | Path) -> None:
    """fsync a file that was written and closed (Linux flushes through a read-only fd too).

    The one file fsync of eagleconv: the writer's shards, ``hub.pull``'s copies.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        return
    except OSError as exc:
        if exc.errno not in (errno.EBADF, errno.EINVAL):  # platforms that want a writable fd
            raise
    finally:
        os.close(fd)
    fd = os.open(path, os.O_WRONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte of ``data`` to ``fd`` (os.write may write fewer than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_new_file(path: Path, chunks: Iterable[bytes | memoryview], *, durable: bool = True) -> None:
    """Create ``path`` (never over an existing entry), write ``chunks`` in order and, if ``durable``, fsync it.

    For a file inside a staging directory, which the directory's rename publishes; on its own, see
    :func:`write_file_atomically`.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for chunk in chunks:
            write_all(fd, chunk)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2
_AT_FDCWD = -100


def _renameat2(old: Path, new: Path, flags: int) -> bool:
    """renameat2(2) via libc; False where the C library, kernel or filesystem lacks it."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    fn.restype = ctypes.c_int
    if fn(_AT_FDCWD, os.fsencode(old), _AT_FDCWD, os.fsencode(new), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(new))


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directory entries (Linux RENAME_EXCHANGE); False where unsupported."""
    return _renameat2(a, b, _RENAME_EXCHANGE)


def rename_noreplace(old: Path, new: Path) -> None:
    """Rename, failing with FileExistsError if ``new`` exists (even an empty directory, which rename(2) replaces)."""
    if _renameat2(old, new, _RENAME_NOREPLACE):
        return
    if os.path.lexists(new):
        raise FileExistsError(errno.EEXIST, "destination exists", str(new))
    os.rename(old, new)
