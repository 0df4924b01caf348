"""``hf://ORG/NAME[@REV]`` paths and Hub ids: parsing only, so the readers can take a Hub path without the hub.

Only ``hf://`` names a Hub repository: a bare ``org/name`` is a local path.  Fetching
the snapshot is ``eagleconv.hubread``'s job (``hubread.download.local_path``), a layer above.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UsageError

HF_SCHEME = "hf://"


_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


# A branch, tag, commit or refs/pr/N: git ref characters only, no `..` (huggingface_hub joins the revision into
# its cache path, so `../..` would write outside the cache), nothing that splits a line.
_REVISION = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*(/[A-Za-z0-9_+-][A-Za-z0-9._+-]*)*")


@dataclass(frozen=True)
class HubRef:
    repo_id: str
    revision: str | None = None


def parse_hf_url(text: str) -> HubRef:
    """``hf://ORG/NAME[@REV]`` -> HubRef.  Anything else is a UsageError."""
    if not text.startswith(HF_SCHEME):
        raise UsageError(f"{text!r} is not an hf://ORG/NAME[@REV] reference")
    body = text[len(HF_SCHEME):]
    repo_id, at, revision = body.partition("@")
    if "/" not in repo_id or not _REPO_ID.fullmatch(repo_id) or ".." in repo_id or (at and not revision):
        raise UsageError(f"{text!r}: expected hf://ORG/NAME or hf://ORG/NAME@REVISION")
    return HubRef(repo_id, check_revision(revision) if revision else None)


def check_revision(revision: str) -> str:
    """A revision as git spells refs (no ``..``, no control characters), else a one-line UsageError."""
    if not _REVISION.fullmatch(revision) or ".." in revision or revision.endswith(".lock"):
        raise UsageError(f"revision {revision!r} is not a branch, tag or commit name (letters, digits, . _ + - /; "
                         "no '..')")
    return revision


def is_hf_url(path: object) -> bool:
    return isinstance(path, str) and path.startswith(HF_SCHEME)


def is_local_path(name: str) -> bool:
    """True for a name that can only be a file-system path, never a Hub id."""
    if name.startswith(("/", "~", "./", "../", "\\")) or name in (".", ".."):
        return True
    if re.match(r"^[A-Za-z]:[\\/]", name) or "\\" in name:
        return True
    return not _REPO_ID.fullmatch(name)


def check_repo_id(repo_id: str) -> str:
    if "/" not in repo_id or not _REPO_ID.fullmatch(repo_id) or ".." in repo_id:
        raise UsageError(f"{repo_id!r} is not a Hub repository id (ORG/NAME)")
    return repo_id



def require_download(path: object, command: str, download: bool) -> None:
    """``hf://`` for a command that needs the weights: refused (UsageError, exit 2, before any request) unless
    ``download`` (the CLI's ``--download``), so a multi-gigabyte snapshot is never fetched unasked."""
    if is_hf_url(path) and not download:
        raise UsageError(f"{command} needs the weights, not just the headers: add --download to download the "
                         "whole snapshot (through the HF cache)", str(path))
