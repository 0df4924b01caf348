"""What push and pull share: file names, limits, step names and the two reports."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import Field

from ..hubread.base import DOWNLOADING, ManifestEntry
from ..spec.report import Finding, ValidationReport, _Report
from ._evaluation import CardSummary

# Remote files a new push replaces: a stale shard or index beside a new one would make the repo inconsistent.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".index.json")
# Without --stage-dir, push stages under $TMPDIR as owned `.eagleconv-push.eagleconv-HOST-PID-START-RAND.partial`
# names (built through StagedDirectory, so under their own owned sibling while copying), so the next push removes
# what a killed one left (io.debris.clean_dead_debris).
TMP_STAGE = "eagleconv-push"
TMP_STATE_DICT = "eagleconv-push-state-dict"  # the same for the directory an in-memory push is written to first
LICENSE = "unknown"  # the Hub's identifier for "not stated": eagleconv cannot know a drafter's license
LIBRARY = "vllm"  # what the card's serve command runs

# (on_total, on_bytes) callbacks for the hashing pass, as in convert
Progress = tuple[Callable[[int], None] | None, Callable[[int], None] | None]
# The names push and pull give their steps, in the order they run (each only where it applies).
SCANNING, STAGING, HASHING, UPLOADING = "scanning", "copying to the staging directory", "hashing", "uploading"
PLACING = "copying to the destination"
STEPS = {"push": (SCANNING, STAGING, HASHING, UPLOADING), "pull": (DOWNLOADING, SCANNING, PLACING)}


# -- reports -------------------------------------------------------------------------------

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
