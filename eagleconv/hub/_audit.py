"""``audit``: many Hub repositories judged from their headers, one row each, streamed to a JSONL file.

Each repository is read as ``validate hf://`` reads one (``hubread.remote``: its info, config.json, the index and the
safetensors headers, at one commit) and judged by the same checks for the named engines.  A failure is a row,
never a crash: the states in :data:`STATES` say why a repository was not judged.  Rows are appended to the
rows file as they finish, one complete line each and fsynced, so a killed audit loses at most the rows in
flight, and ``resume`` skips the repositories already there (a line torn by the kill is dropped and redone).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from ..spec.drafter import EAGLE31_FLAGS
from ..engines import resolve_engines
from ..errors import EagleconvError, UsageError
from ..io.hub_paths import HF_SCHEME, HubRef, check_repo_id, check_revision
from ..spec.report import ValidationReport, _Report
from ._evaluation import EngineVerdict, engine_matrix
from ..hubread.ranges import HubHTTPError, RangeReader
from ..hubread.remote import NoDrafterFiles, PickleWeights, open_remote

RowState = Literal["audited", "not-eagle", "pickle", "unsafe", "gated", "private", "missing", "rate-limited",
                   "failed"]
STATES: dict[str, str] = {
    "audited": "read and judged: the engine columns say what each engine does with it",
    "not-eagle": "no EAGLE-3 drafter: no config.json, no weights, or an EAGLE-1/2 or other model (EC002)",
    "pickle": "weights are pickles: not judged from headers (validate --download --allow-pickle)",
    "unsafe": "a config, index or safetensors header refused as malformed or hostile",
    "gated": "a gated repository whose files this token may not read",
    "private": "private (or not visible to this token): the Hub answered 401",
    "missing": "no such repository or revision: the Hub answered 404",
    "rate-limited": "still 429 after its Retry-After was honoured",
    "failed": "the Hub failed (5xx), stalled, or cut an answer short",
}
FailOn = Literal["never", "error", "warning"]


class AuditRow(_Report):
    """One repository of ``eagleconv audit``: one line of its rows file."""

    repo_id: str
    revision: str | None = None
    state: RowState = Field(description="; ".join(f"{k}: {v}" for k, v in STATES.items()))
    commit: str | None = Field(None, description="the commit every file was read at")
    bytes_transferred: int = 0
    requests: int = 0
    seconds: float = 0.0
    layout: str | None = None
    eagle_version: Literal["3", "3.1"] | None = None
    eagle31_flags: list[str] = Field(default_factory=list, description="the EAGLE-3.1 flags set (fc_norm, norm_output)")
    architecture: str | None = None
    aux_layer_ids: list[int] | None = None
    aux_layer_convention: str | None = None
    engines: list[EngineVerdict] = Field(default_factory=list, description="each engine's verdict (as push's card)")
    ok: bool | None = Field(None, description="no error finding (null: not judged)")
    errors: int = 0
    warnings: int = 0
    first_error: str | None = Field(None, description="the first error finding, 'ECnnn: message'")
    error: str | None = Field(None, description="why the repository was not judged: one line")


class AuditSummary(_Report):
    """What ``eagleconv audit --json`` prints: counts per state and per engine verdict, and every row."""

    ok: bool = Field(description="false when --fail-on found what it fails on")
    fail_on: FailOn
    repositories: int
    skipped: int = Field(description="already in the rows file (--resume): not read again, but counted and listed")
    states: dict[str, int]
    with_errors: int = Field(description="audited repositories with at least one error finding")
    verdicts: dict[str, dict[str, int]] = Field(description="engine -> verdict -> repositories")
    bytes_transferred: int
    seconds: float
    rows_file: str | None = None
    rows: list[AuditRow]


def parse_repo(text: str) -> HubRef:
    """``ORG/NAME``, ``ORG/NAME@REV`` or ``hf://ORG/NAME[@REV]`` -> HubRef (UsageError otherwise)."""
    body = text.strip().removeprefix(HF_SCHEME)
    repo_id, at, revision = body.partition("@")
    check_repo_id(repo_id)
    if at:
        check_revision(revision)
    return HubRef(repo_id, revision or None)


def _failed_state(exc: EagleconvError) -> RowState:
    if isinstance(exc, HubHTTPError):
        if exc.error_code == "GatedRepo":
            return "gated"
        if exc.status == 401:
            return "private"
        if exc.status == 404 and exc.error_code in ("RepoNotFound", "RevisionNotFound", None):
            return "missing"
        if exc.status == 403:
            return "private"
        return "rate-limited" if exc.status == 429 else "failed"
    if isinstance(exc, NoDrafterFiles) or exc.code == "EC002":
        return "not-eagle"
    if isinstance(exc, PickleWeights):
        return "pickle"
    from ..hubread.base import HubError

    return "failed" if isinstance(exc, HubError) else "unsafe"


def _judged(row: AuditRow, report: ValidationReport) -> AuditRow:
    errors = [f for f in report.findings if f.severity == "error"]
    if report.format is None and any(f.code == "EC002" for f in errors):
        row.state = "not-eagle"
    row.layout, row.eagle_version, row.architecture = report.format, report.eagle_version, report.architecture
    row.eagle31_flags = [f for f in EAGLE31_FLAGS if report.flags is not None and getattr(report.flags, f)]
    row.aux_layer_ids, row.aux_layer_convention = report.aux_layer_ids, report.aux_layer_convention
    row.engines = engine_matrix(report) if report.format is not None else []
    row.ok, row.errors = report.ok, len(errors)
    row.warnings = sum(f.severity == "warning" for f in report.findings)
    row.first_error = f"{errors[0].code}: {errors[0].message}" if errors else None
    return row


def audit_one(ref: HubRef, *, engines: Iterable[str] | str = ("vllm",), endpoint: str | None = None,
              token: str | bool | None = None, timeout: float | None = None) -> AuditRow:
    """One repository's row: read from its headers and judged, or the state saying why it could not be."""
    from ..validation.api import check_headers

    started = time.monotonic()
    reader = RangeReader(endpoint, token, timeout)
    row = AuditRow(repo_id=ref.repo_id, revision=ref.revision, state="audited")
    try:
        duplicates: list[tuple[Path, str]] = []
        store = open_remote(ref, reader, duplicates)
        row.commit = store.label.rpartition("@")[2]
        row = _judged(row, check_headers(store, duplicates, engines=engines))
    except EagleconvError as exc:
        row.state, row.error = _failed_state(exc), exc.one_line()
    except Exception as exc:  # noqa: BLE001 - a failure is a row: one repository must not end a 1,000-row audit
        row.state, row.error = "failed", f"internal error: {type(exc).__name__}: {exc}"[:500]
    row.bytes_transferred, row.requests = reader.bytes_read, reader.requests
    row.seconds = round(time.monotonic() - started, 3)
    return row


class RowsFile:
    """The rows file: one JSON row per line, appended and fsynced as each finishes (thread-safe)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._fd: int | None = None

    def read(self) -> list[AuditRow]:
        """The complete rows already written; a torn last line (a kill mid-write) is cut off, to be redone."""
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        rows, good = [], 0
        for number, line in enumerate(data.split(b"\n")[:-1] if data else [], start=1):
            try:
                rows.append(AuditRow.model_validate_json(line))
            except ValidationError:
                raise UsageError(f"line {number} is not an audit row: not a rows file to resume", self.path) from None
            good += len(line) + 1
        if good != len(data):  # the last line has no newline: torn by a kill, dropped here and audited again
            with open(self.path, "r+b") as f:
                f.truncate(good)
                os.fsync(f.fileno())
        return rows

    def append(self, row: AuditRow) -> None:
        line = row.model_dump_json().encode() + b"\n"
        with self._lock:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def search(words: str | None = None, *, author: str | None = None, limit: int | None = None,
           endpoint: str | None = None, token: str | bool | None = None) -> list[str]:
    """Repository ids from the Hub's model search (``HfApi.list_models``)."""
    from huggingface_hub import HfApi

    from ..hubread.base import hub_endpoint, hub_error

    try:
        return [m.id for m in HfApi(endpoint=hub_endpoint(endpoint), token=token).list_models(
            search=words, author=author, limit=limit)]
    except Exception as exc:  # one line naming the search, whatever huggingface_hub raised
        raise hub_error(exc, "the Hub search failed", f"search {words!r}") from exc


def audit(repos: Sequence[str], *, engines: Iterable[str] | str = ("vllm",), jobs: int = 4,
          out: str | Path | None = None, resume: bool = False, fail_on: FailOn = "never",
          endpoint: str | None = None, token: str | bool | None = None, timeout: float | None = None,
          progress: Callable[[AuditRow, int, int], None] | None = None) -> AuditSummary:
    """Audit ``repos`` (``ORG/NAME[@REV]``) with ``jobs`` threads; each row goes to ``out`` as it finishes.

    ``resume`` skips the repositories ``out`` already lists (they are in the summary as read from it).
    ``fail_on``: "error" makes ``ok`` false when a row has an error finding or was not judged (any state but
    audited); "warning" also for warnings.  ``progress(row, done, total)`` after each row.
    """
    profiles = [p.label for p in resolve_engines(engines)]  # a bad engine name is a UsageError before any request
    if jobs < 1:
        raise UsageError(f"jobs must be at least 1, not {jobs}")
    refs = list(dict.fromkeys(parse_repo(r) for r in repos))
    rows_file = RowsFile(out) if out is not None else None
    if resume and rows_file is None:
        raise UsageError("resume needs a rows file (--out)")
    if rows_file is not None and not resume and rows_file.path.exists() and rows_file.path.stat().st_size:
        raise UsageError("the rows file exists: --resume continues it, or name another", rows_file.path)
    done = rows_file.read() if rows_file is not None and resume else []
    seen = {(r.repo_id, r.revision) for r in done}
    todo = [ref for ref in refs if (ref.repo_id, ref.revision) not in seen]
    started = time.monotonic()
    asked = {(f.repo_id, f.revision) for f in refs}
    rows = [r for r in done if (r.repo_id, r.revision) in asked]
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = [pool.submit(audit_one, ref, engines=engines, endpoint=endpoint, token=token, timeout=timeout)
                   for ref in todo]
        for future in as_completed(futures):
            row = future.result()
            if rows_file is not None:
                rows_file.append(row)
            rows.append(row)
            if progress is not None:
                progress(row, len(rows), len(refs))
    finally:  # on Ctrl-C: the rows in flight finish (each bounded by the timeout), the queued ones never start
        pool.shutdown(wait=True, cancel_futures=True)
        if rows_file is not None:
            rows_file.close()
    order = {(ref.repo_id, ref.revision): i for i, ref in enumerate(refs)}
    rows.sort(key=lambda r: order.get((r.repo_id, r.revision), len(order)))
    return summarise(rows, profiles, fail_on=fail_on, skipped=len(refs) - len(todo),
                     seconds=time.monotonic() - started, rows_file=str(out) if out is not None else None)


def summarise(rows: list[AuditRow], engines: list[str], *, fail_on: FailOn = "never", skipped: int = 0,
              seconds: float = 0.0, rows_file: str | None = None) -> AuditSummary:
    states = {s: sum(r.state == s for r in rows) for s in STATES}
    verdicts: dict[str, dict[str, int]] = {e: {} for e in engines}
    for row in rows:
        for v in row.engines:
            verdicts.setdefault(v.engine, {})
            verdicts[v.engine][v.verdict] = verdicts[v.engine].get(v.verdict, 0) + 1
    failing = {"never": lambda r: False,
               "error": lambda r: r.state != "audited" or not r.ok,
               "warning": lambda r: r.state != "audited" or not r.ok or r.warnings > 0}[fail_on]
    return AuditSummary(ok=not any(failing(r) for r in rows), fail_on=fail_on, repositories=len(rows),
                        skipped=skipped, states={k: v for k, v in states.items() if v},
                        with_errors=sum(r.state == "audited" and r.ok is False for r in rows), verdicts=verdicts,
                        bytes_transferred=sum(r.bytes_transferred for r in rows), seconds=round(seconds, 3),
                        rows_file=rows_file, rows=rows)


def read_repo_list(path: str | Path) -> list[str]:
    """A file of repository ids, one a line (``#`` starts a comment)."""
    from ..support.jsonio import MAX_JSON_BYTES

    file = Path(path)
    try:
        if file.stat().st_size > MAX_JSON_BYTES:
            raise UsageError(f"larger than {MAX_JSON_BYTES} bytes: not a list of repository ids", file)
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the repository list: {getattr(exc, 'strerror', None) or exc}", file) from exc
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]
