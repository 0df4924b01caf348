"""Staging: the one way eagleconv builds an output, in an owned sibling published by one rename.

:class:`StagedDirectory` builds a directory in a staging sibling, published by
one rename; on failure nothing is left (not the parent directories it created
either), and an OSError becomes one line that names the destination
(:class:`~eagleconv.errors.DestinationError`).  :func:`write_file_atomically`
is its single-file twin.

The pieces it is built from live beside it, one job to a module (issue 26):
owned staging names and crash recovery (:mod:`~eagleconv.io.debris`), what
--overwrite may replace (:mod:`~eagleconv.io.replaceable`), and the durable
filesystem primitives (:mod:`~eagleconv.io.durable`); each name is imported
from the module that defines it.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import NoReturn

from ..support._process import termination_signals_blocked
from ..errors import DestinationError, EagleconvError, UsageError
from .debris import clean_dead_debris, remove_tree, staging_name
from .durable import exchange, fsync_dir, make_parents, remove_parents, rename_noreplace, write_new_file
from .replaceable import Recognise, check_replaceable

_STAGED = re.compile(r"^\..+\.eagleconv-[0-9a-f-]+\.(?:partial|old)$")


def write_file_atomically(path: str | Path, chunks: Iterable[bytes | memoryview], *, what: str,
                          overwrite: bool = False, durable: bool = True) -> Path:
    """Publish one file whole or not at all: the single-file twin of :class:`StagedDirectory`.

    ``chunks`` go to an owned staging sibling (:func:`staging_name`, so a killed run's file is cleaned like a
    killed conversion's), fsynced, then renamed to ``path`` and the parent fsynced.  Without ``overwrite`` an
    existing ``path`` is refused (UsageError), also one that appears meanwhile; with it the old file is
    replaced in one rename.  On any failure the staging file is gone and ``path`` is as it was; an OSError
    is one DestinationError naming ``path`` ("cannot write ``what``: ..."). The parent must exist.
    """
    from ..support._process import termination_signals_blocked

    path = Path(path)
    if os.path.lexists(path) and not overwrite:
        raise UsageError(f"{what} already exists (pass overwrite=True to replace it)", path)
    staged = path.absolute().parent / staging_name(path, "partial")
    try:
        write_new_file(staged, chunks, durable=durable)
        with termination_signals_blocked():
            if overwrite:
                os.replace(staged, path)
            else:
                rename_noreplace(staged, path)
            if durable:
                fsync_dir(path.absolute().parent)
    except FileExistsError:
        raise UsageError(f"{what} appeared while writing; not replacing it", path) from None
    except OSError as exc:
        raise DestinationError(f"cannot write {what}: {exc.strerror or exc}; nothing was written", path,
                               exc.errno) from None
    finally:
        staged.unlink(missing_ok=True)  # (gone already when the rename succeeded)
    return path


def _bytes(n: int) -> str:
    return f"{n:,} bytes"


class StagedDirectory:
    """A directory built under an owned sibling name and published at its destination by one rename.

    ::

        staged = StagedDirectory(dest, overwrite=False)  # refuses an existing DEST; cleans dead debris
        with staged as path:                             # creates missing parents, then the staging directory
            (path / "config.json").write_text(...)
        # on leaving the block normally: published at DEST (atomically; --overwrite swaps)
        # on an exception: the staging directory and the parents it created are gone, DEST is untouched

    Construction refuses an existing destination (UsageError) unless
    ``overwrite`` and :func:`check_replaceable` allow it (``recognise``, which
    ``overwrite`` needs, says whether it is a drafter checkpoint by content), or
    it is the current directory.  ``notes``: what was cleaned up beside it.  ``size``: the bytes
    the output needs, if known, for the message on a full disk.  Every OSError
    about the destination (its parents, the staging directory, the renames, a
    write with no file name: full disk, read-only, busy, permission) becomes a
    :class:`~eagleconv.errors.DestinationError` naming the destination; an
    EagleconvError naming a staged file is re-aimed at the destination (the
    staged file is gone by then).  ``durable=False`` skips the fsyncs of the
    staging directory and the parent.
    """

    def __init__(self, destination: str | Path, *, overwrite: bool = False, recognise: Recognise | None = None,
                 durable: bool = True):
        self.destination = Path(os.path.abspath(destination))
        self.shown = Path(destination) if Path(destination).name not in ("", "..") else self.destination
        self.overwrite, self.recognise, self.durable = overwrite, recognise, durable
        self.size: int | None = None
        self.path: Path | None = None
        self._created: list[Path] = []
        self._set_aside: Path | None = None
        try:
            # What killed runs left in the parent goes first (a set-aside previous output is put back).
            self.notes = clean_dead_debris(self.destination.parent)
            if os.path.lexists(self.destination):
                if not overwrite:
                    raise UsageError("destination already exists (pass --overwrite to replace it)", self.shown)
                self._check_replaceable()
        except BaseException as exc:
            aimed = self._aimed(exc)
            if aimed is exc:
                raise
            raise aimed from exc

    def _check_replaceable(self) -> None:
        try:
            in_use = os.path.samefile(self.destination, os.getcwd())
        except OSError:
            in_use = False
        if in_use:
            raise DestinationError("destination is the current directory, which a rename cannot replace while it "
                                   "is in use (busy); write elsewhere or run from another directory, nothing was "
                                   "deleted", self.shown, errno.EBUSY)
        if self.recognise is None:
            raise TypeError("StagedDirectory(overwrite=True) needs recognise: what says the destination is a "
                            "checkpoint")
        check_replaceable(self.destination, self.recognise, self.shown)

    def __enter__(self) -> Path:
        try:
            self._created = make_parents(self.destination.parent)
            path = self.destination.parent / staging_name(self.destination, "partial")
            path.mkdir()
            self.path = path
        except BaseException as exc:  # noqa: BLE001 - _fail removes what was staged and re-raises
            self._fail(exc)
        return path

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            try:
                self._publish()
            except BaseException as failed:  # noqa: BLE001 - _fail removes what was staged and re-raises
                self._fail(failed)
            return
        self._discard()
        aimed = self._aimed(exc)
        if aimed is not exc:
            raise aimed from exc
        # otherwise the original exception propagates unchanged

    def _fail(self, exc: BaseException) -> NoReturn:
        """Remove what was staged, then raise ``exc``, aimed at the destination when it named a staging path."""
        self._discard()
        aimed = self._aimed(exc)
        if aimed is exc:
            raise exc
        raise aimed from exc

    def publish(self, staging: Path) -> None:
        """Publish a staging directory the caller made and filled itself (``staging_name`` beside the destination).

        For code that predates the ``with`` form (``hub.pull``): the same
        checks, swap and error messages; the caller still removes ``staging`` on failure.
        """
        self.path = Path(os.path.abspath(staging))
        try:
            self._publish()
        except BaseException as exc:
            self.path = None
            aimed = self._aimed(exc)
            if aimed is exc:
                raise
            raise aimed from exc

    def _publish(self) -> None:
        """Move the complete staging directory into place; the previous output is never lost.

        With --overwrite the two directories are swapped in one atomic
        renameat2(RENAME_EXCHANGE), after which the staging name holds the old
        output and is removed.  Where that is unsupported, the old output is
        renamed aside under an owned ``.old`` name first; a crash between the two
        renames leaves it there and the next run renames it back (``recover``).
        SIGINT/SIGTERM/SIGHUP are held during the swap.
        """
        assert self.path is not None, "publish outside the with block"
        staging, parent = self.path, self.path.parent
        if self.durable:
            fsync_dir(staging)
        with termination_signals_blocked():
            if not os.path.lexists(self.destination):
                try:
                    rename_noreplace(staging, self.destination)
                except FileExistsError:
                    raise UsageError("destination appeared while writing; not replacing it", self.shown) from None
            else:
                if not self.overwrite:
                    raise UsageError("destination appeared while writing; not replacing it", self.shown)
                self._check_replaceable()
                if not exchange(staging, self.destination):
                    self._set_aside = parent / staging_name(self.destination, "old")
                    os.rename(self.destination, self._set_aside)
                    try:
                        os.rename(staging, self.destination)
                    except BaseException:
                        os.rename(self._set_aside, self.destination)
                        self._set_aside = None
                        raise
            if self.durable:
                fsync_dir(parent)
        # The old output (now under the staging name, or set aside) goes last, outside the held signals.
        remove_tree(staging)
        if self._set_aside is not None:
            remove_tree(self._set_aside)
            self._set_aside = None
        self.path, self._created = None, []

    def _discard(self) -> None:
        """Remove what this run made: the staging directory, a set-aside output already replaced, new parents."""
        if self.path is not None:
            remove_tree(self.path)
            self.path = None
        if self._set_aside is not None and os.path.lexists(self.destination):
            remove_tree(self._set_aside)
            self._set_aside = None
        if not os.path.lexists(self.destination):
            remove_parents(self._created)
        self._created = []

    def _ours(self, name: str | bytes | None) -> bool:
        """Whether an OSError's file name is the destination, its parents, or a sibling this run made."""
        if name is None:
            return False
        path = Path(os.path.abspath(os.fsdecode(name)))
        return (path == self.destination or self.destination.is_relative_to(path)
                or (path.parent == self.destination.parent and ".eagleconv-" in path.name)
                or (self.path is not None and path.is_relative_to(self.path)))

    def _aimed(self, exc: BaseException) -> BaseException:
        """``exc`` as it should reach the user: naming the destination, never a staging path."""
        if isinstance(exc, EagleconvError):
            if exc.path and any(_STAGED.match(part) for part in Path(exc.path).parts):
                self._reaim(exc)
            return exc
        if isinstance(exc, OSError):
            message = self._describe(exc)
            return DestinationError(message, self.shown, exc.errno) if message else exc
        return exc

    def _reaim(self, exc: EagleconvError) -> None:
        """Point an error about a staged file at the destination (the staged file is removed by now)."""
        assert exc.path is not None
        parts = Path(exc.path).parts
        inside = next(i for i, part in enumerate(parts) if _STAGED.match(part))
        rel = Path(*parts[inside + 1:]) if inside + 1 < len(parts) else None
        if rel is not None:
            exc.message = f"the output failed its check before publishing: {rel}: {exc.message}"
        if "nothing was written" not in exc.message:
            exc.message += "; nothing was written"
        exc.path = str(self.shown)
        exc.args = (exc.one_line(),)

    def _describe(self, exc: OSError) -> str | None:
        """One line for an OSError about the destination; None for one about another file (the source)."""
        code, name = exc.errno, exc.filename
        parent = self.destination.parent
        done = "nothing was written" + (", the previous output is unchanged" if self.overwrite
                                        and os.path.lexists(self.destination) else "")
        if code in (errno.ENOSPC, errno.EDQUOT):
            try:
                free = os.statvfs(_existing(parent))
                room = f"{_bytes(free.f_bavail * free.f_frsize)} free"
            except OSError:
                room = "free space unknown"
            need = f"the output needs {_bytes(self.size)}, " if self.size else ""
            what = "no space left on the device" if code == errno.ENOSPC else "disk quota exceeded"
            return f"{what} ({need}{room} in {parent}); {done}"
        if code == errno.EFBIG:
            return f"a file of the output is larger than the file size limit (this process's or the filesystem's); {done}"
        if code == errno.EROFS:
            return f"the filesystem is read-only ({_existing(parent)}); {done}"
        if name is None or not self._ours(name):  # no file name: maybe the source's (an EIO while copying)
            return None
        where = self._place(name)
        if code in (errno.EACCES, errno.EPERM):
            return f"permission denied: cannot create or replace entries in {where}; {done}"
        if code == errno.EBUSY:
            return f"busy: a mount point or a directory in use cannot be replaced by a rename; {done}"
        if code in (errno.ENOTDIR, errno.EEXIST) and name is not None and self.destination.is_relative_to(
                os.path.abspath(os.fsdecode(name))):
            return f"{os.fsdecode(name)} exists and is not a directory; {done}"
        if code is None:  # an OSError without an errno is not the filesystem's word
            return None
        return f"cannot write: {exc.strerror or exc} (in {where}); {done}"

    def _place(self, name: str | bytes | None) -> Path:
        """The directory an OSError is about, as something the user can look at (never a staging path)."""
        if name is None:
            return self.destination.parent
        path = Path(os.path.abspath(os.fsdecode(name)))
        if path == self.destination or ".eagleconv-" in str(path):
            return self.destination.parent
        return path.parent


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
