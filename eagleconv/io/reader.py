"""Reading checkpoints lazily: headers first, tensor bytes only on request.

A :class:`TensorStore` is anything that can list tensors and hand out their raw
bytes: an on-disk :class:`Checkpoint` (safetensors, single or sharded, or an
opt-in pickle) or an in-memory :class:`StateDictTensors` from a training loop.
Validation and conversion work on this interface and never need a state dict.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ArgumentTypeError, FormatError, UnsafeInputError
from ..jsonio import config_dict, load_json
from .dtypes import DTYPE_SIZES, TORCH_TO_SAFETENSORS, raw_numpy_dtype
from .hub_paths import is_hf_url, local_path
from .paths import resolve_inside, validate_shard_name
from .safetensors_header import read_header

if TYPE_CHECKING:
    import numpy as np

SAFETENSORS_INDEX = "model.safetensors.index.json"
PICKLE_INDEX = "pytorch_model.bin.index.json"
# Streaming chunk for reads that enter Python (numeric scans, the pread/write copy
# fallback).  Small on purpose: a 1 MiB chunk and its numpy temporaries stay in
# the CPU caches and the allocator reuses them, which made the NaN/Inf scan of a
# 2.4 GB drafter 4x faster than 64 MiB chunks (0.6 s vs 2.4 s, warm) at a fifth
# of the peak RSS (41 MB vs 260 MB).  Kernel copies (copy_file_range/sendfile)
# do not use it.
CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class TensorInfo:
    """What is known about a tensor without reading it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str | None = None  # file name inside the checkpoint directory

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_SIZES[self.dtype]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


class TensorStore:
    """Interface shared by on-disk checkpoints and in-memory state dicts."""

    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]

    def read_bytes(self, name: str) -> bytes:
        """The whole tensor's exact stored bytes.  For small tensors (d2t, t2d, norms)."""
        raise NotImplementedError

    def read_raw(self, name: str) -> np.ndarray:
        """The whole tensor as a raw numpy array (BF16 as uint16 bits).  For small tensors."""
        import numpy as np

        info = self.tensors[name]
        return np.frombuffer(self.read_bytes(name), dtype=raw_numpy_dtype(info.dtype)).reshape(info.shape)

    def iter_raw_chunks(self, name: str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[np.ndarray]:
        """The tensor's elements, flattened, in chunks of at most ``chunk_bytes``.

        Each chunk may reuse the previous chunk's buffer: consume it before
        asking for the next.
        """
        yield self.read_raw(name).reshape(-1)

    def copy_into(self, name: str, out_fd: int) -> None:
        """Append the tensor's exact bytes to ``out_fd``."""
        from .staging import write_all

        write_all(out_fd, self.read_bytes(name))

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class _Location:
    path: Path
    start: int
    end: int


class Checkpoint(TensorStore):
    """A drafter checkpoint directory: config.json plus weights.

    Construction validates every header (and the index against the headers)
    but reads no tensor data.  At most one weight file is open at a time.
    """

    def __init__(self, directory: Path, config: dict[str, Any] | None, weights_kind: str,
                 files: list[str], tensors: dict[str, TensorInfo], locations: dict[str, _Location],
                 metadata: dict[str, str], notes: list[str], memory: StateDictTensors | None = None):
        self.path = directory
        self.config = config
        self.weights_kind = weights_kind
        self.files = files
        self.tensors = tensors
        self.metadata = metadata
        self.notes = notes
        self._locations = locations
        self._memory = memory  # pickle checkpoints are loaded whole, under --allow-pickle only
        self._fd: int | None = None
        self._fd_path: Path | None = None

    # -- raw access ---------------------------------------------------------
    def _fd_for(self, path: Path) -> int:
        if self._fd_path != path:
            self.close()
            self._fd = os.open(path, os.O_RDONLY)
            self._fd_path = path
            advise_sequential(self._fd)
        assert self._fd is not None
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._fd_path = None, None

    def _pread_exact(self, fd: int, size: int, offset: int, path: Path) -> bytes:
        data = os.pread(fd, size, offset)
        if len(data) != size:
            raise UnsafeInputError(f"file shrank while reading ({len(data)} of {size} bytes)", path)
        return data

    def read_bytes(self, name: str) -> bytes:
        if self._memory is not None:
            return self._memory.read_bytes(name)
        loc = self._locations[name]
        return self._pread_exact(self._fd_for(loc.path), loc.end - loc.start, loc.start, loc.path)

    def read_range(self, name: str, offset: int, size: int) -> bytes:
        """``size`` of the tensor's stored bytes from ``offset`` (streaming a tensor in blocks)."""
        if self._memory is not None:
            return self._memory.read_bytes(name)[offset:offset + size]
        loc = self._locations[name]
        if offset < 0 or offset + size > loc.end - loc.start:
            raise ValueError(f"range {offset}+{size} outside tensor {name!r}")
        return self._pread_exact(self._fd_for(loc.path), size, loc.start + offset, loc.path)

    def copy_range_into(self, name: str, offset: int, size: int, out_fd: int) -> None:
        """Append ``size`` of the tensor's stored bytes from ``offset`` to ``out_fd`` (a kernel copy from a file)."""
        if self._memory is not None:
            from .staging import write_all

            write_all(out_fd, self.read_range(name, offset, size))
            return
        loc = self._locations[name]
        if offset < 0 or offset + size > loc.end - loc.start:
            raise ValueError(f"range {offset}+{size} outside tensor {name!r}")
        copy_range(self._fd_for(loc.path), loc.start + offset, size, out_fd, loc.path)

    def iter_raw_chunks(self, name: str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[np.ndarray]:
        if self._memory is not None:
            yield from self._memory.iter_raw_chunks(name, chunk_bytes)
            return
        import numpy as np

        info, loc = self.tensors[name], self._locations[name]
        itemsize = DTYPE_SIZES[info.dtype]
        step = max(itemsize, chunk_bytes - chunk_bytes % itemsize)
        buffer = bytearray(min(step, loc.end - loc.start))
        fd = self._fd_for(loc.path)
        offset = loc.start
        while offset < loc.end:
            size = min(step, loc.end - offset)
            view = memoryview(buffer)[:size]
            got = os.preadv(fd, [view], offset)
            if got != size:
                raise UnsafeInputError(f"file shrank while reading ({got} of {size} bytes)", loc.path)
            yield np.frombuffer(view, dtype=raw_numpy_dtype(info.dtype))
            offset += size

    def copy_into(self, name: str, out_fd: int) -> None:
        if self._memory is not None:
            self._memory.copy_into(name, out_fd)
            return
        loc = self._locations[name]
        copy_range(self._fd_for(loc.path), loc.start, loc.end - loc.start, out_fd, loc.path)


def advise_sequential(fd: int) -> None:
    """Tell the kernel a file is read front to back (doubles readahead, as ``cp`` does).

    Tensors are read in offset order or close to it; on a cold page cache this
    roughly halves the time copy_file_range spends waiting for reads.  Advisory
    only: ignored where unsupported.
    """
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        try:
            advise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        except OSError:
            pass


def copy_range(src_fd: int, offset: int, count: int, out_fd: int, src_path: Path) -> None:
    """Copy ``count`` bytes from ``src_fd`` at ``offset`` to the current position of ``out_fd``.

    Uses the kernel (copy_file_range, then sendfile) so the bytes never enter
    Python; falls back to a bounded pread/write loop.
    """
    remaining = count
    for copier in (_copy_file_range, _sendfile):
        try:
            while remaining:
                done = copier(src_fd, offset, remaining, out_fd)
                if done == 0:
                    raise UnsafeInputError("file shrank while copying", src_path)
                offset += done
                remaining -= done
            return
        except (OSError, AttributeError) as exc:
            if isinstance(exc, OSError) and exc.errno not in _FALLBACK_ERRNOS:
                raise
    while remaining:
        data = os.pread(src_fd, min(remaining, CHUNK_BYTES), offset)
        if not data:
            raise UnsafeInputError("file shrank while copying", src_path)
        os.write(out_fd, data)
        offset += len(data)
        remaining -= len(data)


def _copy_file_range(src_fd: int, offset: int, count: int, out_fd: int) -> int:
    return os.copy_file_range(src_fd, out_fd, min(count, 1 << 30), offset)


def _sendfile(src_fd: int, offset: int, count: int, out_fd: int) -> int:
    return os.sendfile(out_fd, src_fd, offset, min(count, 1 << 30))


import errno as _errno  # noqa: E402

_FALLBACK_ERRNOS = {_errno.EXDEV, _errno.ENOSYS, _errno.EOPNOTSUPP, _errno.EINVAL, _errno.EBADF, _errno.ENOTSUP}


class StateDictTensors(TensorStore):
    """An in-memory ``{name: torch.Tensor}`` seen through the TensorStore interface."""

    def __init__(self, state_dict: Mapping[str, Any], metadata: dict[str, str] | None = None):
        self._tensors = dict(state_dict)
        self.metadata = dict(metadata or {})
        self.tensors = {}
        for name, tensor in self._tensors.items():
            dtype = TORCH_TO_SAFETENSORS.get(str(getattr(tensor, "dtype", None)))
            if dtype is None:
                raise FormatError(f"tensor {name!r} has unsupported dtype {getattr(tensor, 'dtype', type(tensor))}")
            self.tensors[name] = TensorInfo(name, dtype, tuple(int(d) for d in tensor.shape))

    def read_bytes(self, name: str) -> bytes:
        return self._byte_view(name).tobytes()

    def _byte_view(self, name: str):
        """The tensor's storage as a flat uint8 numpy array, without copying."""
        import torch

        flat = self._tensors[name].detach().to("cpu").contiguous().reshape(-1)
        return flat.view(torch.uint8).numpy()

    def read_raw(self, name: str) -> np.ndarray:
        info = self.tensors[name]
        return self._byte_view(name).view(raw_numpy_dtype(info.dtype)).reshape(info.shape)

    def iter_raw_chunks(self, name: str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[np.ndarray]:
        flat = self.read_raw(name).reshape(-1)
        step = max(1, chunk_bytes // max(1, flat.itemsize))
        for start in range(0, flat.size, step):
            yield flat[start:start + step]

    def copy_into(self, name: str, out_fd: int) -> None:
        from .staging import write_all

        write_all(out_fd, memoryview(self._byte_view(name)))


# -- an in-memory source -----------------------------------------------------

# How reports and errors name an in-memory source: it has no path (compare "<stdin>").
STATE_DICT = "<state_dict>"


def is_state_dict(source: object) -> bool:
    """Whether a library ``source`` argument is an in-memory ``{name: tensor}`` rather than a path."""
    return isinstance(source, Mapping)


def require_source(source: object, config: object, argument: str = "source") -> None:
    """Refuse a ``source`` that is neither a path nor a state dict, and a ``config`` that does not go with it.

    A state dict needs its config; a checkpoint directory has its own config.json, so a ``config`` beside
    one would be silently unused: both are the caller's mistake (ArgumentTypeError, also a TypeError).
    """
    if is_state_dict(source):
        if config is None:
            raise ArgumentTypeError("config is required with an in-memory state dict (a dict, a config.json path "
                                    "or a transformers PretrainedConfig)")
        return
    if not isinstance(source, str | os.PathLike):
        raise ArgumentTypeError(f"{argument} must be a str or os.PathLike, not {type(source).__name__} "
                                f"({source!r:.80}): a checkpoint directory, or an in-memory state dict "
                                "{name: tensor} with its config")
    if config is not None:
        raise ArgumentTypeError(f"config goes with an in-memory state dict; {argument} {str(source)!r} is a "
                                "checkpoint directory, whose own config.json is read")


def open_state_dict(state_dict: Mapping[str, Any], config: Any, *, duplicates: list[str] | None = None) -> Checkpoint:
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


def open_source(source: str | Path | Mapping[str, Any], config: Any = None, *,
                allow_pickle: bool = False) -> Checkpoint:
    """A library call's source: a checkpoint directory (:func:`open_checkpoint`) or a state dict with its config."""
    require_source(source, config)
    if is_state_dict(source):
        return open_state_dict(source, config)  # type: ignore[arg-type]
    return open_checkpoint(source, allow_pickle=allow_pickle)  # type: ignore[arg-type]


# -- opening a directory ------------------------------------------------------

# (file, key) pairs of duplicate JSON keys, when the caller judges them (EC001) instead of refusing the file
Duplicates = list[tuple[Path, str]]


def _load_json_noting(path: Path, duplicates: Duplicates | None) -> Any:
    if duplicates is None:
        return load_json(path)
    keys: list[str] = []
    value = load_json(path, duplicates=keys)
    duplicates.extend((path, key) for key in keys)
    return value


def _load_config(directory: Path, duplicates: Duplicates | None = None) -> dict[str, Any] | None:
    path = directory / "config.json"
    if not os.path.lexists(path):  # a dangling or looping symlink is there, and unreadable: resolve_inside says so
        return None
    config = _load_json_noting(resolve_inside(directory, "config.json"), duplicates)
    if not isinstance(config, dict):
        raise FormatError("config.json is not a JSON object", path)
    return config


def _open_safetensors(directory: Path, names: list[str]) -> tuple[dict, dict, dict]:
    tensors: dict[str, TensorInfo] = {}
    locations: dict[str, _Location] = {}
    metadata: dict[str, str] = {}
    for file_name in names:
        path = resolve_inside(directory, file_name)
        header = read_header(path)
        for key, value in header.metadata.items():
            metadata.setdefault(key, value)
        for entry in header.entries.values():
            if entry.name in tensors:
                raise UnsafeInputError(
                    f"tensor {entry.name!r} is stored in two shards ({tensors[entry.name].file} and {file_name})",
                    directory / file_name,
                )
            tensors[entry.name] = TensorInfo(entry.name, entry.dtype, entry.shape, file_name)
            locations[entry.name] = _Location(path, entry.start, entry.end)
    return tensors, locations, metadata


def _read_index(directory: Path, index_name: str, extension: str,
                duplicates: Duplicates | None = None) -> dict[str, str]:
    index_path = directory / index_name
    index = _load_json_noting(resolve_inside(directory, index_name), duplicates)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise UnsafeInputError("index has no weight_map object", index_path)
    for shard in weight_map.values():
        validate_shard_name(shard, index_path, extension)
    return weight_map


def open_checkpoint(path: str | Path, *, allow_pickle: bool = False, duplicates: Duplicates | None = None) -> Checkpoint:
    """Open a checkpoint directory and validate its structure without reading tensor data (no layout: that is
    ``loading.load_drafter``, and a runnable drafter ``forward.load``).

    ``duplicates``: collect duplicate keys of config.json and the index there (the last value
    wins, as engines read them) instead of refusing the file with EC001.
    ``hf://ORG/NAME[@REV]`` is downloaded through the Hugging Face cache (its
    manifest verified) first; any other path is local, never a Hub id.
    """
    if is_hf_url(path):
        path = local_path(path)
    directory = Path(path)
    if not directory.exists():
        if os.path.lexists(directory):
            raise UnsafeInputError("cannot read: a symlink that loops or leads nowhere", directory)
        hint = (f" (a Hub repository is written hf://{path})"
                if isinstance(path, str) and path.count("/") == 1 and not path.startswith((".", "/", "~")) else "")
        raise UnsafeInputError(f"no such file or directory{hint}", directory)
    if not directory.is_dir():
        from .gguf_file import is_gguf, open_gguf

        if is_gguf(directory):  # llama.cpp's one-file drafter
            from . import hooks

            return open_gguf(directory, config_from_kv=hooks.gguf_config)
        raise FormatError("expected a checkpoint directory (config.json + weights) or a GGUF file", directory)
    config = _load_config(directory, duplicates)
    notes: list[str] = []
    listing = sorted(p.name for p in directory.iterdir())

    if SAFETENSORS_INDEX in listing:
        weight_map = _read_index(directory, SAFETENSORS_INDEX, ".safetensors", duplicates)
        shards = sorted(set(weight_map.values()))
        tensors, locations, metadata = _open_safetensors(directory, shards)
        index_path = directory / SAFETENSORS_INDEX
        only_index = sorted(set(weight_map) - set(tensors))
        only_headers = sorted(set(tensors) - set(weight_map))
        if only_index:
            raise UnsafeInputError(f"index lists tensors no shard contains: {', '.join(only_index[:5])}", index_path)
        if only_headers:
            raise UnsafeInputError(f"shards contain tensors the index does not list: {', '.join(only_headers[:5])}", index_path)
        for name, info in tensors.items():
            if weight_map[name] != info.file:
                raise UnsafeInputError(f"index puts {name!r} in {weight_map[name]} but it is stored in {info.file}", index_path)
        unlisted = sorted(n for n in listing if n.endswith(".safetensors") and n not in shards)
        if unlisted:
            notes.append(f"ignored safetensors files not named by the index: {', '.join(unlisted)}")
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

