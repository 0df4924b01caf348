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
this module runs them through the destination layout's writer (``Layout.output``: a safetensors directory, or
llama.cpp's GGUF with its storage rules, ``eagleconv.gguf.gguf_output``), never asking which it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ArgumentTypeError, ConversionError
from ..formats import get_layout
from ..hubread.download import local_path
from ..io.hub_paths import require_download
from ..io.reader import is_state_dict, require_source
from ..io.writer import check_not_overlapping
from ..readers.loading import LoadedDrafter, load_drafter, recognise_checkpoint
from ..spec.drafter import AuxConvention, Verifier
from ..spec.report import ConvertReport, Finding
from ..validation.structural import checkpoint_findings
from .plan import _plan, refuse_without_verifier
from .verify import _NumericCheck, _verify_output, plan_sources

if TYPE_CHECKING:
    from .transform import Transform


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

    ``target`` and ``outtype`` are the destination layout's writer's (``Layout.output``): ``to="gguf"`` writes
    llama.cpp's draft GGUF, one file at ``destination`` (``eagleconv.gguf.gguf_output``), ``target`` (required)
    is the target's GGUF or HF directory, ``outtype`` (f32/f16/bf16) converts floats.

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
        # The layout's writer (safetensors directory, llama.cpp's GGUF...) checks its own arguments (--target,
        # --outtype) and, with every check that can refuse the destination (it exists, --overwrite of a
        # non-checkpoint, the current directory), runs here, before the transform (calibration, divergence).
        output = get_layout(to).output.prepare(target=target, outtype=outtype)
        if not dry_run:
            output.open(destination, sources=sources, overwrite=overwrite, durable=durable,
                        recognise=recognise_checkpoint)
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
                                              aux_convention=aux_convention, transform=changed, verifier=verifier,
                                              output=output)
        report.findings = findings + report.findings
        report.destination = str(destination)
        report.dry_run = dry_run
        if dry_run:
            if numeric:
                report.notes.append("NaN/Inf check not run: --dry-run reads no tensor data (`eagleconv validate` does)")
            return report
        report.notes += output.notes
        if on_total:
            on_total(sum(t.nbytes for t in tensors))
        check = _NumericCheck(report, plan_sources(report), force, loaded.store.path) if numeric else None
        if not numeric:
            report.notes.append("numeric check skipped (--no-numeric): NaN/Inf weights were not looked for")
        report.files_written = output.write(tensors, config, max_shard_size=max_shard_size, on_bytes=on_bytes,
                                            verify=lambda staged: _verify_output(staged, tensors, to, clean=not errors),
                                            check_values=check)
        report.bytes_written = sum(t.nbytes for t in tensors)
        return report
    finally:
        loaded.close()
