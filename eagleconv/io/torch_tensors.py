"""torch tensors by canonical name, memory-mapped from a checkpoint: for forward passes and transforms.

Over the safe reader (headers already validated, shard and symlink policy
applied): each safetensors file is mapped once, copy-on-write, and a tensor is
a view of its bytes in the stored dtype (BF16 stays BF16).  Nothing is copied
until a caller converts or writes to it, so opening a 2 GB drafter costs page
tables, not RAM.  torch is imported only here, only when used.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ArgumentTypeError, FormatError
from .dtypes import DTYPE_SIZES, TORCH_TO_SAFETENSORS
from .checkpoint import Checkpoint
from .state_dict import StateDictTensors
from .tensor_store import TensorInfo, TensorStore

if TYPE_CHECKING:
    import torch


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a safetensors dtype name (the one table in io.dtypes, read backwards)."""
    import torch

    for torch_name, st_name in TORCH_TO_SAFETENSORS.items():
        if st_name == name and (dtype := getattr(torch, torch_name.removeprefix("torch."), None)) is not None:
            return dtype  # (float8_e8m0fnu is newer than the torch eagleconv requires)
    raise ValueError(f"no torch dtype for safetensors dtype {name} in torch {torch.__version__}")


def check_state_dict(state: Mapping[Any, Any], path: str | Path | None = None) -> None:
    """Refuse a state dict whose bytes cannot be read, naming the tensor, before anything reads it.

    A non-string key is the caller's mistake (ArgumentTypeError, also a TypeError); a meta-device tensor (no
    data: built under ``init_empty_weights`` or ``device="meta"``) or a sparse one (no flat storage) is input
    eagleconv cannot read (FormatError).  Without torch imported no value can be a tensor, so torch is not
    imported here.
    """
    import sys

    torch_module = sys.modules.get("torch")
    for key, value in state.items():
        if not isinstance(key, str):
            raise ArgumentTypeError(f"state dict keys must be tensor names (str), not {type(key).__name__} {key!r:.40}")
        if torch_module is None or not isinstance(value, torch_module.Tensor):
            continue
        if value.is_meta:
            raise FormatError(f"tensor {key!r} is on the meta device: it has no data to read (load the real weights, "
                              "not a model built with device='meta' or init_empty_weights)", path)
        if value.layout != torch_module.strided:
            raise FormatError(f"tensor {key!r} is {value.layout} (not dense): pass tensor.to_dense()", path)


def tensor_bytes(tensor: torch.Tensor) -> tuple[str, tuple[int, ...], bytes]:
    """(safetensors dtype, shape, little-endian bytes) of a tensor built in memory, for the writer."""
    import torch

    dtype = TORCH_TO_SAFETENSORS.get(str(tensor.dtype))
    if dtype is None:
        raise ValueError(f"cannot store dtype {tensor.dtype}")
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return dtype, tuple(int(d) for d in tensor.shape), flat.view(torch.uint8).numpy().tobytes()


class TorchTensors(Mapping[str, "torch.Tensor"]):
    """``{canonical name: torch.Tensor}`` over a :class:`TensorStore`, read lazily and memory-mapped.

    ``canonical`` maps canonical names to the names stored in the checkpoint
    (``ReadResult.canonical``).  Tensors share memory with a private mapping
    of the file: writing to one never reaches the file.  Call :meth:`close`
    (or use ``with``) when done; tensors still alive keep their mapping.
    """

    def __init__(self, store: TensorStore, canonical: Mapping[str, str], *, owns_store: bool = False):
        self._store = store
        self._owns_store = owns_store
        self._canonical = dict(canonical)
        self._maps: dict[Path, mmap.mmap] = {}

    # Mapping interface -----------------------------------------------------
    def __getitem__(self, name: str) -> torch.Tensor:
        stored = self._canonical[name]
        return self._load(stored, self._store.tensors[stored])

    def __iter__(self) -> Iterator[str]:
        return iter(self._canonical)

    def __len__(self) -> int:
        return len(self._canonical)

    def info(self, name: str) -> TensorInfo:
        """Header facts (dtype, shape) without touching the data."""
        return self._store.tensors[self._canonical[name]]

    # ------------------------------------------------------------------------
    def _load(self, stored: str, info: TensorInfo) -> torch.Tensor:
        import torch

        dtype = torch_dtype(info.dtype)
        memory = self._store._memory if isinstance(self._store, Checkpoint) else self._store
        if isinstance(memory, StateDictTensors):  # already in memory (--allow-pickle, a state dict): no copy
            return memory._tensors[stored].detach().to("cpu")  # (a trainer's GPU tensor: where the math runs)
        if isinstance(self._store, Checkpoint) and info.numel == 0:
            return torch.empty(info.shape, dtype=dtype)
        loc = self._mapped(stored, info)
        if loc is not None:
            flat = torch.frombuffer(self._map(loc.path), dtype=dtype, count=info.numel, offset=loc.start)
            return flat.view(info.shape)
        # unaligned data: a copy of this one tensor
        raw = bytearray(self._store.read_bytes(stored))
        if not raw:
            return torch.empty(info.shape, dtype=dtype)
        return torch.frombuffer(raw, dtype=dtype).view(info.shape)

    def page_dropper(self, name: str) -> Callable[[int, int], None] | None:
        """``drop(lo, hi)``: release the pages of bytes lo..hi of canonical ``name`` from this process, where the
        tensor is a view of a file mapping (they stay in the page cache; a later read faults them back in from
        it), else None: the pages of a copy hold its only data, and dropping them would zero it.  Only whole pages
        inside the range are released.  For a caller that keeps its own copy (a packed weight)."""
        info = self.info(name)
        loc = self._mapped(self._canonical[name], info) if info.numel else None
        if loc is None:
            return None
        buffer, page, base, size = self._map(loc.path), mmap.PAGESIZE, loc.start, loc.end - loc.start

        def drop(lo: int, hi: int) -> None:
            first = -(-(base + max(0, lo)) // page) * page
            last = ((base + min(size, hi)) // page) * page
            if last > first:
                try:
                    buffer.madvise(mmap.MADV_DONTNEED, first, last - first)
                except (AttributeError, OSError):  # pragma: no cover - platform without madvise
                    pass

        return drop

    def _mapped(self, stored: str, info: TensorInfo) -> Any:
        """The file location of ``stored`` where ``_load`` returns a view of the file's mapping, else None (a copy:
        a state dict in memory, or data not aligned to its dtype).  One rule for loading and for page_dropper,
        which must never release the pages of a copy."""
        if not isinstance(self._store, Checkpoint) or isinstance(self._store._memory, StateDictTensors):
            return None
        loc = self._store._locations[stored]
        return loc if loc.start % DTYPE_SIZES[info.dtype] == 0 else None

    def _map(self, path: Path) -> mmap.mmap:
        if path not in self._maps:
            fd = os.open(path, os.O_RDONLY)
            try:
                self._maps[path] = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
            finally:
                os.close(fd)
        return self._maps[path]

    def close(self) -> None:
        """Drop our references to the mappings.

        Never ``mmap.close()``: torch.frombuffer holds a reference to the map
        but no buffer export, so closing would unmap memory live tensors use.
        Each map is unmapped when its last tensor is freed.
        """
        self._maps.clear()
        if self._owns_store:
            self._store.close()

    def __enter__(self) -> TorchTensors:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
