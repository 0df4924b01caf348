"""Staging directories: names that say who owns them, recovery after a crash, what --overwrite may replace.

A staging directory (``.NAME.eagleconv-HOST-PID-START-RAND.partial``) and the
previous output set aside during a non-atomic --overwrite
(``...RAND.old``) carry their owner in the name: a hash of the host name,
the process id and the process start time (``/proc/PID/stat`` field 22, in
clock ticks since boot).  A later run removes such an entry only when it
is certain the owner is dead: same host, and no process with that pid, or
one with a different start time (the pid was reused).  A live owner's
staging, another host's (a shared filesystem), and names without an owner
(eagleconv 0.1.0's ``.NAME.eagleconv-XXXXXXXX.partial``) are left alone and
reported.  Every write cleans the dead owners' debris of *every* name in its
parent directory (:func:`clean_dead_debris`), so a retry under another name
does not leave a killed run's gigabytes behind.

--overwrite replaces only a directory whose content eagleconv recognises as a
drafter checkpoint (or its own output, which names its layout in config.json):
a drafter config, and weights whose safetensors headers (or index) parse or
that are torch files; nothing but files with the names trainers and the Hub
use.  An empty directory is fine too.  Anything else is refused before any
byte is written.

:class:`StagedDirectory` is the one way eagleconv builds a directory: in a
staging sibling, published by one rename; on failure nothing is left (not the
parent directories it created either), and an OSError becomes one line that
names the destination (:class:`~eagleconv.errors.DestinationError`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import socket
import stat
import uuid
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import NoReturn

from .._process import termination_signals_blocked
from ..errors import DestinationError, EagleconvError, UsageError
from . import hooks

_CHECKPOINT_FILE = re.compile(
    r"^(?:config\.json|generation_config\.json|MANIFEST\.json|README\.md|\.gitattributes"
    r"|[^/]*\.safetensors|[^/]*\.safetensors\.index\.json|[^/]*\.(?:bin|pt|pth)|[^/]*\.bin\.index\.json"
    r"|tokenizer(?:_config)?\.json|tokenizer\.model|special_tokens_map\.json|added_tokens\.json|vocab\.json"
    r"|merges\.txt|chat_template\.jinja)$")
_CORE_FILE = re.compile(r"^(?:config\.json|[^/]*\.safetensors|[^/]*\.(?:bin|pt|pth))$")


def _host_tag() -> str:
    return f"{zlib.crc32(socket.gethostname().encode()):08x}"


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot), '0' where /proc is absent, None if no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "0"
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()[19]


def owner_tag() -> str:
    """``HOST-PID-START`` of this process."""
    return f"{_host_tag()}-{os.getpid()}-{process_start(os.getpid()) or '0'}"


def staging_name(destination: Path, kind: str) -> str:
    """A sibling name for ``destination`` that records its owner; ``kind`` is 'partial' or 'old'."""
    return f".{destination.name}.eagleconv-{owner_tag()}-{uuid.uuid4().hex[:8]}.{kind}"


@dataclass(frozen=True)
class Debris:
    path: Path
    kind: str  # partial | old
    host: str | None
    pid: int | None
    start: str | None

    @property
    def owner_dead(self) -> bool:
        """True only when certain: same host, and the pid is gone or now belongs to another process."""
        if self.host != _host_tag() or self.pid is None:
            return False
        now = process_start(self.pid)
        if now is None:
            return True
        return self.start != "0" and now != "0" and now != self.start


def find_debris(destination: Path) -> list[Debris]:
    """Staging and set-aside entries beside ``destination`` that belong to it, owned or not."""
    parent = destination.absolute().parent
    owned = re.compile(rf"^\.{re.escape(destination.name)}\.eagleconv-([0-9a-f]{{8}})-(\d+)-(\d+)-[0-9a-f]+\.(partial|old)$")
    legacy = re.compile(rf"^\.{re.escape(destination.name)}\.eagleconv-[0-9a-f]{{8}}\.(partial|old)$")
    out = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    for entry in entries:
        m = owned.match(entry.name)
        if m:
            out.append(Debris(Path(entry.path), m.group(4), m.group(1), int(m.group(2)), m.group(3)))
            continue
        m = legacy.match(entry.name)
        if m:
            out.append(Debris(Path(entry.path), m.group(1), None, None, None))
    return sorted(out, key=lambda d: d.path.name)


def recover(destination: Path) -> list[str]:
    """Undo what a dead eagleconv left beside ``destination``; returns notes for the report.

    If the destination is absent and a dead process set the previous output
    aside (an interrupted non-atomic --overwrite), that output is renamed back
    first.  Then every other staging or set-aside entry of a dead owner is removed.
    Another process cleaning the same debris at once is harmless: what it moved first is skipped.
    """
    notes: list[str] = []
    debris = find_debris(destination)
    dead = [d for d in debris if d.owner_dead]
    olds = sorted((d for d in dead if d.kind == "old"), key=lambda d: _mtime(d.path), reverse=True)
    if olds and not os.path.lexists(destination):
        dead.remove(olds[0])  # put back, or (if that fails) left for the next run: never removed here
        try:
            rename_noreplace(olds[0].path, destination)
        except (FileNotFoundError, FileExistsError):
            pass
        else:
            notes.append(f"restored the previous output from {olds[0].path.name} (an interrupted --overwrite, "
                         f"process {olds[0].pid}, had set it aside)")
    for d in dead:
        remove_tree(d.path)
        notes.append(f"removed {d.path.name}, left by process {d.pid}, which is no longer running")
    for d in debris:
        if d.host is None:
            notes.append(f"left {d.path.name} alone: its owner is not recorded (an older eagleconv); "
                         "remove it yourself if no conversion is running")
    return notes


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


_STAGED = re.compile(r"^\..+\.eagleconv-[0-9a-f-]+\.(?:partial|old)$")
_ANY_DEBRIS = re.compile(r"^\.(.+)\.eagleconv-(?:[0-9a-f]{8}-\d+-\d+-[0-9a-f]+|[0-9a-f]{8})\.(?:partial|old)$")


def clean_dead_debris(parent: str | Path) -> list[str]:
    """Clean what dead eagleconv runs left in ``parent``, whatever destination they wrote; returns notes.

    For each NAME with staging or set-aside entries there, what :func:`recover`
    does for ``parent/NAME``: a set-aside previous output whose NAME is absent is
    renamed back, every other entry of a certainly dead owner is removed; live
    owners', other hosts' and unowned entries stay.  A missing or unreadable parent has nothing to clean.
    """
    try:
        entries = os.listdir(parent)
    except OSError:
        return []
    names = sorted({m.group(1) for m in map(_ANY_DEBRIS.match, entries) if m})
    notes: list[str] = []
    for name in names:
        notes += recover(Path(parent) / name)
    return notes


def remove_tree(path: Path) -> None:
    """Remove a staging or set-aside directory (or a stray file of that name)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def check_replaceable(destination: Path, shown: str | Path | None = None) -> None:
    """Raise UsageError (exit 2) unless --overwrite may replace ``destination``; nothing is touched.

    ``shown``: the destination as the user spelled it, for the message.
    """
    shown = destination if shown is None else shown
    if destination.is_symlink():
        raise UsageError("destination is a symbolic link; --overwrite replaces only a real checkpoint directory, "
                         "nothing was deleted", shown)
    if not destination.is_dir():
        raise UsageError("destination exists and is not a directory; nothing was deleted", shown)
    entries = sorted(os.scandir(destination), key=lambda e: e.name)
    foreign = [e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in entries
               if not (_CHECKPOINT_FILE.match(e.name) and stat.S_ISREG(e.stat().st_mode))]
    if foreign:
        shown_names = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise not_a_checkpoint(f"it holds {shown_names}", shown)
    if entries:
        assert hooks.recognise_checkpoint is not None, "eagleconv/__init__.py sets io.hooks.recognise_checkpoint"
        hooks.recognise_checkpoint(destination, [e.name for e in entries], shown)


def not_a_checkpoint(why: str, shown: str | Path) -> UsageError:
    return UsageError(f"destination is not a checkpoint directory ({why}); --overwrite replaces only a drafter "
                      "checkpoint or an eagleconv output, nothing was deleted", shown)


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


def write_file_atomically(path: str | Path, chunks: Iterable[bytes | memoryview], *, what: str,
                          overwrite: bool = False, durable: bool = True) -> Path:
    """Publish one file whole or not at all: the single-file twin of :class:`StagedDirectory`.

    ``chunks`` go to an owned staging sibling (:func:`staging_name`, so a killed run's file is cleaned like a
    killed conversion's), fsynced, then renamed to ``path`` and the parent fsynced.  Without ``overwrite`` an
    existing ``path`` is refused (UsageError), also one that appears meanwhile; with it the old file is
    replaced in one rename.  On any failure the staging file is gone and ``path`` is as it was; an OSError
    is one DestinationError naming ``path`` ("cannot write ``what``: ..."). The parent must exist.
    """
    from .._process import termination_signals_blocked

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
    ``overwrite`` and :func:`check_replaceable` allow it, or it is the current
    directory.  ``notes``: what was cleaned up beside it.  ``size``: the bytes
    the output needs, if known, for the message on a full disk.  Every OSError
    about the destination (its parents, the staging directory, the renames, a
    write with no file name: full disk, read-only, busy, permission) becomes a
    :class:`~eagleconv.errors.DestinationError` naming the destination; an
    EagleconvError naming a staged file is re-aimed at the destination (the
    staged file is gone by then).  ``durable=False`` skips the fsyncs of the
    staging directory and the parent.
    """

    def __init__(self, destination: str | Path, *, overwrite: bool = False, durable: bool = True):
        self.destination = Path(os.path.abspath(destination))
        self.shown = Path(destination) if Path(destination).name not in ("", "..") else self.destination
        self.overwrite, self.durable = overwrite, durable
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
        check_replaceable(self.destination, self.shown)

    def __enter__(self) -> Path:
        try:
            self._created = make_parents(self.destination.parent)
            path = self.destination.parent / staging_name(self.destination, "partial")
            path.mkdir()
            self.path = path
        except BaseException as exc:
            self._fail(exc)
        return path

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            try:
                self._publish()
            except BaseException as failed:
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
