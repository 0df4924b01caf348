"""Opening checkpoints lazily: headers first, tensor bytes only on request.

:func:`open_checkpoint` opens a drafter directory (config.json plus safetensors, single or sharded, or an
opt-in pickle), or a one-file checkpoint through the opener its caller passes (llama.cpp's GGUF:
``eagleconv.gguf.gguf_file.open_if_gguf``), validating every header (and the index against the headers)
without reading tensor data; :func:`open_state_dict` and :func:`open_source` take a training loop's
in-memory ``{name: tensor}`` with its config instead.  What they return lives one job to a module (issue 26):
the :class:`~eagleconv.io.tensor_store.TensorStore` interface, an on-disk checkpoint's bytes
(:mod:`~eagleconv.io.checkpoint`) and an in-memory state dict (:mod:`~eagleconv.io.state_dict`), each
imported from there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import FormatError, UnsafeInputError, UsageError
from ..support.bounds import check_config
from ..support.jsonio import config_dict, load_json
from .checkpoint import _SWAPPED, Checkpoint, _identity, _Location
from .hub_paths import is_hf_url
from .paths import resolve_inside, validate_shard_name
from .safetensors_header import read_header
from .state_dict import STATE_DICT, StateDictTensors, is_state_dict, require_source
from .tensor_store import TensorInfo

if TYPE_CHECKING:
    from ..support.jsonio import JSONObject

SAFETENSORS_INDEX = "model.safetensors.index.json"
PICKLE_INDEX = "pytorch_model.bin.index.json"


def open_state_dict(state_dict: Mapping[str, object], config: object, *, duplicates: list[str] | None = None) -> Checkpoint:
    """A training loop's ``(state_dict, config)`` seen as a checkpoint, without writing it anywhere.

    ``config``: a dict, a config.json path or a transformers ``PretrainedConfig`` (jsonio.config_dict).
    The tensors stay where they are (a tensor on a GPU is copied to the CPU when it is read),
    as for a pickle under --allow-pickle; ``path`` is :data:`STATE_DICT`, so messages name no file.
    ``duplicates``: as in :func:`open_checkpoint` (a config.json path's duplicate keys are recorded, not refused).
    """
    from .torch_tensors import check_state_dict

    require_source(state_dict, config)
    check_state_dict(state_dict)
    memory = StateDictTensors(state_dict)
    return Checkpoint(Path(STATE_DICT), config_dict(config, duplicates=duplicates), "safetensors", [],
                      memory.tensors, {}, {}, [], memory=memory)


def open_source(source: str | Path | Mapping[str, object], config: object = None, *,
                allow_pickle: bool = False, open_file: OpenFile | None = None) -> Checkpoint:
    """A library call's source: a checkpoint directory (:func:`open_checkpoint`) or a state dict with its config."""
    require_source(source, config)
    if is_state_dict(source):
        return open_state_dict(source, config)  # type: ignore[arg-type]
    return open_checkpoint(source, allow_pickle=allow_pickle, open_file=open_file)  # type: ignore[arg-type]


# -- opening a directory ------------------------------------------------------

# (file, key) pairs of duplicate JSON keys, when the caller judges them (EC001) instead of refusing the file
Duplicates = list[tuple[Path, str]]
# A one-file checkpoint's opener (path -> its Checkpoint, or None when the file is not its kind).
OpenFile = Callable[[Path], Checkpoint | None]


def _load_json_noting(path: Path, duplicates: Duplicates | None) -> Any:
    if duplicates is None:
        return load_json(path)
    keys: list[str] = []
    value = load_json(path, duplicates=keys)
    duplicates.extend((path, key) for key in keys)
    return value


def _load_config(directory: Path, duplicates: Duplicates | None = None) -> JSONObject | None:
    path = directory / "config.json"
    if not os.path.lexists(path):  # a dangling or looping symlink is there, and unreadable: resolve_inside says so
        return None
    config = _load_json_noting(resolve_inside(directory, "config.json"), duplicates)
    if not isinstance(config, dict):
        raise FormatError("config.json is not a JSON object", path)
    check_config(config, path)  # sizes bounded before anything is built from them (eagleconv.support.bounds)
    return config


def _open_safetensors(directory: Path, names: list[str]) -> tuple[dict, dict, dict]:
    tensors: dict[str, TensorInfo] = {}
    locations: dict[str, _Location] = {}
    metadata: dict[str, str] = {}
    for file_name in names:
        path = resolve_inside(directory, file_name)
        before = _identity(path, directory / file_name)
        header = read_header(path)
        identity = _identity(path, directory / file_name)
        if identity != before:
            raise UnsafeInputError(_SWAPPED, directory / file_name)
        for key, value in header.metadata.items():
            metadata.setdefault(key, value)
        for entry in header.entries.values():
            if entry.name in tensors:
                raise UnsafeInputError(
                    f"tensor {entry.name!r} is stored in two shards ({tensors[entry.name].file} and {file_name})",
                    directory / file_name,
                )
            tensors[entry.name] = TensorInfo(entry.name, entry.dtype, entry.shape, file_name)
            locations[entry.name] = _Location(path, entry.start, entry.end, identity)
    return tensors, locations, metadata


def _read_index(directory: Path, index_name: str, extension: str,
                duplicates: Duplicates | None = None) -> dict[str, str]:
    index_path = directory / index_name
    return weight_map_of(_load_json_noting(resolve_inside(directory, index_name), duplicates), index_path, extension)


def weight_map_of(index: object, index_path: str | Path, extension: str) -> dict[str, str]:
    """An index file's ``weight_map`` (tensor -> shard file), every shard a plain file name, or UnsafeInputError."""
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise UnsafeInputError("index has no weight_map object", index_path)
    for shard in weight_map.values():
        validate_shard_name(shard, index_path, extension)
    return weight_map


def check_weight_map(weight_map: Mapping[str, str], tensors: Mapping[str, TensorInfo], listing: list[str],
                     index_path: str | Path) -> list[str]:
    """The index against the shards' headers (UnsafeInputError on any disagreement); notes on unlisted files.

    Shared by local directories and the header-only ``hf://`` reader, so both refuse the same indexes.
    """
    only_index = sorted(set(weight_map) - set(tensors))
    only_headers = sorted(set(tensors) - set(weight_map))
    if only_index:
        raise UnsafeInputError(f"index lists tensors no shard contains: {', '.join(only_index[:5])}", index_path)
    if only_headers:
        raise UnsafeInputError(f"shards contain tensors the index does not list: {', '.join(only_headers[:5])}", index_path)
    for name, info in tensors.items():
        if weight_map[name] != info.file:
            raise UnsafeInputError(f"index puts {name!r} in {weight_map[name]} but it is stored in {info.file}", index_path)
    shards = set(weight_map.values())
    unlisted = sorted(n for n in listing if n.endswith(".safetensors") and n not in shards)
    return [f"ignored safetensors files not named by the index: {', '.join(unlisted)}"] if unlisted else []


def require_exists(path: str | Path) -> Path:
    """``path`` as a Path, or UnsafeInputError (exit 2) saying it is missing: cheap, so commands check it first."""
    directory = Path(path)
    if not directory.exists():
        if os.path.lexists(directory):
            raise UnsafeInputError("cannot read: a symlink that loops or leads nowhere", directory)
        hint = (f" (a Hub repository is written hf://{path})"
                if isinstance(path, str) and path.count("/") == 1 and not path.startswith((".", "/", "~")) else "")
        raise UnsafeInputError(f"no such file or directory{hint}", directory)
    return directory


def open_checkpoint(path: str | Path, *, allow_pickle: bool = False, duplicates: Duplicates | None = None,
                    open_file: OpenFile | None = None) -> Checkpoint:
    """Open a checkpoint directory and validate its structure without reading tensor data (no layout: that is
    ``loading.load_drafter``, and a runnable drafter ``forward.load``).

    ``duplicates``: collect duplicate keys of config.json and the index there (the last value
    wins, as engines read them) instead of refusing the file with EC001.
    ``path`` is local, never a Hub id: ``hf://ORG/NAME[@REV]`` is downloaded (its manifest verified) a layer
    above, by ``eagleconv.open_checkpoint`` (``readers.loading``) or ``hubread.download.local_path``.
    ``open_file``: opens a one-file checkpoint, or returns None when the file is not its kind (llama.cpp's GGUF:
    ``eagleconv.gguf.gguf_file.open_if_gguf``, passed by the callers above that read GGUF drafters).
    """
    if is_hf_url(path):  # a caller that skipped the resolution above: say so, not "no such file"
        raise UsageError("hf:// is downloaded by eagleconv.open_checkpoint, not by io.reader", str(path))
    directory = require_exists(path)
    if not directory.is_dir():
        opened = open_file(directory) if open_file is not None else None
        if opened is not None:  # llama.cpp's one-file drafter
            return opened
        raise FormatError("expected a checkpoint directory (config.json + weights) or a GGUF file", directory)
    config = _load_config(directory, duplicates)
    notes: list[str] = []
    listing = sorted(p.name for p in directory.iterdir())

    if SAFETENSORS_INDEX in listing:
        weight_map = _read_index(directory, SAFETENSORS_INDEX, ".safetensors", duplicates)
        shards = sorted(set(weight_map.values()))
        tensors, locations, metadata = _open_safetensors(directory, shards)
        notes += check_weight_map(weight_map, tensors, listing, directory / SAFETENSORS_INDEX)
        return Checkpoint(directory, config, "safetensors-sharded", [SAFETENSORS_INDEX, *shards],
                          tensors, locations, metadata, notes)

    single = [n for n in listing if n.endswith(".safetensors")]
    if len(single) > 1:
        raise UnsafeInputError(f"{len(single)} .safetensors files but no {SAFETENSORS_INDEX}", directory)
    if single:
        tensors, locations, metadata = _open_safetensors(directory, single)
        pickles = [n for n in listing if n.endswith((".bin", ".pt", ".pth"))]
        if pickles:
            notes.append(f"ignored pickle files beside safetensors: {', '.join(pickles)}")
        return Checkpoint(directory, config, "safetensors", single, tensors, locations, metadata, notes)

    from .pickle_reader import WEIGHT_PICKLE, load_pickle_state_dict, weight_pickles

    indexed = sorted(set(_read_index(directory, PICKLE_INDEX, ".bin", duplicates).values())) \
        if PICKLE_INDEX in listing else None
    pickle_files, left_out = weight_pickles(listing, indexed)
    if left_out:
        notes.append(f"pickle files left out (not the weights, not read): {', '.join(left_out)}")
    if not pickle_files:
        other = f"; not weights, so not read: {', '.join(left_out)}" if left_out else ""
        raise FormatError(f"no weights found (.safetensors, or {WEIGHT_PICKLE} / {PICKLE_INDEX} with --allow-pickle)"
                          f"{other}; to check a config alone, use `eagleconv lint CONFIG_JSON`", directory)
    if not allow_pickle:
        raise UnsafeInputError(
            f"weights are pickles ({', '.join(pickle_files)}); loading a pickle can execute code. "
            "Re-run with --allow-pickle to load them with torch.load(weights_only=True)",
            directory / pickle_files[0],
        )
    state: dict[str, Any] = {}
    file_of: dict[str, str] = {}
    for name in pickle_files:
        part = load_pickle_state_dict(resolve_inside(directory, name))
        for key in part:
            if key in state:
                raise UnsafeInputError(f"tensor {key!r} appears in two pickle files", directory / name)
            file_of[key] = name
        state.update(part)
    memory = StateDictTensors(state)
    tensors = {n: TensorInfo(n, i.dtype, i.shape, file_of[n]) for n, i in memory.tensors.items()}
    notes.append("weights loaded from pickle with torch.load(weights_only=True) (--allow-pickle)")
    return Checkpoint(directory, config, "pickle", pickle_files, tensors, {}, {}, notes, memory=memory)

