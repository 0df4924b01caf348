"""What push and pull share: file names, limits, step names, the Hub's errors and the two reports."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from pydantic import Field

from ..errors import EagleconvError
from ..spec.report import Finding, ValidationReport, _Report
from ._evaluation import CardSummary

MANIFEST = "MANIFEST.json"
CARD = "README.md"
MANIFEST_FORMAT = "eagleconv-manifest/1"
# Files a Hub repository may carry beside the manifest: the Hub creates .gitattributes, and
# model cards are edited on the Hub after publication.
LENIENT = {".gitattributes", CARD}
# Remote files a new push replaces: a stale shard or index beside a new one would make the repo inconsistent.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".index.json")
HASH_CHUNK = 1024 * 1024
# Every Hub request gives up after this long without an answer (connect: at most CONNECT_TIMEOUT), instead of
# huggingface_hub's none-or-retried-five-times; --timeout or EAGLECONV_HUB_TIMEOUT sets it.
DEFAULT_TIMEOUT = 60.0
CONNECT_TIMEOUT = 10.0
TIMEOUT_ENV = "EAGLECONV_HUB_TIMEOUT"
# Without --stage-dir, push stages under $TMPDIR as owned `.eagleconv-push.eagleconv-HOST-PID-START-RAND.partial`
# names (built through StagedDirectory, so under their own owned sibling while copying), so the next push removes
# what a killed one left (io.debris.clean_dead_debris).
TMP_STAGE = "eagleconv-push"
TMP_STATE_DICT = "eagleconv-push-state-dict"  # the same for the directory an in-memory push is written to first
LICENSE = "unknown"  # the Hub's identifier for "not stated": eagleconv cannot know a drafter's license
LIBRARY = "vllm"  # what the card's serve command runs

# (on_total, on_bytes) callbacks for the hashing pass, as in convert
Progress = tuple[Callable[[int], None] | None, Callable[[int], None] | None]
# step(what, done, total), in bytes: one call per advance of each named step (see STEPS); the CLI draws the bars
Step = Callable[[str, int, int], None]
# The names push and pull give their steps, in the order they run (each only where it applies).
SCANNING, STAGING, HASHING, UPLOADING = "scanning", "copying to the staging directory", "hashing", "uploading"
DOWNLOADING, PLACING = "downloading", "copying to the destination"
STEPS = {"push": (SCANNING, STAGING, HASHING, UPLOADING), "pull": (DOWNLOADING, SCANNING, PLACING)}


class HubError(EagleconvError):
    """The Hub could not be reached, refused a request, or holds something other than the manifest (exit 2)."""


class HubTimeoutError(HubError):
    """A Hub request got no answer within the timeout (raised from the HTTP client, so it is never retried)."""


# -- reports -------------------------------------------------------------------------------

class ManifestEntry(_Report):
    path: str
    size: int
    sha256: str


class RemoteFile(_Report):
    """One file as the Hub lists it: ``sha256`` for LFS/xet files, ``git_oid`` (git blob sha1) for regular ones."""

    path: str
    size: int | None
    sha256: str | None = None
    git_oid: str | None = None


class PushReport(_Report):
    """What ``eagleconv push`` / ``eagleconv.push()`` did (or, with ``dry_run``, would do)."""

    ok: bool = Field(description="validated, uploaded (unless dry_run) and the remote matches the manifest")
    refused: bool = Field(default=False, description="validation refused the push: nothing was staged or sent")
    dry_run: bool = False
    source: str
    repo_id: str
    revision: str
    create_pr: bool = False
    private: bool = False
    endpoint: str | None = None
    validation: ValidationReport
    publish_findings: list[Finding] = Field(default_factory=list, description="pre-upload checks (EC080)")
    staged: str | None = Field(default=None, description="the staging copy, when it was kept (dry run or --stage-dir)")
    files: list[ManifestEntry] = Field(default_factory=list, description="the manifest: every file uploaded")
    not_published: list[str] = Field(default_factory=list,
                                     description="files in the source directory that are not part of the checkpoint")
    model_card: str | None = None
    base_model: str | None = None
    serve_command: str | None = None
    parent_commit: str | None = None
    deleted: list[str] = Field(default_factory=list, description="stale remote weight files the commit removes")
    commit_oid: str | None = None
    commit_url: str | None = None
    pr_url: str | None = None
    remote: list[RemoteFile] = Field(default_factory=list, description="the remote files after the push (or failure)")
    mismatches: list[str] = Field(default_factory=list, description="manifest entries the remote does not match")
    error: str | None = None
    notes: list[str] = Field(default_factory=list)


class PullReport(_Report):
    """What ``eagleconv pull`` / ``eagleconv.pull()`` fetched and found."""

    ok: bool
    repo_id: str
    revision: str | None
    commit: str | None = Field(default=None, description="the commit the snapshot was taken at")
    destination: str | None = Field(default=None, description="None when nothing was written")
    snapshot: str = Field(description="the huggingface_hub cache snapshot the files came from")
    manifest_verified: bool | None = Field(default=None, description="None: the repository has no MANIFEST.json")
    files: list[str] = Field(default_factory=list)
    validation: ValidationReport
    notes: list[str] = Field(default_factory=list)
    card: CardSummary | None = Field(default=None, description="what the repository's model card states was checked: "
                                     "the engine matrix and the acceptance (null: no card, or not eagleconv's)")


def _endpoint(explicit: str | None) -> str | None:
    """The endpoint to use: explicit, else HF_ENDPOINT read now (huggingface_hub reads it only at import)."""
    return explicit or os.environ.get("HF_ENDPOINT") or None


def _cache_dir() -> str | None:
    """HF_HUB_CACHE (else HF_HOME/hub) as the environment says now; None: huggingface_hub's default."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME")
    return str(Path(home) / "hub") if home else None


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE), as huggingface_hub read it at import or as the environment says now."""
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    hub_offline = getattr(constants, "is_offline_mode", lambda: constants.HF_HUB_OFFLINE)()  # before 1.0: a constant
    return hub_offline or (env or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _hub_error(exc: BaseException, doing: str, where: str | None = None) -> HubError:
    if isinstance(exc, HubError):
        return type(exc)(f"{doing}: {exc.message}", where or exc.path)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return HubError(f"{doing}: {type(exc).__name__}: {text}", where)
