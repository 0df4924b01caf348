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
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from . import __version__
from .errors import DestinationError, EagleconvError, UnsafeInputError, UsageError
from .report import Finding, ValidationReport, _Report

if TYPE_CHECKING:
    from huggingface_hub import HfApi

    from .report import InspectReport

MANIFEST = "MANIFEST.json"
CARD = "README.md"
HF_SCHEME = "hf://"
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
# what a killed one left (io.staging.clean_dead_debris).
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


# -- hf:// paths and Hub ids ---------------------------------------------------------------

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


# -- timeouts ------------------------------------------------------------------------------
# huggingface_hub sends many requests without a timeout (model_info, create_commit...) and retries a timed-out
# one five times with back-off, so a server that holds a response held push for minutes.  eagleconv gives
# huggingface_hub a client (through its public set_client_factory / configure_http_backend) whose every request
# has a connect and read limit, and whose timeout is an eagleconv error that huggingface_hub does not retry.
# Outside an eagleconv Hub call (``_limit`` None) that client behaves as huggingface_hub's default one.

_limit: float | None = None
_client_installed = False


def hub_timeout(seconds: float | None = None) -> float:
    """The read timeout to use: ``seconds``, else EAGLECONV_HUB_TIMEOUT, else DEFAULT_TIMEOUT (UsageError if bad)."""
    source = "--timeout"
    if seconds is None:
        text = os.environ.get(TIMEOUT_ENV, "").strip()
        if not text:
            return DEFAULT_TIMEOUT
        source = TIMEOUT_ENV
        try:
            seconds = float(text)
        except ValueError:
            raise UsageError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds") from None
    if isinstance(seconds, bool) or not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"{source} {seconds!r}: the Hub timeout must be a positive number of seconds")
    return float(seconds)


def _limited(existing: Any, limit: float) -> float:
    return limit if existing is None else min(float(existing), limit)


def _timed_out(method: str, url: Any, limit: float) -> HubTimeoutError:
    return HubTimeoutError(f"no answer within {limit:g} s ({method} {url}); --timeout SECONDS or "
                           f"{TIMEOUT_ENV} sets the limit")


def _httpx_client_factory(template: Any) -> Callable[[], Any]:
    """huggingface_hub >= 1.0: an httpx(2) Client subclass like its default one (same event hooks) with limits."""
    http = sys.modules[type(template).__module__.split(".")[0]]
    hooks = template.event_hooks

    class Stream(http.SyncByteStream):  # type: ignore[name-defined]
        """A streamed body (downloads) whose read timeout is eagleconv's error too."""

        def __init__(self, inner: Any, method: str, url: Any, limit: float):
            self.inner, self.what = inner, (method, url, limit)

        def __iter__(self) -> Iterator[bytes]:
            try:
                yield from self.inner
            except http.TimeoutException:
                raise _timed_out(*self.what) from None

        def close(self) -> None:
            self.inner.close()

    class Client(http.Client):  # type: ignore[name-defined]
        def send(self, request: Any, **kwargs: Any) -> Any:
            limit = _limit
            if limit is None:
                return super().send(request, **kwargs)
            old = request.extensions.get("timeout") or {}
            request.extensions["timeout"] = {"connect": _limited(old.get("connect"), min(CONNECT_TIMEOUT, limit)),
                                             "read": _limited(old.get("read"), limit),
                                             "write": _limited(old.get("write"), limit),
                                             "pool": _limited(old.get("pool"), limit)}
            url = str(request.url).split("?")[0]
            try:
                response = super().send(request, **kwargs)
            except http.TimeoutException:
                raise _timed_out(request.method, url, limit) from None
            if isinstance(response.stream, http.SyncByteStream):
                response.stream = Stream(response.stream, request.method, url, limit)
            return response

    return lambda: Client(event_hooks=hooks, follow_redirects=True, timeout=None)


def _requests_session_factory() -> Callable[[], Any]:
    """huggingface_hub 0.x (requests): a Session whose every request has eagleconv's limits."""
    import requests

    class Session(requests.Session):
        def send(self, request: Any, **kwargs: Any) -> Any:
            limit = _limit
            if limit is None:
                return super().send(request, **kwargs)
            old = kwargs.get("timeout")
            connect, read = old if isinstance(old, tuple) else (old, old)
            kwargs["timeout"] = (_limited(connect, min(CONNECT_TIMEOUT, limit)), _limited(read, limit))
            try:
                return super().send(request, **kwargs)
            except requests.Timeout:
                raise _timed_out(request.method or "", (request.url or "").split("?")[0], limit) from None

    return Session


@contextmanager
def hub_timeouts(seconds: float | None = None) -> Iterator[float]:
    """Every huggingface_hub request made inside gives up after ``hub_timeout(seconds)`` without an answer."""
    global _limit, _client_installed
    import huggingface_hub

    limit = hub_timeout(seconds)
    if not _client_installed:
        if hasattr(huggingface_hub, "set_client_factory"):
            huggingface_hub.set_client_factory(_httpx_client_factory(huggingface_hub.get_session()))
        else:  # pragma: no cover - huggingface_hub < 1.0
            huggingface_hub.configure_http_backend(backend_factory=_requests_session_factory())
        _client_installed = True
    previous, _limit = _limit, limit
    try:
        yield limit
    finally:
        _limit = previous


# -- manifest ------------------------------------------------------------------------------

def _hash_file(path: Path, on_bytes: Callable[[int], None] | None = None) -> tuple[str, str]:
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
        sha, git = _hash_file(directory / name, on_bytes)
        entries.append(ManifestEntry(path=name, size=(directory / name).stat().st_size, sha256=sha))
        git_ids[name] = git
    return entries, git_ids


def manifest_json(entries: Sequence[ManifestEntry]) -> str:
    return json.dumps({"format": MANIFEST_FORMAT, "generator": f"eagleconv {__version__}",
                       "files": [e.model_dump() for e in entries]}, indent=2) + "\n"


def read_manifest(directory: Path) -> list[ManifestEntry] | None:
    from .jsonio import load_json

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
        sha = _hash_file(path)[0] if size == e.size else None
        if size != e.size or sha != e.sha256:
            what = f"size {size} != {e.size}" if size != e.size else f"sha256 {sha} != {e.sha256}"
            if e.path in LENIENT:
                notes.append(f"{e.path} differs from {MANIFEST} ({what}): edited after publication")
                continue
            raise UnsafeInputError(f"{e.path} does not match {MANIFEST}: {what}", directory)
    # Every file, at any depth (a repository can hold `scripts/run.sh`), not only the top level.
    extra = sorted(rel for rel in _repo_files(directory) if rel not in listed | {MANIFEST} | LENIENT)
    if extra:
        raise UnsafeInputError(f"files not listed in {MANIFEST}: {', '.join(extra)}", directory)
    return True, notes


def _repo_files(directory: Path) -> list[str]:
    """Every non-directory entry under ``directory`` (following the cache's blob links), as relative posix paths."""
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if not p.is_dir())


# -- downloads -----------------------------------------------------------------------------

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
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line naming the repository
        if local_only:
            raise HubError("HF_HUB_OFFLINE is set and this repository (revision) is not in the Hugging Face cache",
                           where) from exc
        raise _hub_error(exc, "download failed", where) from exc
    if progress is not None:  # complete: also where nothing was fetched (cached) or the hub names no bytes bar
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        progress(DOWNLOADING, size, size)
    return path, path.name if re.fullmatch(r"[0-9a-f]{40}", path.name) else None


def _takes(function: Callable[..., Any], parameter: str) -> bool:
    """Whether ``function`` accepts ``parameter`` (huggingface_hub grew keywords between 0.30 and 1.x)."""
    import inspect

    return parameter in inspect.signature(function).parameters


def _quiet_tqdm(progress: Step | None) -> Any:
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


def _bytes_step(progress: Step | None, what: str) -> Progress:
    """The (on_total, on_bytes) pair that validate() and build_manifest() take, reporting to ``progress`` as ``what``."""
    if progress is None:
        return None, None
    state = {"total": 0, "done": 0}

    def on_total(total: int) -> None:
        state.update(total=total, done=0)
        progress(what, 0, total)

    def on_bytes(n: int) -> None:
        state["done"] += n
        progress(what, min(state["done"], state["total"]), state["total"])

    return on_total, on_bytes


def _copy_files(source: Path, target: Path, names: Sequence[str], progress: Step | None, what: str,
                durable: bool = False) -> None:
    """Copy ``names`` from ``source`` into ``target`` (subdirectories made), reporting bytes after each file."""
    from .io.staging import fsync_file

    sizes = {name: (source / name).stat().st_size for name in names}
    total, done = sum(sizes.values()), 0
    if progress:
        progress(what, 0, total)
    for name in names:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, target / name)  # follows the cache's blob symlinks
        if durable:
            fsync_file(target / name)
        done += sizes[name]
        if progress:
            progress(what, done, total)


def local_path(path: str | Path) -> Path:
    """``hf://ORG/NAME[@REV]`` -> the verified cache snapshot; any other path is returned as a local Path."""
    if not is_hf_url(path):
        return Path(path)
    snapshot, _ = download(parse_hf_url(str(path)))
    verify_manifest(snapshot)
    return snapshot


def pull(repo_id: str, destination: str | Path, *, revision: str | None = None, endpoint: str | None = None,
         token: str | bool | None = None, engines: Any = ("vllm",), force: bool = False,
         ignore: Iterable[str] = (), overwrite: bool = False, timeout: float | None = None,
         progress: Step | None = None) -> PullReport:
    """Download a drafter through the cache, verify its manifest, validate it, then copy it to ``destination``.

    ``destination`` appears complete or not at all (io.staging.StagedDirectory,
    as convert writes).  An existing one is refused unless ``overwrite``, and
    then replaced only if it is recognisably a checkpoint, in one atomic swap.
    Only the files the manifest lists (without one: the checkpoint's own files
    and its card) are copied.  With error findings nothing is written unless
    ``force``.  A failed copy (a full disk...) is a DestinationError naming
    ``destination``.  ``progress(what, done, total)``: the steps of STEPS["pull"], in bytes.
    """
    from .io.staging import StagedDirectory
    from .validation import validate

    if is_hf_url(repo_id):
        ref = parse_hf_url(repo_id)
        repo_id, revision = ref.repo_id, revision or ref.revision
    check_repo_id(repo_id)
    if revision is not None:
        check_revision(revision)
    dest = Path(destination)
    if not dest.parent.is_dir():
        raise UsageError("the destination's parent directory does not exist", dest)
    # Removes a dead run's debris beside DEST, refuses an existing DEST without --overwrite and, with it,
    # anything that is not recognisably a checkpoint; all before any request.
    staged = StagedDirectory(dest, overwrite=overwrite)
    snapshot, commit = download(HubRef(repo_id, revision), endpoint=endpoint, token=token, timeout=timeout,
                                progress=progress)
    verified, notes = verify_manifest(snapshot)
    report = validate(snapshot, engines=engines, ignore=ignore, progress=_bytes_step(progress, SCANNING))
    if verified:
        names = sorted({e.path for e in read_manifest(snapshot) or []} | {MANIFEST})
    else:  # no manifest: only what makes up the checkpoint, never a repository's scripts or optimizer state
        names = sorted({*checkpoint_files(snapshot)[0], *([CARD] if (snapshot / CARD).is_file() else [])})
    left_out = [n for n in _repo_files(snapshot) if n not in names and n != ".gitattributes"]
    result = PullReport(ok=report.ok, repo_id=repo_id, revision=revision, commit=commit, snapshot=str(snapshot),
                        manifest_verified=verified, files=names, validation=report, notes=[*staged.notes, *notes])
    if left_out:
        result.notes.append("not copied (not part of the checkpoint" + (f" nor in {MANIFEST}" if verified else "")
                            + f"): {', '.join(left_out)}")
    if not report.ok and not force:
        result.notes.append("not written: the drafter has error findings (force=True / --force writes it anyway)")
        return result
    staged.size = sum((snapshot / name).stat().st_size for name in names)
    with staged as staging:  # published by one rename, or the atomic swap with --overwrite
        _copy_files(snapshot, staging, names, progress, PLACING, durable=True)
    result.destination = str(dest)
    return result


# -- the model card ------------------------------------------------------------------------

def verifier_of(config: dict[str, Any], inspected: InspectReport | None) -> str | None:
    """The target model the config names, if any (speculators' verifier.name_or_path)."""
    if inspected is not None and inspected.spec.verifier is not None and inspected.spec.verifier.name_or_path:
        return inspected.spec.verifier.name_or_path
    sc = config.get("speculators_config")
    verifier = sc.get("verifier") if isinstance(sc, dict) else None
    name = verifier.get("name_or_path") if isinstance(verifier, dict) else None
    return name if isinstance(name, str) and name else None


# Config keys (at any depth) that name the target model; speculators' verifier.name_or_path is read via the spec.
TARGET_KEYS = ("base_model", "base_model_name_or_path", "target_model", "target_model_name_or_path",
               "target_model_path", "verifier_name_or_path")


def _target_fields(value: Any, where: str = "") -> Iterable[tuple[str, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            at = f"{where}.{key}" if where else str(key)
            if key in TARGET_KEYS and isinstance(item, str):
                yield at, item
            else:
                yield from _target_fields(item, at)


def publish_findings(config: dict[str, Any], inspected: InspectReport | None) -> list[Finding]:
    """Checks that matter only for a config about to be published: a target model named by a local path (EC080)."""
    named: dict[str, str] = {}
    verifier = verifier_of(config, inspected)
    if verifier is not None:
        named["speculators_config.verifier.name_or_path"] = verifier
    named.update(_target_fields(config))
    verifier_key = "speculators_config.verifier.name_or_path"
    fix = {verifier_key: "rewrite it with `eagleconv convert PATH OUT --to speculators --verifier ORG/NAME` and "
                         "push OUT"}
    return [Finding(code="EC080", severity="warning",
                    message=f"{key} is the local path {name!r}: publishing leaks it and nobody can resolve the target "
                            f"from it; push refuses it: {fix.get(key, 'set it to the Hub id ORG/NAME')} "
                            "(--ignore EC080 publishes it anyway)")
            for key, name in named.items() if is_local_path(name)]


def speculative_tokens(config: dict[str, Any]) -> int:
    """The number of draft tokens the trainer recorded (speculators' proposal method), else vLLM's common 3."""
    sc = config.get("speculators_config")
    methods = sc.get("proposal_methods") if isinstance(sc, dict) else None
    if isinstance(methods, list) and methods and isinstance(methods[0], dict):
        k = methods[0].get("speculative_tokens")
        if isinstance(k, int) and not isinstance(k, bool) and k >= 1:
            return k
    return 3


def serve_command(target: str | None, repo_id: str, k: int) -> str:
    spec = json.dumps({"model": repo_id, "method": "eagle3", "num_speculative_tokens": k})
    return f"vllm serve {target or 'TARGET_MODEL'} --speculative-config '{spec}'"


def model_card(repo_id: str, inspected: InspectReport, validation: ValidationReport, base_model: str | None,
               command: str, files: Sequence[ManifestEntry], license_id: str = LICENSE) -> str:
    """A README.md with metadata (license, library_name, base_model, tags) and what a user needs to serve the drafter.

    The metadata goes through huggingface_hub's ModelCardData/ModelCard, which write and re-parse the YAML.
    """
    from huggingface_hub import ModelCard, ModelCardData

    from .drafter import EagleFlags

    spec = inspected.spec
    tags = ["eagle3", *(["eagle3.1"] if spec.eagle_version == "3.1" else []), "speculative-decoding", "eagleconv"]
    data = ModelCardData(license=license_id, library_name=LIBRARY, base_model=base_model or None, tags=tags)
    front = ["---", data.to_yaml(), "---", ""]
    name = repo_id.split("/")[-1]
    version = "EAGLE-3.1" if spec.eagle_version == "3.1" else "EAGLE-3"
    target = f"[{base_model}](https://huggingface.co/{base_model})" if base_model else "its target model (not recorded)"
    body = [f"# {name}", "",
            f"An {version} speculative-decoding drafter ({spec.architecture}) for {target}, "
            f"published and validated by eagleconv {__version__}.", "",
            "## Serve with vLLM", "", "```bash", command, "```", ""]
    if not base_model:
        body += ["Replace `TARGET_MODEL` with the model this drafter was trained against.", ""]
    heads = f"{spec.num_attention_heads}" + (f" (KV heads {spec.num_key_value_heads})" if spec.num_key_value_heads else "")
    rows = [("layout", inspected.format), ("architecture", f"{spec.architecture} (model_type {spec.model_type})"),
            ("decoder layers", str(spec.num_hidden_layers)), ("hidden size", str(spec.hidden_size)),
            ("target hidden size", str(spec.target_hidden_size)), ("attention heads", heads),
            ("head dim", str(spec.head_dim) if spec.head_dim else "MLA"),
            ("intermediate size", str(spec.intermediate_size)), ("dtype", spec.dtype or "unknown"),
            ("rms_norm_eps", str(spec.rms_norm_eps) if spec.rms_norm_eps is not None else "not stated"),
            ("rope", f"theta {spec.rope.theta if spec.rope.theta is not None else 'not stated'}, "
                     f"scaling {spec.rope.scaling}" + (f" x{spec.rope.factor}" if spec.rope.factor else "")),
            ("weights", f"{inspected.weights}, {inspected.total_bytes} bytes")]
    body += ["## Architecture", "", "| field | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]
    body += ["## Flags", "", "| flag | value | meaning |", "|---|---|---|"]
    for flag, value in spec.flags.model_dump().items():
        body.append(f"| `{flag}` | {str(value).lower()} | {EagleFlags.model_fields[flag].description} |")
    body.append("")
    hsi = inspected.aux_layer_ids_hidden_state_index
    body += ["## Aux layers", "",
             f"The drafter reads {spec.aux.count} hidden states of the target."]
    if spec.aux.ids is None:
        body.append("The checkpoint does not record which layers: engines guess (vLLM: (2, L//2, L-3)).")
    else:
        body.append(f"Layer ids as the checkpoint states them: `{list(spec.aux.ids)}` in the `{spec.aux.convention}` "
                    "convention" + (f"; in vLLM's numbering (the hidden state entering layer i): `{list(hsi)}`."
                                     if hsi is not None else "."))
    body += ["", "## Vocabulary", "",
             f"Target vocabulary {spec.vocab_size}, draft vocabulary {spec.draft_vocab_size}" +
             (" (compressed: `d2t[i]` is the offset from draft id i to its target id)" if spec.compressed_vocab
              else " (not compressed)") +
             f"; d2t {'present' if inspected.vocab.d2t else 'absent'}, t2d {'present' if inspected.vocab.t2d else 'absent'}.",
             "", "## Validation", "",
             f"Validated by eagleconv {__version__} for: {', '.join(validation.engines)}"
             + ("" if validation.numeric_scan else " (no numeric scan)") + ".", ""]
    if validation.findings:
        body += ["| severity | code | engine | finding |", "|---|---|---|---|"]
        body += [f"| {f.severity} | {f.code} | {f.engine or '-'} | {f.message.replace('|', '/')} |"
                 for f in validation.findings]
    else:
        body.append("No findings.")
    if validation.ignored:
        body += ["", "Judged acceptable by the publisher (ignored): " +
                 ", ".join(sorted({f.code for f in validation.ignored})) + "."]
    body += ["", "## Files", "", f"`{MANIFEST}` lists the size and sha256 of every file.", "",
             "| file | bytes | sha256 |", "|---|---|---|", *(f"| {e.path} | {e.size} | `{e.sha256}` |" for e in files), ""]
    try:
        card = ModelCard("\n".join(front + body))  # parses the front matter back: what the Hub will read
    except ValueError as exc:
        raise UsageError(f"the model card metadata is invalid: {str(exc).splitlines()[0]}") from None
    return str(card)


# -- push ----------------------------------------------------------------------------------

def served_as(repo_id: str, engines: Any) -> list[Finding]:
    """EC041 for the name users will serve: the repo id, not the local directory validate saw.

    The engines' own method-detection rules run on ``repo_id`` (they read only the path).
    """
    from types import SimpleNamespace

    from .engines import resolve_engines

    out: list[Finding] = []
    for profile in resolve_engines(engines):
        for check in profile.checks:
            if "EC041" in getattr(check, "codes", ()):
                out += check(SimpleNamespace(path=repo_id), SimpleNamespace(profile=profile))
    return out


def checkpoint_files(source: Path) -> tuple[list[str], list[str]]:
    """(files that make up the checkpoint, other files in the directory): only the former are published."""
    from .io.reader import open_checkpoint

    store = open_checkpoint(source)
    try:
        names = sorted({"config.json", *store.files})
    finally:
        store.close()
    others = sorted(p.name for p in source.iterdir() if p.name not in names and p.name not in (CARD, MANIFEST))
    return names, others


def push(path: str | Path | Mapping[str, Any], repo_id: str, *, config: Any = None, revision: str | None = None,
         create_pr: bool = False, private: bool = False, endpoint: str | None = None, token: str | bool | None = None,
         engines: Any = ("vllm",), strict: bool = False, ignore: Iterable[str] = (), numeric: bool = True,
         dry_run: bool = False, stage_dir: str | Path | None = None, base_model: str | None = None,
         forward: bool = True, license: str = LICENSE, timeout: float | None = None,  # noqa: A002 - the card field
         commit_message: str | None = None, progress: Step | Progress | None = None) -> PushReport:
    """Validate the drafter at ``path`` and publish it to ``repo_id`` in one commit: the pre-upload gate.

    Validation runs the static and numeric checks and, unless ``forward`` is
    false, the reference forward pass (non-finite drafts are EC070).  Refused
    (``refused=True``, nothing staged, no network request) on any
    error finding, on a config that names its verifier by a local path
    (EC080, unless ignored), or with ``strict`` on any warning not in
    ``ignore``.  Otherwise a staging copy gets README.md and MANIFEST.json;
    with ``dry_run`` it is kept and nothing is sent.

    One failure contract, for the library and the CLI alike: every Hub
    failure (unreachable, refused, timed out, offline, a commit that failed or
    does not verify) is ``ok=False`` with ``error`` set (the CLI exits 2),
    never an exception and never retried.  Exceptions are for bad arguments
    and unreadable input (UsageError, UnsafeInputError...), raised before
    anything is sent.

    ``progress``: ``progress(what, done, total)`` for every step of STEPS["push"]
    (bytes; UPLOADING moves once, when the commit is answered), or the older
    (on_total, on_bytes) pair, which sees only the hashing.  The staging copy
    is built through io.staging.StagedDirectory: a failed copy (a full disk...)
    is a DestinationError naming --stage-dir (else the kept copy, or $TMPDIR).

    ``path`` may also be an in-memory state dict, with its ``config`` (a dict, a config.json path or a
    transformers ``PretrainedConfig``), as a training loop holds them: it is written once through the
    checkpoint writer into $TMPDIR (removed afterwards), and that copy goes through the same gate, staging
    and upload; the report's ``source`` is ``<state_dict>``.
    """
    from .inspection import inspect
    from .io.reader import is_state_dict, require_source
    from .io.staging import StagedDirectory, remove_tree
    from .validation import validate
    from .validation.api import apply_ignore

    require_source(path, config, "path")
    if is_hf_url(path):
        raise UsageError("push publishes a local directory; pull the repository first")
    check_repo_id(repo_id)
    if base_model is not None and is_local_path(base_model):
        raise UsageError(f"--base-model {base_model!r} is a local path, not a Hub id")
    revision = check_revision(revision or "main")
    hub_timeout(timeout)  # a bad --timeout / EAGLECONV_HUB_TIMEOUT is a usage error before the slow part
    if is_state_dict(path):
        return _push_state_dict(path, config, repo_id, revision=revision, create_pr=create_pr,  # type: ignore[arg-type]
                                private=private, endpoint=endpoint, token=token, engines=engines, strict=strict,
                                ignore=ignore, numeric=numeric, dry_run=dry_run, stage_dir=stage_dir,
                                base_model=base_model, forward=forward, license=license, timeout=timeout,
                                commit_message=commit_message, progress=progress)
    source = Path(path)  # type: ignore[arg-type]
    seen = _stat(source)  # what validation reads; the staged copy must be of the same bytes
    step = progress if callable(progress) else None
    report = validate(source, engines=engines, numeric=numeric, progress=_bytes_step(step, SCANNING))
    if forward and report.ok:  # a drafter already refused is not run: its tensors may not even form a model
        from .validation.api import add_forward

        add_forward(report, source, engines=engines)
    config = _config_of(source)
    inspected = inspect(source) if report.ok else None
    extra = publish_findings(config, inspected)
    findings = [f for f in report.findings if f.code != "EC080"] + extra
    findings = [f for f in findings if f.code != "EC041"] + served_as(repo_id, engines)
    report = apply_ignore(report.model_copy(update={"findings": findings}), ignore)
    result = PushReport(ok=False, source=str(source), repo_id=repo_id, revision=revision, create_pr=create_pr,
                        private=private, endpoint=_endpoint(endpoint), dry_run=dry_run, validation=report,
                        publish_findings=extra)
    if not forward:
        result.notes.append("no forward pass (--no-forward): static and numeric checks only")
    warnings = [f for f in report.findings if f.severity == "warning"]
    leaks = [f for f in report.findings if f.code == "EC080"]  # not ignored: publishing would leak the path
    if not report.ok or leaks or (strict and warnings) or inspected is None:
        result.refused = True
        bad = [f for f in report.findings if f.severity == "error"] or leaks or warnings
        kind = "error" if not report.ok else "warning"
        result.error = (f"refused: {len(bad)} {kind} finding(s), first: [{bad[0].code}] {bad[0].message}"
                        if bad else "refused")
        return result

    names, others = checkpoint_files(source)
    result.not_published = others
    verifier = verifier_of(config, inspected)
    result.base_model = base_model or (verifier if verifier and not is_local_path(verifier) else None)
    result.serve_command = serve_command(result.base_model, repo_id, speculative_tokens(config))

    keep = dry_run or stage_dir is not None
    target = _stage_target(source, stage_dir, keep)
    staged = StagedDirectory(target, durable=False)  # cleans what killed pushes left beside it (dead owners only)
    if not keep:  # an error names $TMPDIR, not the internal name of a copy the user never asked to see
        staged.shown = target.parent
    result.notes[:0] = staged.notes
    staged.size = sum((source / n).stat().st_size for n in names)
    hashing = progress if isinstance(progress, tuple) else _bytes_step(step, HASHING)
    try:
        with staged as partial:  # a copy-time OSError: one DestinationError naming the target, nothing kept
            _copy_files(source, partial, names, step, STAGING)
            on_total, on_bytes = hashing
            if on_total:
                on_total(sum((partial / n).stat().st_size for n in names))
            entries, git_ids = build_manifest(partial, names, on_bytes)
            now = _stat(source)
            changed = [n for n in names if now.get(n) != seen.get(n)]
            if changed:
                raise UsageError(f"{', '.join(changed)} changed while push validated and staged it; nothing was sent",
                                 source)
            card = model_card(repo_id, inspected, report, result.base_model, result.serve_command, entries, license)
            (partial / CARD).write_text(card, encoding="utf-8")
            card_entries, card_git = build_manifest(partial, [CARD])
            entries = sorted([*entries, *card_entries], key=lambda e: e.path)
            git_ids.update(card_git)
            (partial / MANIFEST).write_text(manifest_json(entries), encoding="utf-8")
        # complete: published at ``target`` by one rename (a kept copy appears whole or not at all)
        result.files, result.model_card = entries, card
        if others:
            result.notes.append(f"not published (not part of the checkpoint): {', '.join(others)}")
        if (source / CARD).exists():
            result.notes.append(f"the source's own {CARD} is replaced by the generated model card")
        if keep:
            result.staged = str(target)
        if dry_run:
            result.ok = True
            return result
        verify_manifest(target)  # what is sent is what was hashed
        try:
            with hub_timeouts(timeout):
                _upload(result, target, entries, git_ids, token=token, commit_message=commit_message, progress=step)
        except HubError as exc:  # the one failure contract: a Hub failure is the report's error, exit 2
            result.ok, result.error = False, exc.one_line()
        return result
    finally:
        if not keep:
            remove_tree(target)


def _push_state_dict(state_dict: Mapping[str, Any], config: Any, repo_id: str, **options: Any) -> PushReport:
    """push() of an in-memory checkpoint: written as a directory under $TMPDIR, pushed, removed.

    The directory carries an owned staging name (as push's own staging copy does), so if push is killed the
    next one removes it.  Errors and reports name ``<state_dict>`` (or ``config``), never that directory.
    """
    from .io.reader import STATE_DICT, open_state_dict
    from .io.staging import remove_tree, staging_name
    from .io.writer import write_state_dict

    store = open_state_dict(state_dict, config)  # a bad state dict or config is refused before anything is written
    tmp = Path(tempfile.gettempdir())
    directory = tmp / staging_name(tmp / TMP_STATE_DICT, "partial")
    try:
        write_state_dict(store, directory, durable=False)
        result = push(directory, repo_id, **options)
    except EagleconvError as exc:
        if exc.path is not None and Path(exc.path).is_relative_to(directory):
            if isinstance(exc, DestinationError):  # (a full $TMPDIR): where the user can make room
                exc.path = exc.filename = str(tmp)
            else:  # about what was read back: the argument it came from
                exc.path = "config" if Path(exc.path).name == "config.json" else STATE_DICT
            exc.args = (exc.one_line(),)
        raise
    finally:
        store.close()
        remove_tree(directory)
    result.source = STATE_DICT
    validation = result.validation
    forward = validation.forward.model_copy(update={"path": STATE_DICT}) if validation.forward is not None else None
    result.validation = validation.model_copy(update={"path": None, "forward": forward})  # as validate(state_dict)
    return result


def _stage_target(source: Path, stage_dir: str | Path | None, keep: bool) -> Path:
    """Where push's complete staging copy goes.

    --stage-dir DIR: DIR, which must be new.  Otherwise under $TMPDIR: a dry
    run's kept copy is ``eagleconv-push-RAND``; a copy that is only uploaded and
    removed carries an owned ``.eagleconv-push.eagleconv-OWNER.partial`` name
    even when complete, so if push is killed during the upload the next push
    (StagedDirectory's clean_dead_debris) removes it.
    """
    from .io.staging import staging_name
    from .io.writer import check_not_overlapping

    if stage_dir is None:
        tmp = Path(tempfile.gettempdir())
        return tmp / (f"{TMP_STAGE}-{uuid.uuid4().hex[:12]}" if keep else staging_name(tmp / TMP_STAGE, "partial"))
    target = Path(stage_dir)
    check_not_overlapping([source], target)
    if os.path.lexists(target):
        raise UsageError("the staging directory exists; push stages into a new directory", target)
    return target


def _stat(directory: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every regular file in ``directory`` (an empty dict when it is not one)."""
    if not directory.is_dir():
        return {}
    seen = {}
    for entry in os.scandir(directory):
        try:
            if entry.is_file():
                seen[entry.name] = (entry.stat().st_size, entry.stat().st_mtime_ns)
        except OSError:  # a symlink loop: not a regular file, and validation names it
            continue
    return seen


def _config_of(source: Path) -> dict[str, Any]:
    from .jsonio import load_json

    config = load_json(source / "config.json")
    return config if isinstance(config, dict) else {}


def _api(endpoint: str | None, token: str | bool | None) -> HfApi:
    from huggingface_hub import HfApi

    return HfApi(endpoint=_endpoint(endpoint), token=token)


@contextmanager
def _commit_endpoint(endpoint: str) -> Iterator[None]:
    """huggingface_hub before 1.4 parses create_commit's answer against the import-time endpoint.

    Its CommitInfo then raises "Unable to retrieve user and repo ID" for any other endpoint (after the commit
    landed), so there the module constant is set to the API's endpoint for the one call.
    """
    from huggingface_hub import CommitInfo, constants

    if "_endpoint" in getattr(CommitInfo, "__dataclass_fields__", {}):  # 1.4+: CommitInfo takes the endpoint
        yield
        return
    saved, constants.ENDPOINT = constants.ENDPOINT, endpoint
    try:
        yield
    finally:
        constants.ENDPOINT = saved


def _head(api: HfApi, repo_id: str, revision: str) -> str | None:
    """The commit ``revision`` points to, or None when the branch does not exist."""
    from huggingface_hub.errors import RevisionNotFoundError

    try:
        return api.model_info(repo_id, revision=revision).sha
    except RevisionNotFoundError:
        return None


def _remote(api: HfApi, repo_id: str, revision: str) -> list[RemoteFile]:
    from huggingface_hub.hf_api import RepoFile

    return sorted((RemoteFile(path=f.path, size=f.size, sha256=f.lfs.sha256 if f.lfs is not None else None,
                              git_oid=f.blob_id)
                   for f in api.list_repo_tree(repo_id, revision=revision, recursive=True)
                   if isinstance(f, RepoFile)), key=lambda f: f.path)


def compare(remote: Sequence[RemoteFile], entries: Sequence[ManifestEntry], git_ids: dict[str, str]) -> list[str]:
    """Manifest entries the remote lacks or holds with another size or hash."""
    by_path = {f.path: f for f in remote}
    problems = []
    for e in entries:
        f = by_path.get(e.path)
        if f is None:
            problems.append(f"{e.path}: absent on the remote")
        elif f.size != e.size:
            problems.append(f"{e.path}: remote size {f.size} != {e.size}")
        elif f.sha256 is not None and f.sha256 != e.sha256:
            problems.append(f"{e.path}: remote sha256 {f.sha256} != {e.sha256}")
        elif f.sha256 is None and f.git_oid is not None and e.path in git_ids and f.git_oid != git_ids[e.path]:
            problems.append(f"{e.path}: remote git blob id {f.git_oid} != {git_ids[e.path]}")
    return problems


def unhashed(remote: Sequence[RemoteFile], entries: Sequence[ManifestEntry], git_ids: dict[str, str]) -> list[str]:
    """Manifest entries the remote holds at the right size but lists with no hash compare() could check."""
    by_path = {f.path: f for f in remote}
    return [e.path for e in entries if (f := by_path.get(e.path)) is not None and f.size == e.size
            and f.sha256 is None and (f.git_oid is None or e.path not in git_ids)]


def _verify_remote(result: PushReport, api: HfApi, commit: str, expected: Sequence[ManifestEntry],
                   git_ids: dict[str, str]) -> list[str]:
    """compare(), failing closed: a file the listing gives no hash for is downloaded at ``commit`` and hashed.

    A file that cannot be fetched is a mismatch ("unverified"): the push is then not ok (exit 2).
    """
    problems = compare(result.remote, expected, git_ids)
    missing = unhashed(result.remote, expected, git_ids)
    if not missing:
        return problems
    want = {e.path: e.sha256 for e in expected}
    with tempfile.TemporaryDirectory(prefix="eagleconv-verify-") as cache:
        for name in missing:
            try:
                quiet = {"tqdm_class": _quiet_tqdm(None)} if _takes(api.hf_hub_download, "tqdm_class") else {}
                fetched = Path(api.hf_hub_download(result.repo_id, name, revision=commit, cache_dir=cache,
                                                   **quiet))  # not over the CLI's bars (hub >= 1.0 takes a class)
                sha = _hash_file(fetched)[0]
            except Exception as exc:  # noqa: BLE001 - fail closed: not verified is not ok
                problems.append(f"{name}: unverified: the remote lists no hash and fetching it to hash it failed "
                                f"({_hub_error(exc, 'download').message})")
                continue
            if sha != want[name]:
                problems.append(f"{name}: remote sha256 {sha} != {want[name]} (fetched: the listing has no hash)")
            else:
                result.notes.append(f"{name}: the remote listing has no hash; fetched and hashed, it matches")
    return problems


def _upload(result: PushReport, staged: Path, entries: Sequence[ManifestEntry], git_ids: dict[str, str], *,
            token: str | bool | None, commit_message: str | None, progress: Step | None = None) -> None:
    """Create the repo/branch if needed, then ONE create_commit; verify or reconcile.  Fills ``result``.

    ``progress`` sees UPLOADING at 0 when the commit starts and complete when it is answered: huggingface_hub
    reports no bytes (a file object would, but turns off its xet upload), so the bar's clock shows it is alive.
    """
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    if offline():
        raise HubError("HF_HUB_OFFLINE is set: push needs the Hub (use --dry-run to stage without it)")
    repo_id, revision = result.repo_id, result.revision
    api = _api(result.endpoint, token)
    try:
        api.create_repo(repo_id, private=True if result.private else None, exist_ok=True, repo_type="model")
        parent = _head(api, repo_id, revision)
        if parent is None:
            if result.create_pr:
                raise HubError(f"--create-pr needs an existing branch to open the PR against; {revision!r} does not exist")
            api.create_branch(repo_id, branch=revision)
            parent = _head(api, repo_id, revision)
        before = _remote(api, repo_id, parent) if parent else []
    except Exception as exc:  # noqa: BLE001 - HubError (timeout, --create-pr) too: one line, nothing was sent
        raise _hub_error(exc, "before the commit (nothing was uploaded)", f"{result.endpoint or 'hub'}/{repo_id}") from exc
    result.parent_commit = parent
    uploading = {e.path for e in entries} | {MANIFEST}
    result.deleted = sorted(f.path for f in before if f.path not in uploading and f.path.endswith(WEIGHT_SUFFIXES))
    operations: list[Any] = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(staged / name))
                             for name in sorted(uploading)]
    operations += [CommitOperationDelete(path_in_repo=name) for name in result.deleted]
    message = commit_message or f"eagleconv {__version__}: validated drafter ({', '.join(result.validation.engines)})"
    manifest_entry, manifest_git = build_manifest(staged, [MANIFEST])
    expected = [*entries, *manifest_entry]
    git_ids = {**git_ids, **manifest_git}
    size = sum(e.size for e in expected)
    if progress:
        progress(UPLOADING, 0, size)
    try:
        with _commit_endpoint(api.endpoint):
            info = api.create_commit(repo_id, operations, commit_message=message, revision=revision,
                                     create_pr=result.create_pr, parent_commit=parent)
    except Exception as exc:  # noqa: BLE001 - reported with the remote's state, never retried
        result.error = _hub_error(exc, "the commit failed").message
        _reconcile(result, api, expected, git_ids)
        return
    if progress:
        progress(UPLOADING, size, size)
    result.commit_oid, result.commit_url, result.pr_url = info.oid, str(info.commit_url), info.pr_url
    try:
        result.remote = _remote(api, repo_id, info.oid)
    except Exception as exc:  # noqa: BLE001
        result.error = _hub_error(exc, f"the commit {info.oid} landed but its file list could not be read").message
        return
    result.mismatches = _verify_remote(result, api, info.oid, expected, git_ids)
    stale = [p for p in result.deleted if any(f.path == p for f in result.remote)]
    result.mismatches += [f"{p}: still on the remote after the commit deleted it" for p in stale]
    result.ok = not result.mismatches
    if result.mismatches:
        result.error = f"the remote at {info.oid} does not match the manifest"


def _reconcile(result: PushReport, api: HfApi, expected: Sequence[ManifestEntry], git_ids: dict[str, str]) -> None:
    """After a failed commit: say whether the branch moved, and compare what it holds with the manifest."""
    try:
        head = _head(api, result.repo_id, result.revision)
        result.remote = _remote(api, result.repo_id, head) if head else []
    except Exception as exc:  # noqa: BLE001
        result.notes.append(f"the remote could not be read back: {_hub_error(exc, 'read-back').message}")
        return
    if head == result.parent_commit:
        result.notes.append(f"no commit landed: {result.revision} is unchanged at {head} (not retried; re-run push)")
        return
    result.mismatches = _verify_remote(result, api, head, expected, git_ids) if head else ["the branch is gone"]
    if not result.mismatches and not result.create_pr:
        result.ok, result.commit_oid = True, head
        result.notes.append(f"the commit response was lost but {result.revision} moved to {head} and matches the "
                            "manifest: the push landed")
        result.error = None
    else:
        result.notes.append(f"{result.revision} moved from {result.parent_commit} to {head} (another writer?); "
                            "its files are listed in `remote`")
