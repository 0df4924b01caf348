"""A checkpoint known from its headers alone: a Hub repository read by range requests (``eagleconv.hubread.remote``).

It lists every tensor (name, dtype, shape, file) as a local :class:`~eagleconv.io.checkpoint.Checkpoint`
does, so validation's no-tensor-data path (``numeric=False``) and ``inspect`` run on it unchanged.  The
only tensor bytes it hands out are small vectors (d2t, t2d), fetched by one range request each through
``fetch``; anything that needs the weights (the NaN/Inf scan, a forward pass, a conversion) is refused
with one line that names ``--download``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UnsafeInputError, UsageError
from .checkpoint import Checkpoint
from .tensor_store import CHUNK_BYTES, TensorInfo

if TYPE_CHECKING:
    import numpy as np

MAX_SMALL_READ = 64 * 1024 * 1024  # the largest tensor handed out: a d2t of 8M int64 entries


def needs_download(what: str, where: str) -> UsageError:
    """The one line for anything a header-only ``hf://`` read cannot do."""
    return UsageError(f"{what} needs the tensor data, which a header-only hf:// read does not fetch: add --download "
                      "(fetches the whole snapshot)", where)


class RemoteCheckpoint(Checkpoint):
    """A checkpoint read from its config, index and safetensors headers; ``label`` is ``hf://ORG/NAME@COMMIT``.

    ``spans`` maps each tensor to (file, absolute start, end) in that file; ``fetch(file, start, length)``
    returns exactly those bytes (the reader counts and bounds them).
    """

    def __init__(self, label: str, config: dict[str, Any] | None, weights_kind: str, files: list[str],
                 tensors: dict[str, TensorInfo], spans: dict[str, tuple[str, int, int]], metadata: dict[str, str],
                 notes: list[str], fetch: Callable[[str, int, int], bytes]):
        super().__init__(Path(label.removeprefix("hf://")), config, weights_kind, files, tensors, {}, metadata, notes)
        self._label = label
        self._spans = spans
        self._fetch = fetch

    @property
    def label(self) -> str:
        return self._label

    def read_range(self, name: str, offset: int, size: int) -> bytes:
        file, start, end = self._spans[name]
        if offset < 0 or offset + size > end - start:
            raise ValueError(f"range {offset}+{size} outside tensor {name!r}")
        if size > MAX_SMALL_READ:
            raise needs_download(f"reading {name} ({size} bytes)", self._label)
        data = self._fetch(file, start + offset, size)
        if len(data) != size:
            raise UnsafeInputError(f"{file}: {len(data)} of {size} bytes of {name} came back", self._label)
        return data

    def read_bytes(self, name: str) -> bytes:
        _, start, end = self._spans[name]
        return self.read_range(name, 0, end - start)

    def iter_raw_chunks(self, name: str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[np.ndarray]:
        raise needs_download("the NaN/Inf scan", self._label)

    def copy_into(self, name: str, out_fd: int) -> None:
        raise needs_download("copying tensors", self._label)

    def copy_range_into(self, name: str, offset: int, size: int, out_fd: int) -> None:
        raise needs_download("copying tensors", self._label)

    def close(self) -> None:
        pass

