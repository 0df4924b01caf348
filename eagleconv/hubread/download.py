"""Snapshots through huggingface_hub's cache, and ``hf://`` paths resolved to a verified snapshot."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..io.hub_paths import HubRef, check_repo_id, check_revision, is_hf_url, parse_hf_url
from .base import DOWNLOADING, HubError, Step, hub_cache_dir, hub_endpoint, hub_error, offline
from .manifest import verify_manifest
from .timeouts import hub_timeouts, server_failure


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
                                          cache_dir=hub_cache_dir(), endpoint=hub_endpoint(endpoint), token=token,
                                          local_files_only=local_only, tqdm_class=quiet_tqdm(progress)))
    except UsageError:
        raise
    except Exception as exc:
        if local_only:
            raise HubError("HF_HUB_OFFLINE is set and this repository (revision) is not in the Hugging Face cache",
                           where) from exc
        failure = server_failure()
        if failure is not None and not isinstance(exc, HubError):  # not huggingface_hub's "check your connection"
            raise HubError(f"download failed: the Hub answered {failure}", where) from exc
        raise hub_error(exc, "download failed", where) from exc
    if progress is not None:  # complete: also where nothing was fetched (cached) or the hub names no bytes bar
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        progress(DOWNLOADING, size, size)
    return path, path.name if re.fullmatch(r"[0-9a-f]{40}", path.name) else None


def fetch_verified(path: str) -> Path:
    """``hf://ORG/NAME[@REV]`` -> its cache snapshot, downloaded (or cached) and checked against its manifest."""
    snapshot, _ = download(parse_hf_url(path))
    verify_manifest(snapshot)
    return snapshot


def local_path(path: str | Path) -> Path:
    """``hf://ORG/NAME[@REV]`` -> the verified cache snapshot; any other path is returned as a local Path."""
    if not is_hf_url(path):
        return Path(path)
    return fetch_verified(str(path))


def quiet_tqdm(progress: Step | None) -> Any:
    """A tqdm class for snapshot_download that draws nothing and reports its bytes bar to ``progress``.

    snapshot_download makes three: files fetched, bytes received, and bytes written to the cache
    ("Reconstructing ...", the total growing as each file starts); the last one is DOWNLOADING.  The bars
    run as usual (huggingface_hub reads their counts and rates) but write into a sink.
    """
    import io

    from tqdm.auto import tqdm  # type: ignore[import-untyped]

    class Sink(io.TextIOBase):
        def write(self, text: str) -> int:
            return len(text)

    class Quiet(tqdm):
        def __init__(self, *args: Any, **kwargs: Any):
            self.reports = progress is not None and str(kwargs.get("desc", "")).startswith("Reconstructing")
            super().__init__(*args, **{**kwargs, "file": Sink(), "disable": False, "ncols": 80})

        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            if self.reports and progress is not None:
                done = int(self.n)
                progress(DOWNLOADING, done, max(int(self.total or 0), done))
            return shown

    return Quiet
