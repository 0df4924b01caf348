"""Staging names that say who owns them, and recovery after a crash.

Split from ``io/staging.py`` (issue 26).  A staging directory
(``.NAME.eagleconv-HOST-PID-START-RAND.partial``) and the previous output set
aside during a non-atomic --overwrite (``...RAND.old``) carry their owner in
the name: a hash of the host name, the process id and the process start time
(``/proc/PID/stat`` field 22, in clock ticks since boot).  A later run removes
such an entry only when it is certain the owner is dead: same host, and no
process with that pid, or one with a different start time (the pid was
reused).  A live owner's staging, another host's (a shared filesystem), and
names without an owner (eagleconv 0.1.0's ``.NAME.eagleconv-XXXXXXXX.partial``)
are left alone and reported.  Every write cleans the dead owners' debris of
*every* name in its parent directory (:func:`clean_dead_debris`), so a retry
under another name does not leave a killed run's gigabytes behind.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

from .durable import rename_noreplace

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
