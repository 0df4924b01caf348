"""An in-memory ``{name: tensor}`` seen as a tensor store, and what a library call accepts as its source.

Split from ``io/reader.py`` (issue 26): a training loop's state dict (torch tensors, or numpy arrays on a
core install without torch) is read where it is, never written out as a source.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ArgumentTypeError, FormatError
from .dtypes import NUMPY_TO_SAFETENSORS, TORCH_TO_SAFETENSORS, raw_numpy_dtype
from .durable import write_all
from .tensor_store import CHUNK_BYTES, TensorInfo, TensorStore

if TYPE_CHECKING:
    import numpy as np

def _is_ndarray(value: object) -> bool:
    """Whether ``value`` is a numpy array (numpy is not imported for it: an array means it already is)."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.ndarray)


class StateDictTensors(TensorStore):
    """An in-memory ``{name: torch.Tensor or numpy.ndarray}`` seen through the TensorStore interface (a core
    install, without torch, holds numpy arrays)."""

    def __init__(self, state_dict: Mapping[str, Any], metadata: dict[str, str] | None = None):
        self._tensors = dict(state_dict)
        self.metadata = dict(metadata or {})
        self.tensors = {}
        for name, tensor in self._tensors.items():
            if _is_ndarray(tensor):
                dtype = NUMPY_TO_SAFETENSORS.get(tensor.dtype.name)
            elif type(tensor).__module__.partition(".")[0] == "torch":
                dtype = TORCH_TO_SAFETENSORS.get(str(getattr(tensor, "dtype", None)))
            else:
                raise FormatError(f"tensor {name!r} is a {type(tensor).__name__}, not a torch tensor or a numpy array")
            if dtype is None:
                raise FormatError(f"tensor {name!r} has dtype {tensor.dtype}, which safetensors cannot store")
            self.tensors[name] = TensorInfo(name, dtype, tuple(int(d) for d in tensor.shape))

    def read_bytes(self, name: str) -> bytes:
        return self._byte_view(name).tobytes()

    def _byte_view(self, name: str):
        """The tensor's storage as a flat little-endian uint8 numpy array, without copying where it can."""
        import numpy as np

        value = self._tensors[name]
        if _is_ndarray(value):
            if value.dtype.byteorder == ">":
                value = value.astype(value.dtype.newbyteorder("<"))
            return np.ascontiguousarray(value).reshape(-1).view(np.uint8)
        import torch

        flat = value.detach().to("cpu").contiguous().reshape(-1)
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

