"""``push``: validate, stage, hash, ONE commit with explicit operations, then read the remote back."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..support._extras import need
from ..errors import DestinationError, EagleconvError, MissingExtraError, UsageError
from ..readers.inspection import inspect
from ..io.hub_paths import check_repo_id, check_revision, is_hf_url, is_local_path
from ..io.reader import STATE_DICT, is_state_dict, open_state_dict, require_source
from ..io.debris import remove_tree, staging_name
from ..io.staging import StagedDirectory
from ..io.writer import check_not_overlapping, write_state_dict
from ..support.jsonio import load_json
from ..validation import validate
from ..validation.api import add_forward, apply_ignore
from ..hubread.base import CARD, MANIFEST, HubError, ManifestEntry, Step, hub_endpoint, hub_error, offline
from ..hubread.download import quiet_tqdm
from ..hubread.manifest import build_manifest, hash_file, manifest_json, verify_manifest
from ..hubread.timeouts import hub_timeout, hub_timeouts
from ._base import (HASHING, LICENSE, Progress, PushReport, RemoteFile, SCANNING, STAGING, TMP_STAGE, TMP_STATE_DICT,
                    UPLOADING, WEIGHT_SUFFIXES)
from ._evaluation import read_acceptance
from ._card import model_card, publish_findings, serve_command, served_as, speculative_tokens, verifier_of
from ._transfer import _bytes_step, _copy_files, _takes, checkpoint_files

if TYPE_CHECKING:
    from huggingface_hub import HfApi


def push(path: str | Path | Mapping[str, object], repo_id: str, *, config: object = None, revision: str | None = None,
         create_pr: bool = False, private: bool = False, endpoint: str | None = None, token: str | bool | None = None,
         engines: Iterable[str] | str = ("vllm",), strict: bool = False, ignore: Iterable[str] = (), numeric: bool = True,
         dry_run: bool = False, stage_dir: str | Path | None = None, base_model: str | None = None,
         forward: bool = True, license: str = LICENSE, timeout: float | None = None,  # noqa: A002 - the card field
         commit_message: str | None = None, progress: Step | Progress | None = None,
         acceptance: str | Path | None = None) -> PushReport:
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

    The card carries the engine matrix (a verdict per engine profile and the finding codes behind it) and, with
    ``acceptance`` (a ``simulate --json`` or ``measure --json`` report), the AL, per-position acceptance, K, engine
    and version and the prompts' hash as model-index evaluation results (hub._evaluation).

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
    require_source(path, config, "path")
    if is_hf_url(path):
        raise UsageError("push publishes a local directory; pull the repository first")
    check_repo_id(repo_id)
    if base_model is not None and is_local_path(base_model):
        raise UsageError(f"--base-model {base_model!r} is a local path, not a Hub id")
    revision = check_revision(revision or "main")
    hub_timeout(timeout)  # a bad --timeout / EAGLECONV_HUB_TIMEOUT is a usage error before the slow part
    measured = read_acceptance(acceptance) if acceptance is not None else None  # a bad report: before the slow part
    if is_state_dict(path):
        return _push_state_dict(path, config, repo_id, revision=revision, create_pr=create_pr,  # type: ignore[arg-type]
                                private=private, endpoint=endpoint, token=token, engines=engines, strict=strict,
                                ignore=ignore, numeric=numeric, dry_run=dry_run, stage_dir=stage_dir,
                                base_model=base_model, forward=forward, license=license, timeout=timeout,
                                commit_message=commit_message, progress=progress, acceptance=acceptance)
    source = Path(path)  # type: ignore[arg-type]
    seen = _stat(source)  # what validation reads; the staged copy must be of the same bytes
    step = progress if callable(progress) else None
    report = validate(source, engines=engines, numeric=numeric, progress=_bytes_step(step, SCANNING))
    skipped = None
    if forward and report.ok:  # a drafter already refused is not run: its tensors may not even form a model
        try:
            need("torch", "push's forward check")
        except MissingExtraError as exc:  # the core install: push still gates on the static and numeric checks
            skipped = (f"forward pass skipped: {exc} to run it (--no-forward skips it without this note); "
                       "gated on the static and numeric checks")
        else:
            add_forward(report, source, engines=engines)
    config = _config_of(source)
    inspected = inspect(source) if report.ok else None
    extra = publish_findings(config, inspected)
    findings = [f for f in report.findings if f.code != "EC080"] + extra
    findings = [f for f in findings if f.code != "EC041"] + served_as(repo_id, engines)
    report = apply_ignore(report.model_copy(update={"findings": findings}), ignore)
    result = PushReport(ok=False, source=str(source), repo_id=repo_id, revision=revision, create_pr=create_pr,
                        private=private, endpoint=hub_endpoint(endpoint), dry_run=dry_run, validation=report,
                        publish_findings=extra)
    if not forward:
        result.notes.append("no forward pass (--no-forward): static and numeric checks only")
    if skipped:
        result.notes.append(skipped)
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
            card = model_card(repo_id, inspected, report, result.base_model, result.serve_command, entries, license,
                              measured)
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


def _push_state_dict(state_dict: Mapping[str, object], config: object, repo_id: str, **options: Any) -> PushReport:
    """push() of an in-memory checkpoint: written as a directory under $TMPDIR, pushed, removed.

    The directory carries an owned staging name (as push's own staging copy does), so if push is killed the
    next one removes it.  Errors and reports name ``<state_dict>`` (or ``config``), never that directory.
    """
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


def _config_of(source: Path) -> dict[str, object]:
    from ..support.bounds import check_config

    config = load_json(source / "config.json")
    if isinstance(config, dict):
        check_config(config, source / "config.json")
    return config if isinstance(config, dict) else {}


def _api(endpoint: str | None, token: str | bool | None) -> HfApi:
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub_endpoint(endpoint), token=token)


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
                quiet = {"tqdm_class": quiet_tqdm(None)} if _takes(api.hf_hub_download, "tqdm_class") else {}
                fetched = Path(api.hf_hub_download(result.repo_id, name, revision=commit, cache_dir=cache,
                                                   **quiet))  # not over the CLI's bars (hub >= 1.0 takes a class)
                sha = hash_file(fetched)[0]
            except Exception as exc:  # noqa: BLE001 - fail closed: not verified is not ok
                problems.append(f"{name}: unverified: the remote lists no hash and fetching it to hash it failed "
                                f"({hub_error(exc, 'download').message})")
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
    except Exception as exc:
        raise hub_error(exc, "before the commit (nothing was uploaded)", f"{result.endpoint or 'hub'}/{repo_id}") from exc
    result.parent_commit = parent
    uploading = {e.path for e in entries} | {MANIFEST}
    result.deleted = sorted(f.path for f in before if f.path not in uploading and f.path.endswith(WEIGHT_SUFFIXES))
    operations: list[CommitOperationAdd | CommitOperationDelete] = [
        CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(staged / name)) for name in sorted(uploading)]
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
        result.error = hub_error(exc, "the commit failed").message
        _reconcile(result, api, expected, git_ids)
        return
    if progress:
        progress(UPLOADING, size, size)
    result.commit_oid, result.commit_url, result.pr_url = info.oid, str(info.commit_url), info.pr_url
    try:
        result.remote = _remote(api, repo_id, info.oid)
    except Exception as exc:  # noqa: BLE001
        result.error = hub_error(exc, f"the commit {info.oid} landed but its file list could not be read").message
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
        result.notes.append(f"the remote could not be read back: {hub_error(exc, 'read-back').message}")
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
