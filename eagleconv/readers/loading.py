"""Open a checkpoint, detect its layout and read it into a DrafterSpec: the first step of every command.

The three openers, each on top of the one before: ``open_checkpoint`` (files and headers, no layout: ``io.reader``'s,
with ``hf://`` downloaded first), ``load_drafter`` here (+ the layout and the ``DrafterSpec``), ``forward.load`` (+
weights: a runnable ``Drafter``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..spec.drafter import AuxConvention, DrafterSpec
from ..errors import AmbiguousLayoutError, EagleconvError, FindingsError, UsageError
from ..formats import detect_layout, get_layout, read_drafter
from ..formats.base import Layout
from ..formats.base.reading import ReadResult, read_fields
from ..gguf.gguf_file import open_if_gguf
from ..hubread.download import local_path
from ..io import reader
from ..io.hub_paths import is_hf_url
from ..io.reader import SAFETENSORS_INDEX, Checkpoint, Duplicates, OpenFile, open_source
from ..io.replaceable import not_a_checkpoint
from ..support.bounds import check_config
from ..support.jsonio import load_json

if TYPE_CHECKING:
    from ..io.torch_tensors import TorchTensors


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
        first = self.read.problems()[0][0] if self.read.errors else "EC004"  # as read_findings orders them
        raise FindingsError("; ".join(problems), self.store.label, code=first)

    def torch_tensors(self) -> TorchTensors:
        """The checkpoint's tensors as torch tensors by canonical name, memory-mapped (imports torch on use)."""
        from ..io.torch_tensors import TorchTensors

        return TorchTensors(self.store, self.read.canonical)

    def close(self) -> None:
        self.store.close()


def open_checkpoint(path: str | Path, *, allow_pickle: bool = False, duplicates: Duplicates | None = None,
                    open_file: OpenFile | None = None) -> Checkpoint:
    """Open a checkpoint directory and validate its structure without reading tensor data (no layout: that is
    ``load_drafter``): :func:`eagleconv.io.reader.open_checkpoint`, with ``hf://ORG/NAME[@REV]`` downloaded through
    the Hugging Face cache (its manifest verified) first; any other path is local, never a Hub id."""
    if is_hf_url(path):
        path = local_path(path)
    return reader.open_checkpoint(path, allow_pickle=allow_pickle, duplicates=duplicates, open_file=open_file)


def load_drafter(path: str | Path | Mapping[str, object], *, config: object = None, layout: str | None = None,
                 allow_pickle: bool = False, aux_convention: AuxConvention | None = None) -> LoadedDrafter:
    """Open ``path`` (headers only), pick its layout (detected unless given) and read its spec.

    ``path`` may also be an in-memory state dict, with its ``config`` (a dict, a config.json path or a
    transformers ``PretrainedConfig``): see :func:`eagleconv.io.reader.open_source`.
    """
    if is_hf_url(path):
        path = local_path(path)  # type: ignore[arg-type]
    return read_store(open_source(path, config, allow_pickle=allow_pickle, open_file=open_if_gguf), layout=layout,
                      aux_convention=aux_convention)


def read_store(store: Checkpoint, *, layout: str | None = None,
               aux_convention: AuxConvention | None = None) -> LoadedDrafter:
    """An opened checkpoint (a directory, a state dict, or a Hub repository's headers) read through its layout."""
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


def open_tensors(path: str | Path, *, layout: str | None = None, allow_pickle: bool = False) -> TorchTensors:
    """The canonical tensors of the drafter at ``path`` (its layout detected unless given), memory-mapped."""
    from ..io.torch_tensors import TorchTensors

    loaded = load_drafter(path, layout=layout, allow_pickle=allow_pickle)
    return TorchTensors(loaded.store, loaded.read.canonical, owns_store=True)


# How torch.save files begin: a zip archive (torch >= 1.6), or a pickle (protocol 2-5) in the legacy format.
_TORCH_MAGIC = (b"PK\x03\x04", b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")


def recognise_checkpoint(directory: Path, names: list[str], shown: str | Path) -> None:
    """Refuse unless ``directory`` is a drafter checkpoint by content, not by file names.

    A drafter config (a layout detected from it and the tensor names, with a
    hidden_size and vocab_size), and weights: safetensors whose headers (and
    index) parse, or torch files by their first bytes.  Pickles are never
    loaded: their tensor names stay unknown, so only the config speaks for them.
    eagleconv's own output names its layout in config.json, so it is recognised too.
    """
    if "config.json" not in names:
        raise not_a_checkpoint("no config.json", shown)
    torch_files = [n for n in names if n.endswith((".bin", ".pt", ".pth"))]
    for name in torch_files:
        with open(directory / name, "rb") as f:
            if not f.read(4).startswith(_TORCH_MAGIC):
                raise not_a_checkpoint(f"{name} is not a torch file", shown)
    tensor_names: set[str] | None = None
    metadata: dict[str, str] = {}
    try:
        if SAFETENSORS_INDEX in names or any(n.endswith(".safetensors") for n in names):
            checkpoint = reader.open_checkpoint(directory)
            config, tensor_names, metadata = checkpoint.config, set(checkpoint.tensors), dict(checkpoint.metadata)
            kind = "safetensors"
        elif torch_files:
            config, kind = load_json(directory / "config.json"), "pickle"
            if isinstance(config, dict):
                check_config(config, directory / "config.json")
        else:
            raise not_a_checkpoint("no weights", shown)
        if not isinstance(config, dict):
            raise not_a_checkpoint("config.json is not a JSON object", shown)
        try:
            layout = detect_layout(config, tensor_names, metadata, kind)[0]
        except AmbiguousLayoutError as exc:  # still a drafter: only which layout is unclear
            layout = get_layout(exc.candidates[0])
    except UsageError:
        raise
    except EagleconvError as exc:
        where = f"{Path(exc.path).name}: " if exc.path and Path(exc.path) != directory else ""
        raise not_a_checkpoint(f"{where}{exc.message}", shown) from exc
    fields = read_fields(layout, config)[0]
    if not {"hidden_size", "vocab_size"} <= fields.keys():
        raise not_a_checkpoint("config.json is not a drafter config: no hidden_size and vocab_size", shown)
