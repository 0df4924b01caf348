"""The torch tensor reader: every canonical tensor in its stored dtype, a private map of the file (never written), and
its module imports without torch."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from eagleconv.readers.loading import open_tensors
from eagleconv.readers.loading import load_drafter


@pytest.mark.parametrize("producer", ["vllm", "specforge", "automodel"])
def test_torch_reader_gives_every_canonical_tensor_in_its_stored_dtype(drafter, producer):
    path = drafter(producer=producer, dtype="bfloat16")
    stored = load_file(str(path / "model.safetensors"))
    loaded = load_drafter(path)
    with loaded.torch_tensors() as tensors:
        assert set(tensors) == set(loaded.read.canonical)
        for canonical, name in loaded.read.canonical.items():
            t = tensors[canonical]
            assert t.dtype == stored[name].dtype and torch.equal(t, stored[name])
        assert tensors["fc.weight"].dtype == torch.bfloat16
    loaded.close()


def test_torch_reader_maps_the_file_and_never_writes_to_it(drafter):
    path = drafter(producer="vllm")
    before = (path / "model.safetensors").read_bytes()
    tensors = open_tensors(path)
    fc = tensors["fc.weight"]
    mapping = next(iter(tensors._maps.values()))
    base = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
    assert base <= fc.data_ptr() < base + len(mapping)  # a view of the mapped file, not a copy
    assert tensors["fc.weight"].data_ptr() == fc.data_ptr()
    fc.mul_(0)  # private mapping: the file is untouched
    tensors.close()
    assert float(fc.abs().sum()) == 0.0  # still alive after close
    assert (path / "model.safetensors").read_bytes() == before


def test_torch_reader_module_imports_without_torch():
    code = ("import sys, eagleconv.io.torch_tensors, eagleconv.readers.loading, eagleconv.conversion\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
