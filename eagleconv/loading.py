"""Open a checkpoint, detect its layout and read it into a DrafterSpec: the first step of every command."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .drafter import AuxConvention, DrafterSpec
from .errors import FindingsError
from .formats import detect_layout, get_layout, read_drafter
from .formats.base import Layout, ReadResult
from .io.reader import Checkpoint, open_source

if TYPE_CHECKING:
    from .io.torch_tensors import TorchTensors


@dataclass
class LoadedDrafter:
    """A checkpoint seen through its layout.  ``read.spec`` is None when the config is incomplete."""

    store: Checkpoint
    layout: type[Layout]
    detected_by: list[str]
    read: ReadResult

    @property
    def spec(self) -> DrafterSpec | None:
        return self.read.spec

    def require_spec(self) -> DrafterSpec:
        """The spec, or a FindingsError (exit 1) naming every reason it could not be built."""
        if self.read.spec is not None and not self.read.errors:
            return self.read.spec
        problems = list(self.read.errors)
        if self.read.missing:
            problems.append(
                "shape-bearing fields absent from config and not derivable from the tensors: "
                + ", ".join(self.read.missing)
            )
        from .validation.structural import read_findings

        first = next((f.code for f in read_findings(self.read)), None)
        raise FindingsError("; ".join(problems), self.store.path, code=first)

    def torch_tensors(self) -> TorchTensors:
        """The checkpoint's tensors as torch tensors by canonical name, memory-mapped (imports torch on use)."""
        from .io.torch_tensors import TorchTensors

        return TorchTensors(self.store, self.read.canonical)

    def close(self) -> None:
        self.store.close()


def load_drafter(path: str | Path | Mapping[str, Any], *, config: Any = None, layout: str | None = None,
                 allow_pickle: bool = False, aux_convention: AuxConvention | None = None) -> LoadedDrafter:
    """Open ``path`` (headers only), pick its layout (detected unless given) and read its spec.

    ``path`` may also be an in-memory state dict, with its ``config`` (a dict, a config.json path or a
    transformers ``PretrainedConfig``): see :func:`eagleconv.io.reader.open_source`.
    """
    store = open_source(path, config, allow_pickle=allow_pickle)
    try:
        if layout is not None:
            chosen, why = get_layout(layout), [f"--from {layout}"]
        else:
            chosen, why = detect_layout(store.config, set(store.tensors), store.metadata, store.weights_kind, store.path)
        read = read_drafter(chosen, store.config or {}, store.tensors, aux_convention=aux_convention)
    except BaseException:
        store.close()
        raise
    return LoadedDrafter(store, chosen, why, read)
