"""``pull``: download a snapshot, verify its manifest, validate it, then place it atomically."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..errors import UsageError
from ..io.hub_paths import HubRef, check_repo_id, check_revision, is_hf_url, parse_hf_url
from ..io.staging import StagedDirectory
from ..readers.loading import recognise_checkpoint
from ..validation import validate
from ..hubread.base import CARD, MANIFEST, Step
from ..hubread.download import download
from ..hubread.manifest import read_manifest, repo_files, verify_manifest
from ._base import PLACING, PullReport, SCANNING
from ._evaluation import read_card
from ._transfer import _bytes_step, _copy_files, checkpoint_files


def pull(repo_id: str, destination: str | Path, *, revision: str | None = None, endpoint: str | None = None,
         token: str | bool | None = None, engines: Iterable[str] | str = ("vllm",), force: bool = False,
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
    staged = StagedDirectory(dest, overwrite=overwrite, recognise=recognise_checkpoint)
    snapshot, commit = download(HubRef(repo_id, revision), endpoint=endpoint, token=token, timeout=timeout,
                                progress=progress)
    verified, notes = verify_manifest(snapshot)
    report = validate(snapshot, engines=engines, ignore=ignore, progress=_bytes_step(progress, SCANNING))
    if verified:
        names = sorted({e.path for e in read_manifest(snapshot) or []} | {MANIFEST})
    else:  # no manifest: only what makes up the checkpoint, never a repository's scripts or optimizer state
        names = sorted({*checkpoint_files(snapshot)[0], *([CARD] if (snapshot / CARD).is_file() else [])})
    left_out = [n for n in repo_files(snapshot) if n not in names and n != ".gitattributes"]
    result = PullReport(ok=report.ok, repo_id=repo_id, revision=revision, commit=commit, snapshot=str(snapshot),
                        manifest_verified=verified, files=names, validation=report, notes=[*staged.notes, *notes],
                        card=read_card(snapshot / CARD))
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
