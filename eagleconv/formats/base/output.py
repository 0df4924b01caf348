"""A layout's writer (``Layout.output``): what ``convert`` hands the planned tensors to, whatever the layout.

Every layout writes through one of these, so the conversion never asks which layout it writes (issue 34): the
default, :class:`CheckpointOutput`, writes a safetensors directory and its config.json; llama.cpp's GGUF names
:class:`eagleconv.gguf.gguf_output.GgufOutput`.  One instance serves one conversion, in this order:
``prepare`` (its own arguments, checked before anything is read or run), ``open`` (the destination refused or
staged, before a transform measures anything), ``storage`` (the planned tensors as the layout stores them, named
by the plan: identity here), ``write`` (staged, checked, published).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..._version import __version__
from ...errors import UsageError
from ...io.replaceable import Recognise
from ...io.writer import CheckpointWriter, OutputTensor
from ...support.jsonio import dump_json

if TYPE_CHECKING:
    from ...io.checkpoint import Checkpoint
    from ...io.finite import ValueScan
    from ...spec.drafter import DrafterSpec
    from ...spec.report import ConvertReport

Verify = Callable[[Path], None]
CheckValues = Callable[[OutputTensor, "ValueScan"], None]


class Output(Protocol):
    """What ``convert`` needs of a layout's writer (see the module docstring)."""

    notes: list[str]  # what staging found (debris cleaned...), for the report

    @classmethod
    def prepare(cls, *, target: str | Path | None, outtype: str | None) -> Output: ...

    def open(self, destination: str | Path, *, sources: Sequence[str | Path], overwrite: bool,
             durable: bool, recognise: Recognise | None = None) -> None: ...

    def storage(self, store: Checkpoint, report: ConvertReport, tensors: list[OutputTensor],
                spec: DrafterSpec) -> list[OutputTensor]: ...

    def write(self, tensors: Sequence[OutputTensor], config: dict[str, Any], *, max_shard_size: int | None,
              on_bytes: Callable[[int], None] | None, verify: Verify, check_values: CheckValues | None) -> list[str]: ...


class CheckpointOutput:
    """A safetensors checkpoint directory (``io.writer.CheckpointWriter``): the tensors as planned, config.json."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self._writer: CheckpointWriter | None = None

    @classmethod
    def prepare(cls, *, target: str | Path | None, outtype: str | None) -> CheckpointOutput:
        if outtype is not None:
            raise UsageError("--outtype applies to --to gguf only (other layouts keep every dtype)")
        return cls()

    def open(self, destination: str | Path, *, sources: Sequence[str | Path], overwrite: bool,
             durable: bool, recognise: Recognise | None = None) -> None:
        """``recognise`` says whether a directory ``--overwrite`` would replace is a drafter checkpoint."""
        self._writer = CheckpointWriter(destination, sources=sources, overwrite=overwrite, durable=durable,
                                        recognise=recognise)
        self.notes = self._writer.notes

    def storage(self, store: Checkpoint, report: ConvertReport, tensors: list[OutputTensor],
                spec: DrafterSpec) -> list[OutputTensor]:
        return tensors

    def write(self, tensors: Sequence[OutputTensor], config: dict[str, Any], *, max_shard_size: int | None,
              on_bytes: Callable[[int], None] | None, verify: Verify, check_values: CheckValues | None) -> list[str]:
        assert self._writer is not None, "open() first"
        return self._writer.write(tensors, {"config.json": dump_json(config)}, max_shard_size=max_shard_size,
                                  metadata={"format": "pt", "eagleconv_version": __version__}, on_bytes=on_bytes,
                                  verify=verify, check_values=check_values)
