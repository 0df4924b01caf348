"""Snapshots through huggingface_hub's cache, and ``hf://`` paths resolved to a verified snapshot."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import UsageError
from ..io.hub_paths import HubRef, check_repo_id, check_revision, parse_hf_url
from ._base import DOWNLOADING, HubError, Step, _cache_dir, _endpoint, _hub_error, offline
from ._manifest import verify_manifest
from ._timeouts import hub_timeouts, server_failure
from ._transfer import _quiet_tqdm


def download(ref: HubRef, *, endpoint: str | None = None, token: str | bool | None = None,
             timeout: float | None = None, progress: Step | None = None) -> tuple[Path, str | None]:
    """Snapshot ``ref`` through huggingface_hub's cache; (snapshot dir, commit).  Honours HF_HUB_OFFLINE.

    huggingface_hub's own bars are never drawn (they went to stderr even through a pipe); the bytes it
    writes to the cache go to ``progress`` as the DOWNLOADING step instead.
    """
    from huggingface_hub import snapshot_download

    check_repo_id(ref.repo_id)
    if ref.revision is not None:
        check_revision(ref.revision)
    where = f"hf://{ref.repo_id}" + (f"@{ref.revision}" if ref.revision else "")
    local_only = offline()
    try:
        with hub_timeouts(timeout):
            path = Path(snapshot_download(ref.repo_id, revision=ref.revision, repo_type="model",
                                          cache_dir=_cache_dir(), endpoint=_endpoint(endpoint), token=token,
                                          local_files_only=local_only, tqdm_class=_quiet_tqdm(progress)))
    except UsageError:
        raise
    except Exception as exc:
        if local_only:
            raise HubError("HF_HUB_OFFLINE is set and this repository (revision) is not in the Hugging Face cache",
                           where) from exc
        failure = server_failure()
        if failure is not None and not isinstance(exc, HubError):  # not huggingface_hub's "check your connection"
            raise HubError(f"download failed: the Hub answered {failure}", where) from exc
        raise _hub_error(exc, "download failed", where) from exc
    if progress is not None:  # complete: also where nothing was fetched (cached) or the hub names no bytes bar
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        progress(DOWNLOADING, size, size)
    return path, path.name if re.fullmatch(r"[0-9a-f]{40}", path.name) else None


def fetch_verified(path: str) -> Path:
    """``hf://ORG/NAME[@REV]`` -> its cache snapshot, downloaded (or cached) and checked against its manifest."""
    snapshot, _ = download(parse_hf_url(path))
    verify_manifest(snapshot)
    return snapshot
