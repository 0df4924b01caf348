"""Path policy: shard names from index files are untrusted, symlinks must stay home."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path, PureWindowsPath

from ..errors import UnsafeInputError

_SHARD_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def validate_shard_name(name: object, index_file: str | Path, extension: str) -> str:
    """Reject absolute paths, drives, '..', separators and extension mismatches.

    The checks follow huggingface_hub's index validation (names are parsed as
    Windows paths on every OS so 'C:x' and '\\\\server\\share' are caught too).
    """
    if not isinstance(name, str) or not name:
        raise UnsafeInputError(f"shard name {name!r} is not a file name", index_file)
    win = PureWindowsPath(name)
    if win.drive or win.root or ".." in win.parts or "/" in name or "\\" in name:
        raise UnsafeInputError(f"shard name {name!r} must be a plain relative file name", index_file)
    if not name.endswith(extension):
        raise UnsafeInputError(f"shard name {name!r} does not end with {extension}", index_file)
    if not _SHARD_NAME.match(name):
        raise UnsafeInputError(f"shard name {name!r} has characters outside [A-Za-z0-9._-]", index_file)
    return name


def _is_hf_cache_blob(resolved: Path, directory: Path) -> bool:
    """huggingface_hub caches link snapshots/<rev>/file -> ../../blobs/<sha>."""
    parts = directory.parts
    if len(parts) >= 2 and parts[-2] == "snapshots":
        blobs = Path(*parts[:-2]) / "blobs"
        return resolved.parent == blobs.resolve()
    return False


def resolve_path(path: str | Path) -> Path:
    """``Path.resolve()``, with a symlink loop (or an unreadable link) an input error naming ``path``."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError) as exc:  # Python < 3.13 raises RuntimeError for a symlink loop
        raise UnsafeInputError("cannot read: symlink loop" if "loop" in str(exc).lower()
                               else f"cannot read: {getattr(exc, 'strerror', None) or exc}", path) from exc


def resolve_inside(directory: Path, name: str) -> Path:
    """Check that ``directory/name`` is a regular file that resolves inside ``directory``; return it unresolved.

    A symlink is followed only when its target is inside the checkpoint
    directory (or is a blob of the same Hugging Face cache repository).
    """
    candidate = directory / name
    resolved = resolve_path(candidate)
    home = resolve_path(directory)
    if not (resolved.is_relative_to(home) or _is_hf_cache_blob(resolved, directory.absolute())):
        raise UnsafeInputError(f"{name} resolves outside the checkpoint directory (to {resolved})", candidate)
    try:
        mode = os.stat(resolved).st_mode
    except OSError as exc:
        raise UnsafeInputError(f"cannot read: {exc.strerror or exc}", candidate) from exc
    if not stat.S_ISREG(mode):
        raise UnsafeInputError("not a regular file", candidate)
    return candidate  # checked; returned as the user spelled it, so error messages name the path they typed
