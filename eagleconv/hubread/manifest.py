"""MANIFEST.json: the size and sha256 of every published file, written by push and checked by every read."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from .._version import __version__
from ..errors import UnsafeInputError
from ..support.jsonio import load_json
from .base import HASH_CHUNK, LENIENT, MANIFEST, MANIFEST_FORMAT, ManifestEntry


def hash_file(path: Path, on_bytes: Callable[[int], None] | None = None) -> tuple[str, str]:
    """(sha256, git blob sha1) of a file, streamed."""
    size = path.stat().st_size
    sha256 = hashlib.sha256()
    git = hashlib.sha1(f"blob {size}\0".encode())  # noqa: S324 - git's object id, not a security hash
    with path.open("rb") as fh:
        while chunk := fh.read(HASH_CHUNK):
            sha256.update(chunk)
            git.update(chunk)
            if on_bytes:
                on_bytes(len(chunk))
    return sha256.hexdigest(), git.hexdigest()


def build_manifest(directory: Path, names: Sequence[str],
                   on_bytes: Callable[[int], None] | None = None) -> tuple[list[ManifestEntry], dict[str, str]]:
    """Manifest entries for ``names`` in ``directory`` and their git blob ids (for regular Hub files)."""
    entries, git_ids = [], {}
    for name in sorted(names):
        sha, git = hash_file(directory / name, on_bytes)
        entries.append(ManifestEntry(path=name, size=(directory / name).stat().st_size, sha256=sha))
        git_ids[name] = git
    return entries, git_ids


def manifest_json(entries: Sequence[ManifestEntry]) -> str:
    return json.dumps({"format": MANIFEST_FORMAT, "generator": f"eagleconv {__version__}",
                       "files": [e.model_dump() for e in entries]}, indent=2) + "\n"


def read_manifest(directory: Path) -> list[ManifestEntry] | None:
    path = directory / MANIFEST
    if not path.exists():
        return None
    duplicates: list[str] = []
    data = load_json(path, duplicates=duplicates)
    if duplicates:  # a manifest that says two things about one key is not a manifest (exit 2, as any bad one)
        raise UnsafeInputError(f"{MANIFEST} has duplicate key(s): {', '.join(sorted(set(duplicates)))}", path)
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or not isinstance(data.get("files"), list):
        raise UnsafeInputError(f"not an {MANIFEST_FORMAT} manifest", path)
    try:
        entries = [ManifestEntry.model_validate(e) for e in data["files"]]
    except ValueError as exc:
        raise UnsafeInputError(f"malformed manifest entry: {str(exc).splitlines()[0]}", path) from None
    for e in entries:
        if e.path.startswith(("/", "\\")) or ".." in Path(e.path).parts or e.path == MANIFEST:
            raise UnsafeInputError(f"manifest names {e.path!r}: not a plain path inside the repository", path)
    return entries


def verify_manifest(directory: Path) -> tuple[bool | None, list[str]]:
    """Check every manifest entry against the files (size, then sha256).  (None, []) when there is no manifest.

    Raises UnsafeInputError naming the first mismatch of a checkpoint file;
    a model card edited after publication (or the Hub's .gitattributes) is a note.
    """
    entries = read_manifest(directory)
    if entries is None:
        return None, []
    notes: list[str] = []
    listed = {e.path for e in entries}
    for e in entries:
        path = directory / e.path
        if not path.is_file():
            raise UnsafeInputError(f"{e.path} is listed in {MANIFEST} but absent", directory)
        size = path.stat().st_size
        sha = hash_file(path)[0] if size == e.size else None
        if size != e.size or sha != e.sha256:
            what = f"size {size} != {e.size}" if size != e.size else f"sha256 {sha} != {e.sha256}"
            if e.path in LENIENT:
                notes.append(f"{e.path} differs from {MANIFEST} ({what}): edited after publication")
                continue
            raise UnsafeInputError(f"{e.path} does not match {MANIFEST}: {what}", directory)
    # Every file, at any depth (a repository can hold `scripts/run.sh`), not only the top level.
    extra = sorted(rel for rel in repo_files(directory) if rel not in listed | {MANIFEST} | LENIENT)
    if extra:
        raise UnsafeInputError(f"files not listed in {MANIFEST}: {', '.join(extra)}", directory)
    return True, notes


def repo_files(directory: Path) -> list[str]:
    """Every non-directory entry under ``directory`` (following the cache's blob links), as relative posix paths."""
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if not p.is_dir())
