"""``eagleconv.validate()`` and ``lint()``: every finding for a checkpoint (or a config alone), per engine.

Order of work: refuse what is not an EAGLE-3 drafter (EC002), read it through
its layout, add the engine-independent findings, then each engine profile's,
then the target's and, last and optionally, the streamed numeric scan.  A
duplicate JSON key (EC001) or a non-EAGLE-3 input (EC002) becomes an error
finding in the report (exit 1), not an exception: the input was readable
enough to judge.  Unreadable or unsafe input still raises (exit 2).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engines import resolve_engines
from ..engines.base import Subject
from ..engines.checks import family_of
from ..engines.view import engine_findings
from ..errors import ArgumentTypeError, EagleconvError, FormatError, UsageError
from ..formats import LAYOUTS, detect_layout, get_layout, read_drafter
from ..formats.base import Layout, Seen, architectures_of
from ..formats.base.reading import ReadResult
from ..io.checkpoint import Checkpoint
from ..gguf.gguf_file import open_if_gguf
from ..io.reader import open_state_dict
from ..io.state_dict import require_source
from ..io.tensor_store import CHUNK_BYTES, TensorStore
from ..hubread.remote import open_hf_headers, reads_headers
from ..io.remote import needs_download
from ..readers.loading import open_checkpoint
from ..support.jsonio import config_dict
from ..spec.report import Finding, FlagsView, ValidationReport
from .codes import CODES
from .semantics import semantics_findings
from .structural import flag_findings, read_findings, shape_findings, vocab_findings
from .target import load_target, target_findings

if TYPE_CHECKING:
    from ..io.tensor_store import TensorInfo
    from ..support.jsonio import JSONObject, JSONValue

# (on_total, on_bytes) callbacks a caller can pass to follow the numeric scan
Progress = tuple[Callable[[int], None] | None, Callable[[int], None] | None]

JUDGED_CODES = ("EC001", "EC002")  # errors about the input that are reported as findings, not raised
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def not_eagle3(config: Mapping[str, JSONValue], tensors: Mapping[str, TensorInfo] | None) -> str | None:
    """Why this is an EAGLE-1/EAGLE-2 drafter (or no drafter), or None."""
    kind = config.get("speculators_model_type")
    if kind is not None and kind != "eagle3":
        return f"speculators_model_type {kind!r}: not an EAGLE-3 speculator"
    if tensors:
        fc = tensors.get("fc.weight") or tensors.get("model.fc.weight")
        has_head = any(n.endswith("lm_head.weight") for n in tensors)
        if fc is not None and len(fc.shape) == 2 and fc.shape[1] == 2 * fc.shape[0] and not has_head \
                and "draft_vocab_size" not in config:
            return (f"fc.weight is {list(fc.shape)} (= [H, 2H]: embedding + one feature, the EAGLE-1/EAGLE-2 "
                    "input) and there is no lm_head and no draft_vocab_size")
        return None
    eagle3_marks = ("draft_vocab_size", "target_hidden_size", "num_aux_hidden_states", "eagle_aux_hidden_state_layer_ids",
                    "eagle_config", "fc_norm", "norm_output", "norm_before_fc", "speculators_model_type", "eagleconv")
    if not any(k in config for k in eagle3_marks) and not any("eagle3" in a.lower() for a in architectures_of(config)):
        return ("the config has no EAGLE-3 field (draft_vocab_size, target_hidden_size, aux layer ids, eagle_config, "
                "EAGLE-3 architecture): an EAGLE-1/EAGLE-2 config or not a drafter config")
    return None


# -- running the checks ----------------------------------------------------------------

def _flags_of(read: ReadResult | None, layout: type[Layout] | None, config: Mapping[str, JSONValue]) -> dict[str, bool]:
    if read is not None and read.spec is not None:
        return read.spec.flags.model_dump()

    subject = Subject(dict(config), layout=layout, read=read, names=set(), has_tensors=False)
    flags = {}
    for flag in ("fc_norm", "norm_before_fc", "norm_output", "norm_before_residual", "use_aux_hidden_state"):
        value = subject.stated(flag)
        flags[flag] = bool(value) if value is not None else flag == "use_aux_hidden_state"
    return flags


def _dedupe_sorted(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (f.code, f.severity, f.message, f.tensor, f.engine)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return sorted(out, key=lambda f: (SEVERITY_ORDER[f.severity], f.code))


def _report(findings: list[Finding], **fields: Any) -> ValidationReport:
    findings = _dedupe_sorted(findings)
    return ValidationReport(ok=not any(f.severity == "error" for f in findings), findings=findings, **fields)


def duplicate_findings(file: str | Path, keys: list[str]) -> list[Finding]:
    """EC001 for each duplicate key; the analysis goes on with the value engines read (the last)."""
    return [Finding(code="EC001", severity="error",
                    message=f"{file}: duplicate key {key!r}; judged with its last value, which Python's json (and so "
                            "vLLM and SGLang) keeps, while other parsers keep the first or refuse the file")
            for key in dict.fromkeys(keys)]


def _judged(exc: EagleconvError) -> Finding:
    where = f" ({exc.path})" if exc.path else ""
    return Finding(code=exc.code or "EC002", severity="error", message=exc.message + where)


def check(config: JSONObject, store: TensorStore | None, *, path: str | None, layout_name: str | None,
          engines: Iterable[str] | str, target: str | Path | None, tp: int | None, numeric: bool, chunk_bytes: int,
          weights_kind: str = "safetensors", metadata: Mapping[str, str] | None = None,
          progress: Progress | None = None, prior: list[Finding] | None = None) -> ValidationReport:
    """Validate ``config`` (+ ``store``'s tensors when given) against ``engines``: the core of validate and lint.

    ``prior``: findings made while reading the input (EC001), reported with the rest.
    """
    require_arguments(target, tp)
    profiles = resolve_engines(engines)
    target_info = load_target(target) if target is not None else None
    common = {"path": path, "engines": [p.label for p in profiles], "numeric_scan": False,
              "target": str(target) if target is not None else None, "tp": tp}
    tensors = store.tensors if store is not None else {}
    earlier = list(prior or [])
    reason = not_eagle3(config, tensors if store is not None else None)
    if reason is not None:
        return _report([*earlier, Finding(code="EC002", severity="error", message=f"not an EAGLE-3 drafter: {reason}")],
                       **common)
    try:
        if layout_name is not None:
            layout, detected_by = get_layout(layout_name), [f"--from {layout_name}"]
        elif store is not None:
            layout, detected_by = detect_layout(config, set(tensors), metadata or {}, weights_kind, path)
        else:
            layout, detected_by = detect_layout(config, None, path=path)
    except FormatError as exc:
        if exc.code != "EC002":
            raise
        return _report([*earlier, _judged(exc)], **common)
    read = read_drafter(layout, config, tensors)
    findings = read_findings(read) + shape_findings(read) if store is not None else read_findings(read, False)
    # Engine profiles say per engine what a flag/tensor disagreement does; keep only the engine-free EC020 then.
    findings += [f for f in flag_findings(read) if f.code == "EC020" or not profiles] if store is not None else []
    if store is not None:
        from .numeric import dtype_findings

        findings += vocab_findings(read, store) + dtype_findings(read)
    subject = Subject(dict(config), layout=layout, read=read, names=set(tensors), has_tensors=store is not None, path=path,
                      target=target_info, tp=tp)
    if store is None and read.spec is not None:
        findings += [f for f in flag_findings(read) if f.code == "EC020"]
    for profile in profiles:
        if weights_kind == "gguf" and not profile.reads_gguf:
            findings.append(Finding(code="EC040", severity="info", engine=profile.label, message=(
                f"{profile.label} loads no GGUF drafter, so its checks do not apply: convert to its layout "
                "(`eagleconv convert SRC DST --to vllm`) to check what it will do")))
            continue
        findings += engine_findings(profile, subject, gguf=weights_kind == "gguf")
    flags = _flags_of(read, layout, config)
    findings += semantics_findings(layout.name, flags, config)
    if target_info is not None:
        findings += target_findings(read.spec, target_info, set(read.tensors))
    if numeric and store is not None:
        from .numeric import numeric_findings, scanned_bytes

        on_total, on_bytes = progress or (None, None)
        if on_total:
            on_total(scanned_bytes(read))
        findings += numeric_findings(read, store, chunk_bytes, on_bytes)
        common["numeric_scan"] = True
    spec = read.spec
    ids = list(spec.aux.ids) if spec is not None and spec.aux.ids is not None else subject.stated("aux_layer_ids")
    return _report(
        earlier + findings, format=layout.name, detected_by=detected_by,
        eagle_version=("3.1" if flags["fc_norm"] or flags["norm_output"] else "3"),
        architecture=spec.architecture if spec is not None else _family(subject),
        flags=FlagsView(**flags),
        aux_layer_ids=list(ids) if isinstance(ids, list | tuple) and ids and all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids) else None,  # else EC005 says why
        aux_layer_convention=(spec.aux.convention if spec is not None else
                              (layout.aux_convention_for(_family(subject) or "llama") if ids else None)),
        **common,
    )


def _family(subject) -> str | None:
    return family_of(subject)


def apply_ignore(report: ValidationReport, ignore: str | Iterable[str] | None) -> ValidationReport:
    """Move warnings and infos whose code is in ``ignore`` to ``report.ignored``.

    An ignored code is a judgement the user made (EC023 on every SpecForge 3.1
    checkpoint), so it stops failing ``--strict``; it is still listed.  Errors
    are never ignored: they mean the engine fails or computes something else.
    """
    codes = {c.strip().upper() for c in ignore_codes(ignore) if c.strip()}
    unknown = sorted(codes - set(CODES))
    if unknown:
        raise UsageError(f"--ignore: unknown finding code(s) {', '.join(unknown)} (see `eagleconv findings`)")
    if not codes:
        return report
    kept = [f for f in report.findings if f.code not in codes or f.severity == "error"]
    dropped = [f for f in report.findings if f.code in codes and f.severity != "error"]
    return report.model_copy(update={"findings": kept, "ignored": [*report.ignored, *dropped]})


def ignore_codes(ignore: str | Iterable[str] | None) -> list[str]:
    """``ignore`` as a list of codes: one code (a string, not iterated by character), an iterable of them, or None."""
    if ignore is None:
        return []
    if isinstance(ignore, str):
        return [ignore]
    if isinstance(ignore, Iterable) and not isinstance(ignore, bytes | Mapping):
        codes = list(ignore)
        bad = [c for c in codes if not isinstance(c, str)]
        if not bad:
            return codes
        raise ArgumentTypeError(f"ignore: finding codes are strings, not {type(bad[0]).__name__} ({bad[0]!r})")
    raise ArgumentTypeError(f"ignore must be a finding code or an iterable of codes, not {type(ignore).__name__}")


def require_arguments(target: object, tp: object) -> None:
    """``target`` a path and ``tp`` an int, or ArgumentTypeError naming them (a value out of range is EC051)."""
    if target is not None:
        ArgumentTypeError.require_path(target, "target")
    if tp is not None and (isinstance(tp, bool) or not isinstance(tp, int)):
        raise ArgumentTypeError(f"tp must be an int (tensor-parallel ranks) or None, not {type(tp).__name__} "
                                f"({tp!r:.40})")


def validate(source: str | Path | Mapping[str, object], config: object = None, *,
             engines: Iterable[str] | str = ("vllm",), target: str | Path | None = None, numeric: bool = True,
             tp: int | None = None, from_format: str | None = None, allow_pickle: bool = False,
             chunk_bytes: int = CHUNK_BYTES, progress: Progress | None = None,
             ignore: str | Iterable[str] = (), forward: bool = False,
             forward_options: Mapping[str, JSONValue] | None = None, download: bool = False) -> ValidationReport:
    """Validate a drafter checkpoint directory, or an in-memory state dict with its config, for ``engines``.

    ``config`` goes with a state dict only (io.reader.require_source: a mismatch is an ArgumentTypeError).
    ``source`` may also be ``hf://ORG/NAME[@REV]`` (downloaded through the
    Hugging Face cache, its MANIFEST.json verified).  ``ignore``: finding codes
    whose warnings/infos are listed in ``report.ignored`` instead (see
    :func:`apply_ignore`).  ``forward``: also run the drafter (the reference
    forward, once as intended and once per engine as it reads it) and add its
    report and findings (EC070); ``forward_options`` go to
    :func:`eagleconv.forward.validate_forward` (steps, prompts, seed, dtype,
    recipe, backend, device).  A checkpoint directory only, and only when
    its layout was read.

    ``hf://`` is read from its config, index and safetensors headers alone (range
    requests; ``report.hub`` states the commit and the bytes transferred): the
    same report as ``numeric=False`` on the downloaded snapshot.  ``download``
    fetches the whole snapshot instead, which the numeric scan and ``forward`` need.
    """
    require_source(source, config)
    require_arguments(target, tp)
    if forward and isinstance(source, Mapping):
        raise UsageError("forward=True needs a checkpoint directory: the forward pass reads weights from files")
    if reads_headers(source, download):
        if forward:
            raise needs_download("--forward", str(source))
        if allow_pickle:
            raise needs_download("--allow-pickle", str(source))
        return apply_ignore(_validate_headers(str(source), engines=engines, target=target, tp=tp,
                                              from_format=from_format), ignore)
    report = _validate(source, config, engines=engines, target=target, numeric=numeric, tp=tp,
                       from_format=from_format, allow_pickle=allow_pickle, chunk_bytes=chunk_bytes,
                       progress=progress)
    if forward and not isinstance(source, Mapping):  # (refused above; narrows the type)
        add_forward(report, source, engines=engines, target=target, allow_pickle=allow_pickle,
                    from_format=from_format, **dict(forward_options or {}))
    return apply_ignore(report, ignore)


def add_forward(report: ValidationReport, path: str | Path, *, engines: Iterable[str] | str = ("vllm",),
                target: str | Path | None = None, allow_pickle: bool = False, from_format: str | None = None,
                **options: Any) -> ValidationReport:
    """Run the reference forward on ``path`` and add its report and findings (EC070) to ``report``.

    Nothing is run when the static checks could not read the layout.  A drafter
    the forward cannot run (a tensor it reads is missing or misshapen) gets one
    EC071 per such tensor and no forward report: the structural findings (EC050)
    say why, and a half-built model must not crash the command.  ``options``
    go to :func:`eagleconv.forward.validate_forward` (steps, prompts, seed, dtype,
    recipe, backend, device).  Shared by ``validate(forward=True)``, the CLI's
    ``--forward`` and ``push``.
    """
    if report.format is None:
        return report
    from ..forward import UnrunnableDrafter, validate_forward

    try:
        result = validate_forward(path, engines=engines, target=target, allow_pickle=allow_pickle,
                                  layout=from_format, **options)
    except UnrunnableDrafter as exc:
        report.findings = [*report.findings, *(
            Finding(code="EC071", severity="error", tensor=name,
                    message=f"forward pass not run: {name} {why}") for name, why in exc.problems)]
        report.ok = False
        return report
    report.forward = result
    report.findings = [*report.findings, *result.findings]
    report.ok = report.ok and not any(f.severity == "error" for f in result.findings)
    return report


def _validate(source: str | Path | Mapping[str, object], config: object = None, *,
              engines: Iterable[str] | str = ("vllm",), target: str | Path | None = None, numeric: bool = True,
              tp: int | None = None, from_format: str | None = None, allow_pickle: bool = False,
              chunk_bytes: int = CHUNK_BYTES, progress: Progress | None = None) -> ValidationReport:
    """Validate a drafter checkpoint directory, or an in-memory state dict with its config, for ``engines``.

    ``source``: a checkpoint directory, or ``{name: torch.Tensor}`` (then
    ``config`` is required: a dict, a config.json path or a transformers
    ``PretrainedConfig``; see :func:`eagleconv.support.jsonio.config_dict`).  ``engines``:
    profile names ("vllm", "vllm:0.32", "sglang", "all"...).  ``target``: the
    target model's directory or config.json.  ``numeric=False`` reads headers
    and the small vectors (d2t, t2d) only.  ``progress``: optional
    ``(on_total, on_bytes)`` callbacks for the numeric scan.  Returns the same
    report as ``eagleconv validate --json``.
    """
    if isinstance(source, Mapping):
        keys: list[str] = []
        memory = open_state_dict(source, config, duplicates=keys)
        assert memory.config is not None
        return check(memory.config, memory, path=None, layout_name=from_format, engines=engines,
                     target=target, tp=tp, numeric=numeric, chunk_bytes=chunk_bytes, progress=progress,
                     prior=duplicate_findings(str(config), keys))

    duplicates: list[tuple[Path, str]] = []
    try:
        store = open_checkpoint(source, allow_pickle=allow_pickle, duplicates=duplicates, open_file=open_if_gguf)
    except EagleconvError as exc:
        if exc.code not in JUDGED_CODES:
            raise
        return _report([_judged(exc)], path=str(source), engines=[p.label for p in _profiles(engines)])
    try:
        if store.config is None:
            raise FormatError("no config.json: cannot tell which drafter layout this is", store.path)
        return check(store.config, store, path=str(store.path), layout_name=from_format, engines=engines,
                     target=target, tp=tp, numeric=numeric, chunk_bytes=chunk_bytes,
                     weights_kind=store.weights_kind, metadata=store.metadata, progress=progress,
                     prior=[f for file, key in duplicates for f in duplicate_findings(Path(source) / file.name, [key])])
    finally:
        store.close()


def _validate_headers(source: str, *, engines: Iterable[str] | str, target: str | Path | None, tp: int | None,
                      from_format: str | None) -> ValidationReport:
    """``hf://`` from its headers: ``check`` without tensor data, as ``numeric=False`` runs on a directory."""
    duplicates: list[tuple[Path, str]] = []
    try:
        store, cost = open_hf_headers(source, duplicates)
    except EagleconvError as exc:
        if exc.code not in JUDGED_CODES:
            raise
        return _report([_judged(exc)], path=source, engines=[p.label for p in _profiles(engines)])
    report = check_headers(store, duplicates, engines=engines, target=target, tp=tp, from_format=from_format)
    report.hub = cost()
    return report


def check_headers(store: Checkpoint, duplicates: list[tuple[Path, str]], *, engines: Iterable[str] | str,
                  target: str | Path | None = None, tp: int | None = None,
                  from_format: str | None = None) -> ValidationReport:
    """An opened checkpoint judged without its tensor data (d2t and t2d aside): what ``numeric=False`` runs.

    ``duplicates``: the (file, key) pairs its opening recorded (EC001).  The header-only ``hf://`` read and
    ``audit`` call it on a Hub repository's headers.
    """
    if store.config is None:
        raise FormatError("no config.json: cannot tell which drafter layout this is", store.label)
    return check(store.config, store, path=store.label, layout_name=from_format, engines=engines, target=target,
                 tp=tp, numeric=False, chunk_bytes=CHUNK_BYTES, weights_kind=store.weights_kind,
                 metadata=store.metadata,
                 prior=[f for file, key in duplicates for f in duplicate_findings(f"{store.label}/{file}", [key])])


def lint(config: object, *, engines: Iterable[str] | str = ("vllm",), target: str | Path | None = None,
         from_format: str | None = None, tp: int | None = None, ignore: str | Iterable[str] = ()) -> ValidationReport:
    """Check a drafter config.json alone (no tensors): what each engine will make of it.

    ``config``: a dict, a config.json path, a directory (its config.json is read) or a transformers
    ``PretrainedConfig`` (anything with ``to_dict()``).
    """
    require_arguments(target, tp)
    return apply_ignore(_lint(config, engines=engines, target=target, from_format=from_format, tp=tp), ignore)


def _lint(config: object, *, engines: Iterable[str] | str = ("vllm",), target: str | Path | None = None,
          from_format: str | None = None, tp: int | None = None) -> ValidationReport:
    path = None
    keys: list[str] = []
    hub = None
    if reads_headers(config):  # config.json alone, by one request
        duplicates: list[tuple[Path, str]] = []
        store, cost = open_hf_headers(str(config), duplicates, config_only=True)
        if store.config is None:
            raise FormatError("the repository has no config.json", store.label)
        config, path, hub = store.config, f"{store.label}/config.json", cost()
        keys = [key for _, key in duplicates]
    elif isinstance(config, str | os.PathLike):
        path = str(Path(config) / "config.json" if Path(config).is_dir() else config)
    config = config_dict(config, duplicates=None if hub is not None else keys)
    prior = duplicate_findings(path, keys) if path is not None else []
    report = check(config, None, path=path, layout_name=from_format, engines=engines, target=target, tp=tp,
                   numeric=False, chunk_bytes=CHUNK_BYTES, prior=prior)
    report.hub = hub
    if from_format is not None or report.format is None or report.aux_layer_ids is None:
        return report
    for other in numbering_alternatives(config, get_layout(report.format), report.architecture or "llama"):
        alt = check(config, None, path=path, layout_name=other.name, engines=engines, target=target, tp=tp,
                    numeric=False, chunk_bytes=CHUNK_BYTES, prior=prior)
        report = explain_layout_doubt(report, alt)
    return report


DECISIVE_SCORE = 50  # config-only detection at or above this is a marker (speculators_model_type, _torchspec_version...)


def numbering_alternatives(config: Mapping[str, JSONValue], chosen: type[Layout], family: str) -> list[type[Layout]]:
    """Layouts a config alone cannot rule out that number its aux ids differently from ``chosen``.

    A config without a layout marker is read as vLLM's (the HF-style fallback), but SpecForge writes the same
    keys with ``layer_output`` ids: only the tensor names (midlayer.*) tell them apart, and lint has none.
    """
    if chosen.detect(Seen(config, None))[0] >= DECISIVE_SCORE:
        return []
    archs = set(architectures_of(config))
    return [layout for layout in LAYOUTS.values() if layout is not chosen
            and (not archs or archs & {a for names in layout.architectures.values() for a in names})
            and layout.aux_convention_for(family) != chosen.aux_convention_for(family)]


def explain_layout_doubt(report: ValidationReport, alt: ValidationReport) -> ValidationReport:
    """Say which of lint's verdicts depend on the layout it guessed, and what reading ``alt``'s layout changes."""
    def verdicts(r: ValidationReport) -> dict[tuple[str, str | None, str], Finding]:
        return {(f.code, f.engine, f.severity): f for f in r.findings if f.severity != "info"}

    mine, theirs = verdicts(report), verdicts(alt)
    gone, new = [k for k in mine if k not in theirs], [k for k in theirs if k not in mine]
    if not gone and not new:
        return report
    how = (f"lint sees no tensor names, and a config alone cannot tell {report.format} from {alt.format} (the tensor "
           f"names do); as {alt.format}, whose aux ids are {alt.aux_layer_convention}-numbered")
    fix = f"`eagleconv validate` the checkpoint, or pass --from {alt.format}"
    findings = [f.model_copy(update={"message": f"{f.message} [{how}, this finding goes away: {fix}]"})
                if (f.code, f.engine, f.severity) in gone else f for f in report.findings]
    changes = [f"{k[2]} {k[0]}" + (f" ({k[1]})" if k[1] else "") for k in new]
    findings.append(Finding(code="EC012", severity="info", message=(
        f"{how}, the verdicts differ: " + (f"that reading adds {', '.join(changes)}" if changes else "it adds none")
        + (f" and drops the {len(gone)} finding(s) marked so" if gone else "") + f"; {fix}")))
    return report.model_copy(update={"findings": _dedupe_sorted(findings)})


def _profiles(engines: Iterable[str] | str):
    return resolve_engines(engines)
