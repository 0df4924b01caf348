"""Conversion as source -> transform -> emit, through one streaming, staged, verified writer.

*Source*: a checkpoint read into a DrafterSpec and canonical tensor names
(:func:`~eagleconv.readers.loading.load_drafter`).  *Transform*: what changes besides
the layout: nothing for ``convert``; for ``upgrade``/``downgrade`` a new spec
plus tensors computed in memory (:class:`Transform`).  *Emit*: the plan
(:func:`plan_conversion`), every source tensor going to exactly one
destination tensor or dropped by a named rule the report lists, then the
writer.  Copied bytes are never changed: the kernel copies them from the
source file.  A tensor the destination needs and the source lacks is derived
only when that is exact (t2d from d2t); computed tensors are the only ones
built in memory.

The steps live one job to a module (issue 26): what a transform hands over (:mod:`~eagleconv.conversion.transform`),
the plan (:mod:`~eagleconv.conversion.plan`), and the checks of the staged output (:mod:`~eagleconv.conversion.verify`);
this module runs them through the writer.  Every name ``eagleconv.conversion`` offered before stays importable from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._version import __version__
from ..spec.drafter import AuxConvention, Verifier
from ..errors import ArgumentTypeError, ConversionError
from ..io.gguf_writer import GgufTensor, StagedFile, write_gguf
from ..io.hub_paths import local_path, require_download
from ..io.reader import is_state_dict, require_source
from ..io.writer import CheckpointWriter, check_not_overlapping
from ..gguf.gguf_output import gguf_tensors, metadata as gguf_metadata, require_target
from ..gguf.gguf_target import read_target
from ..support.jsonio import dump_json
from ..readers.loading import LoadedDrafter, load_drafter, recognise_checkpoint
from ..spec.report import ConvertReport, Finding
from ..validation.structural import checkpoint_findings
from .plan import _plan, refuse_without_verifier
from .transform import Computed, Transform  # noqa: F401 - Computed: re-exported (transforms, eagle31, tests)
from .verify import _NumericCheck, _verify_output, plan_sources

# Names this module held before issue 26's split, re-exported for their old import path.
from .plan import _derive, output_findings, plan_conversion  # noqa: F401

def convert(source: str | Path | Mapping[str, object], destination: str | Path, to: str | None, *,
            config: object = None, from_format: str | None = None,
            dry_run: bool = False, force: bool = False, overwrite: bool = False, drop: Iterable[str] = (),
            aux_layer_ids: Sequence[int] | None = None, aux_convention: AuxConvention = "hidden_state_index",
            verifier: str | Verifier | None = None, max_shard_size: int | None = None, allow_pickle: bool = False,
            durable: bool = True, numeric: bool = True, on_bytes: Callable[[int], None] | None = None,
            on_total: Callable[[int], None] | None = None,
            transform: Callable[[LoadedDrafter], Transform] | None = None,
            require_verifier: bool = False, target: str | Path | None = None,
            outtype: str | None = None, download: bool = True) -> ConvertReport:
    """Convert ``source`` to layout ``to`` (None: the source's own) at ``destination``.  See the module docstring.

    ``source``: a checkpoint directory (or ``hf://ORG/NAME[@REV]``), or an in-memory state dict
    ``{name: torch.Tensor}`` as a training loop holds it, with its ``config`` (a dict, a config.json path or a
    transformers ``PretrainedConfig``); the state dict is read where it is, never written out as a source.
    ``download``: an ``hf://`` source is downloaded whole (convert needs every weight); False refuses it, as
    the CLI does without ``--download``.  True by default: a caller who passes ``hf://`` here asks for it.

    ``require_verifier``: refuse (ConversionError, nothing written) an output whose layout names a verifier
    (speculators) when neither ``verifier`` nor the source names one; the CLI sets it unless
    ``--allow-no-verifier``.  Otherwise such an output gets an EC043 warning.

    ``transform``: builds the :class:`Transform` (upgrade, downgrade) from the
    opened source; its computed tensors go through the same plan, staging and
    verification as copied ones.  ``verifier``: see :func:`plan_conversion`.

    ``to="gguf"`` writes llama.cpp's draft GGUF, one file at ``destination`` (``eagleconv.gguf.gguf_output``):
    ``target`` (required) is the target's GGUF or HF directory, ``outtype`` (f32/f16/bf16) converts floats.

    ``durable=False`` skips fsync (the output is still published atomically).
    ``numeric`` checks every float tensor for NaN/Inf (EC060) as it is written,
    on the staged bytes while they are in the page cache; ``numeric=False``
    (``--no-numeric``) skips that and says so in the report's notes.
    Raises ConversionError (exit 1) when the source has error findings (unless
    ``force``) or cannot be converted exactly; UsageError/UnsafeInputError
    (exit 2) for bad arguments or unsafe input.  Nothing is written on error.
    A destination the writer would refuse (it exists without ``overwrite``, is not a checkpoint, is the
    current directory) is refused before ``transform`` and the plan run, so no measurement is wasted on it.
    """
    require_source(source, config)
    ArgumentTypeError.require_path(destination, "destination")
    require_download(source, "convert", download)
    # hf://ORG/NAME[@REV]: the verified cache snapshot.  A state dict has no files to overlap the destination.
    sources = [] if is_state_dict(source) else [local_path(source)]  # type: ignore[arg-type]
    check_not_overlapping(sources, destination)
    loaded = load_drafter(sources[0] if sources else source, config=config, layout=from_format,
                          allow_pickle=allow_pickle)
    try:
        to = to or loaded.layout.name
        require_target(target, outtype, to)
        target_meta = read_target(target) if to == "gguf" and target is not None else None
        # Every check that can refuse the destination (it exists, --overwrite of a non-checkpoint, the
        # current directory) runs here, before the transform (calibration, divergence) and the plan.
        writer: CheckpointWriter | StagedFile | None = None
        if not dry_run:
            writer = (StagedFile(destination, overwrite=overwrite, durable=durable) if to == "gguf" else
                      CheckpointWriter(destination, sources=sources, overwrite=overwrite, durable=durable,
                                       recognise=recognise_checkpoint))
        findings: list[Finding] = checkpoint_findings(loaded.read, loaded.store)
        errors = [f for f in findings if f.severity == "error"]
        if errors and not force:
            first = errors[0]
            raise ConversionError(
                f"source has {len(errors)} error finding(s), first: [{first.code}] {first.message} "
                "(run `eagleconv validate` for all; --force converts anyway)", loaded.store.path, code=first.code)
        if require_verifier:
            refuse_without_verifier(loaded, to, verifier)
        changed = transform(loaded) if transform is not None else None
        report, tensors, config, spec = _plan(loaded, to, drop=drop, aux_layer_ids=aux_layer_ids,
                                              aux_convention=aux_convention, transform=changed, verifier=verifier)
        report.findings = findings + report.findings
        report.destination = str(destination)
        report.dry_run = dry_run
        if target_meta is not None:
            report.notes += target_meta.notes
            written = gguf_tensors(loaded, report, tensors, spec, target_meta, outtype)
            header = gguf_metadata(loaded, spec, written, target_meta, report.notes)
            if dry_run:
                return report
            assert isinstance(writer, StagedFile)
            return _write_gguf(report, loaded, writer, header, written, to, clean=not errors, force=force,
                               numeric=numeric, on_bytes=on_bytes, on_total=on_total)
        if dry_run:
            if numeric:
                report.notes.append("NaN/Inf check not run: --dry-run reads no tensor data (`eagleconv validate` does)")
            return report
        assert isinstance(writer, CheckpointWriter)
        report.notes += writer.notes
        if on_total:
            on_total(sum(t.nbytes for t in tensors))
        metadata = {"format": "pt", "eagleconv_version": __version__}
        check = _NumericCheck(report, plan_sources(report), force, loaded.store.path) if numeric else None
        if not numeric:
            report.notes.append("numeric check skipped (--no-numeric): NaN/Inf weights were not looked for")
        report.files_written = writer.write(tensors, {"config.json": dump_json(config)},
                                            max_shard_size=max_shard_size, metadata=metadata, on_bytes=on_bytes,
                                            verify=lambda staged: _verify_output(staged, tensors, to, clean=not errors),
                                            check_values=check)
        report.bytes_written = sum(t.nbytes for t in tensors)
        return report
    finally:
        loaded.close()


def _write_gguf(report: ConvertReport, loaded: LoadedDrafter, staged: StagedFile, header: Any,
                tensors: Sequence[GgufTensor], to: str, *, clean: bool, force: bool, numeric: bool,
                on_bytes: Callable[[int], None] | None, on_total: Callable[[int], None] | None) -> ConvertReport:
    """Write the GGUF (staged, value-checked, read back, published) and finish the report."""
    report.notes += staged.notes
    if on_total:
        on_total(sum(t.nbytes for t in tensors))
    check = _NumericCheck(report, plan_sources(report), force, loaded.store.path) if numeric else None
    if not numeric:
        report.notes.append("numeric check skipped (--no-numeric): NaN/Inf weights were not looked for")
    write_gguf(staged, header, tensors, on_bytes=on_bytes, check_values=check,
               verify=lambda path: _verify_output(path, tensors, to, clean=clean))
    report.files_written = [Path(report.destination).name]
    report.bytes_written = sum(t.nbytes for t in tensors)
    return report
