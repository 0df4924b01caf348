"""The Hub gate: validated ``push`` with a manifest and a generated model card, ``pull``, and ``hf://`` paths.

A drafter reaches the Hub only through here, and only after it has been
validated: an error finding (with ``strict``, a warning that is not ignored)
refuses the push before any network request.  The published files are a
staging copy (never the user's directory) holding the checkpoint's own files,
a generated ``README.md`` model card and a ``MANIFEST.json`` with the size and
sha256 of every file.  The upload is ONE ``create_commit`` with explicit
operations and ``parent_commit`` (not ``upload_folder``, whose commit
semantics change when ``hf_xet`` is installed); afterwards the remote listing
is read back and compared with the manifest.  A failed commit is never retried:
the report says what the remote holds instead.

Downloads go through huggingface_hub's cache (``snapshot_download``), so
``HF_HUB_OFFLINE`` and the cache behave as everywhere else; the manifest is
verified when present.  Only ``hf://ORG/NAME[@REV]`` names a Hub repository:
a bare ``org/name`` is a local path, and a missing one is an error.

The public API is gathered here; the private modules hold one job each:
``_base`` (step names, the two reports), ``_transfer`` (copying and hashing with progress),
``_card`` (model card, publish checks), ``_evaluation`` (the card's engine matrix and acceptance),
``_push``, ``_pull`` and ``_audit`` (many repositories judged from their headers, one row each).
Reading the Hub (snapshots and their manifest, ``hf://`` from its headers by bounded range reads, the
timeouts) lives below, in ``eagleconv.hubread``, because validate, inspect and convert take ``hf://`` paths;
``hf://`` path parsing lives in ``eagleconv.io.hub_paths``.
"""

from __future__ import annotations

from ..hubread.base import (CARD, CONNECT_TIMEOUT, DEFAULT_TIMEOUT, DOWNLOADING, HASH_CHUNK, HubError, HubTimeoutError,
                            LENIENT, MANIFEST, MANIFEST_FORMAT, ManifestEntry, Step, TIMEOUT_ENV, offline)
from ..hubread.download import download, fetch_verified, local_path
from ..hubread.manifest import build_manifest, manifest_json, read_manifest, verify_manifest
from ..hubread.ranges import HubHTTPError, RangeReader
from ..hubread.remote import open_hf_headers, open_remote
from ..hubread.timeouts import hub_timeout, hub_timeouts
from ..io.hub_paths import HF_SCHEME, HubRef, check_repo_id, check_revision, is_hf_url, is_local_path, parse_hf_url
from ._audit import (STATES, AuditRow, AuditSummary, RowsFile, audit, audit_one, parse_repo, read_repo_list,
                     search, summarise)
from ._base import (HASHING, LIBRARY, LICENSE, PLACING, Progress, PullReport, PushReport, RemoteFile, SCANNING, STAGING,
                    STEPS, TMP_STAGE, UPLOADING, WEIGHT_SUFFIXES)
from ._card import TARGET_KEYS, model_card, publish_findings, serve_command, served_as, speculative_tokens, verifier_of
from ._evaluation import Acceptance, CardSummary, EngineVerdict, engine_matrix, read_acceptance, read_card
from ._pull import pull
from ._push import compare, push, unhashed
from ._transfer import checkpoint_files

__all__ = [
    "STATES", "AuditRow", "AuditSummary", "RowsFile", "audit", "audit_one", "parse_repo", "read_repo_list", "search",
    "summarise", "HubHTTPError", "RangeReader", "open_hf_headers", "open_remote",
    "Acceptance", "CardSummary", "EngineVerdict", "engine_matrix", "read_acceptance", "read_card",
    "CARD", "CONNECT_TIMEOUT", "DEFAULT_TIMEOUT", "DOWNLOADING", "HASHING", "HASH_CHUNK", "HF_SCHEME", "HubError",
    "HubRef", "HubTimeoutError", "LENIENT", "LIBRARY", "LICENSE", "MANIFEST", "MANIFEST_FORMAT", "ManifestEntry",
    "PLACING", "Progress", "PullReport", "PushReport", "RemoteFile", "SCANNING", "STAGING", "STEPS", "Step",
    "TARGET_KEYS", "TIMEOUT_ENV", "TMP_STAGE", "UPLOADING", "WEIGHT_SUFFIXES", "build_manifest", "check_repo_id",
    "check_revision", "checkpoint_files", "compare", "download", "fetch_verified", "hub_timeout", "hub_timeouts",
    "is_hf_url", "is_local_path", "local_path", "manifest_json", "model_card", "offline", "parse_hf_url",
    "publish_findings", "pull", "push", "read_manifest", "serve_command", "served_as", "speculative_tokens",
    "unhashed", "verifier_of", "verify_manifest",
]
