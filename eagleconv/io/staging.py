"""Staging names that say who owns them, recovery after a crash, and what --overwrite may replace.

A staging directory (``.NAME.eagleconv-HOST-PID-START-RAND.partial``) and the
previous output set aside during a non-atomic --overwrite
(``...RAND.old``) carry their owner in the name: a hash of the host name,
the process id and the process start time (``/proc/PID/stat`` field 22, in
clock ticks since boot).  A later run removes such an entry only when it
is certain the owner is dead: same host, and no process with that pid, or
one with a different start time (the pid was reused).  A live owner's
staging, another host's (a shared filesystem), and names without an owner
(eagleconv 0.1.0's ``.NAME.eagleconv-XXXXXXXX.partial``) are left alone and
reported.

--overwrite replaces only a directory that is recognisably a checkpoint:
regular files (or links to them) with the names trainers and the Hub use,
at least one of them a config or weights; an empty directory is fine too.
Anything else (a ``.git``, a notes file, a subdirectory) is refused before
any byte is written.
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
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

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
    """
    notes: list[str] = []
    debris = find_debris(destination)
    dead = [d for d in debris if d.owner_dead]
    olds = sorted((d for d in dead if d.kind == "old"), key=lambda d: d.path.stat().st_mtime, reverse=True)
    if olds and not os.path.lexists(destination):
        os.rename(olds[0].path, destination)
        dead.remove(olds[0])
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


def remove_tree(path: Path) -> None:
    """Remove a staging or set-aside directory (or a stray file of that name)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def check_replaceable(destination: Path) -> None:
    """Raise UsageError (exit 2) unless --overwrite may replace ``destination``; nothing is touched."""
    if destination.is_symlink():
        raise UsageError("destination is a symbolic link; --overwrite replaces only a real checkpoint directory, "
                         "nothing was deleted", destination)
    if not destination.is_dir():
        raise UsageError("destination exists and is not a directory; nothing was deleted", destination)
    entries = sorted(os.scandir(destination), key=lambda e: e.name)
    foreign = [e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in entries
               if not (_CHECKPOINT_FILE.match(e.name) and stat.S_ISREG(e.stat().st_mode))]
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise UsageError(f"destination is not a checkpoint directory (it holds {shown}); --overwrite replaces only "
                         "a checkpoint or an eagleconv output, nothing was deleted", destination)
    if entries and not any(_CORE_FILE.match(e.name) for e in entries):
        raise UsageError("destination has no config.json or weights, so it is not recognisably a checkpoint; "
                         "--overwrite replaces only a checkpoint or an eagleconv output, nothing was deleted",
                         destination)


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
