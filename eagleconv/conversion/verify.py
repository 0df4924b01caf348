"""The checks an output passes before it is published: read back as planned, and no NaN/Inf weights.

Split from ``conversion.py`` (issue 26): both run on the staged bytes, inside the writer, so a failing
check leaves nothing at the destination.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConversionError
from ..formats import get_layout
from ..formats.base.renames import rename
from ..io.finite import ValueScan
from ..io.writer import OutputTensor
from ..readers.loading import load_drafter
from ..spec.report import ConvertReport, Finding
from ..validation.numeric import ZERO_CHECKED
from ..validation.structural import checkpoint_findings


def _verify_output(staged: Path, tensors: Sequence[OutputTensor], dst_layout: str, clean: bool) -> None:
    """Re-read what was written before it is published: the plan, the layout, and (for a
    clean source) no error finding, so a --drop cannot publish an unloadable drafter."""
    written = load_drafter(staged)
    try:
        got = {n: (i.dtype, i.shape) for n, i in written.store.tensors.items()}
        want = {t.name: (t.dtype, t.shape) for t in tensors}
        if got != want:
            raise ConversionError(f"internal error: written tensors differ from the plan: {sorted(set(got) ^ set(want))}", staged)
        if written.layout.name != dst_layout or written.read.errors or written.read.missing:
            raise ConversionError(f"internal error: output does not read back as {dst_layout}: "
                                  f"{written.layout.name} {written.read.errors + written.read.missing}", staged)
        errors = [f for f in checkpoint_findings(written.read, written.store) if f.severity == "error"] if clean else []
        if errors:
            raise ConversionError(f"the converted drafter would have {len(errors)} error finding(s), first: "
                                  f"[{errors[0].code}] {errors[0].message}; nothing was written", staged,
                                  code=errors[0].code)
    finally:
        written.close()


def plan_sources(report: ConvertReport) -> dict[str, str]:
    """destination tensor name -> the source name it came from (for messages about the source)."""
    return {row.destination: row.source for row in report.plan if row.destination and row.source}


class _NumericCheck:
    """The writer's value check for convert: a NaN/Inf is an error finding (EC060) about the source.

    Without ``force`` the first one stops the write (nothing is published);
    with ``force`` every one is recorded in the report and the output is written.
    An all-zero fc/lm_head is a warning (EC061), as in ``validate``.
    """

    def __init__(self, report: ConvertReport, sources: dict[str, str], force: bool, path: Path | str):
        self.report, self.sources, self.force, self.path = report, sources, force, path

    def __call__(self, tensor: OutputTensor, found: ValueScan) -> None:
        name = self.sources.get(tensor.name, tensor.name)
        if found.nonfinite:
            finding = Finding(code="EC060", severity="error", tensor=name,
                              message=f"{name} has {found.nonfinite} NaN/Inf value(s) of {math.prod(tensor.shape)}; "
                                      f"first at flat index {found.first_nonfinite}")
            if not self.force:
                raise ConversionError(f"source has NaN/Inf weights: {finding.message} (nothing was written; "
                                      "--force converts anyway, --no-numeric skips the check)", self.path, code="EC060")
            self.report.findings.append(finding)
        canonical = rename(get_layout(self.report.destination_format).renames, tensor.name, to_canonical=True)
        if canonical in ZERO_CHECKED and not found.nonzero:
            self.report.findings.append(Finding(code="EC061", severity="warning", tensor=name,
                                                message=f"{name} is entirely zero: uninitialised or wiped; "
                                                        "the drafter proposes garbage"))
