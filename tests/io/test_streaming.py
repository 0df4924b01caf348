"""Streaming I/O: bytes survive conversion through every copy path, sharded or not; fsync ordering."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from eagleconv.conversion import convert
from eagleconv.errors import UnsafeInputError
from eagleconv.io import checkpoint
from eagleconv.io.checkpoint import copy_range


def tensor_bytes(directory: Path) -> dict[str, bytes]:
    """Every tensor's raw bytes, read back with safetensors' own reader (sharded or single)."""
    index = directory / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    out: dict[str, bytes] = {}
    for name in files:
        with safe_open(str(directory / name), framework="pt") as f:
            for key in f.keys():
                assert key not in out
                out[key] = f.get_tensor(key).contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return out


def renamed(source: dict[str, bytes]) -> dict[str, bytes]:
    """SpecForge names -> vLLM names (midlayer.* -> layers.0.*)."""
    return {("layers.0." + k[len("midlayer."):] if k.startswith("midlayer.") else k): v for k, v in source.items()}


def _raise(code: int):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))
    return fail


@pytest.mark.parametrize("max_shard_size", [None, 4096, 1])
def test_conversion_preserves_every_tensor_byte(drafter, tmp_path, max_shard_size):
    src = drafter(producer="specforge", eagle31=True)
    out = tmp_path / "out"
    convert(src, out, "vllm", max_shard_size=max_shard_size)
    assert tensor_bytes(out) == renamed(tensor_bytes(src))
    shards = sorted(out.glob("*.safetensors"))
    if max_shard_size is None:
        assert [p.name for p in shards] == ["model.safetensors"]
    else:
        assert len(shards) > 1 and (out / "model.safetensors.index.json").exists()
        index = json.loads((out / "model.safetensors.index.json").read_text())
        assert set(index["weight_map"].values()) == {p.name for p in shards}


@pytest.mark.parametrize("broken", [["copy_file_range"], ["copy_file_range", "sendfile"]])
def test_conversion_falls_back_when_kernel_copy_is_refused(drafter, tmp_path, monkeypatch, broken):
    """EXDEV (cross-device) from copy_file_range, ENOSYS from sendfile: the bytes still arrive intact."""
    src = drafter(producer="specforge")
    for name in broken:
        monkeypatch.setattr(os, name, _raise(errno.EXDEV if name == "copy_file_range" else errno.ENOSYS))
    out = tmp_path / "out"
    convert(src, out, "vllm", max_shard_size=2048)
    assert tensor_bytes(out) == renamed(tensor_bytes(src))


def _files(tmp_path: Path, payload: bytes) -> tuple[int, int, Path]:
    src = tmp_path / "src.bin"
    src.write_bytes(b"HEADER--" + payload + b"--TRAILER")
    src_fd = os.open(src, os.O_RDONLY)
    out_fd = os.open(tmp_path / "out.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(out_fd, b"prefix")
    return src_fd, out_fd, src


def test_copy_range_uses_copy_file_range_when_it_works(tmp_path, monkeypatch):
    payload = os.urandom(3 * 1024 * 1024 + 17)
    calls: list[int] = []
    real = os.copy_file_range
    monkeypatch.setattr(os, "copy_file_range", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    monkeypatch.setattr(os, "sendfile", _raise(errno.EIO))  # must not be reached
    src_fd, out_fd, src = _files(tmp_path, payload)
    try:
        copy_range(src_fd, 8, len(payload), out_fd, src)
    finally:
        os.close(src_fd)
        os.close(out_fd)
    assert calls and (tmp_path / "out.bin").read_bytes() == b"prefix" + payload


@pytest.mark.parametrize("broken", [("copy_file_range",), ("copy_file_range", "sendfile")])
@pytest.mark.parametrize("code", [errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL])
def test_copy_range_falls_back_with_real_files(tmp_path, monkeypatch, broken, code):
    payload = os.urandom(3 * 1024 * 1024 + 17)
    for name in broken:
        monkeypatch.setattr(os, name, _raise(code))
    monkeypatch.setattr(checkpoint, "CHUNK_BYTES", 256 * 1024)  # several rounds of the pread/write loop
    src_fd, out_fd, src = _files(tmp_path, payload)
    try:
        copy_range(src_fd, 8, len(payload), out_fd, src)
        assert os.lseek(out_fd, 0, os.SEEK_CUR) == len(b"prefix") + len(payload)
    finally:
        os.close(src_fd)
        os.close(out_fd)
    assert (tmp_path / "out.bin").read_bytes() == b"prefix" + payload


def test_copy_range_falls_back_when_copy_file_range_is_missing(tmp_path, monkeypatch):
    payload = os.urandom(100_000)
    monkeypatch.delattr(os, "copy_file_range", raising=False)
    src_fd, out_fd, src = _files(tmp_path, payload)
    try:
        copy_range(src_fd, 8, len(payload), out_fd, src)
    finally:
        os.close(src_fd)
        os.close(out_fd)
    assert (tmp_path / "out.bin").read_bytes() == b"prefix" + payload


def test_copy_range_raises_real_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "copy_file_range", _raise(errno.EIO))
    src_fd, out_fd, src = _files(tmp_path, b"x" * 64)
    try:
        with pytest.raises(OSError) as info:
            copy_range(src_fd, 8, 64, out_fd, src)
        assert info.value.errno == errno.EIO
    finally:
        os.close(src_fd)
        os.close(out_fd)


@pytest.mark.parametrize("broken", [(), ("copy_file_range", "sendfile")])
def test_copy_range_refuses_a_source_shorter_than_its_header(tmp_path, monkeypatch, broken):
    for name in broken:
        monkeypatch.setattr(os, name, _raise(errno.EXDEV))
    src_fd, out_fd, src = _files(tmp_path, b"y" * 100)
    try:
        with pytest.raises(UnsafeInputError, match="shrank"):
            copy_range(src_fd, 8, 10_000, out_fd, src)
    finally:
        os.close(src_fd)
        os.close(out_fd)


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise")
def test_sequential_advice_is_given_and_optional(tmp_path, monkeypatch):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    fd = os.open(path, os.O_RDONLY)
    calls: list[tuple] = []
    real = os.posix_fadvise
    try:
        monkeypatch.setattr(os, "posix_fadvise", lambda *a: calls.append(a) or real(*a))
        checkpoint.advise_sequential(fd)
        assert calls == [(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)]
        monkeypatch.setattr(os, "posix_fadvise", _raise(errno.ESPIPE))
        assert checkpoint.advise_sequential(fd) is None  # refused advice is not an error
        monkeypatch.delattr(os, "posix_fadvise")
        assert checkpoint.advise_sequential(fd) is None  # nor is a platform without it
        assert os.pread(fd, 3, 0) == b"abc"  # the descriptor is untouched either way
    finally:
        os.close(fd)


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc to name fsynced files")
def test_every_shard_is_fsynced_before_index_and_rename(drafter, tmp_path, monkeypatch):
    events: list[tuple[str, str]] = []
    real_fsync, real_rename, real_open = os.fsync, os.rename, os.open

    def fsync(fd):
        events.append(("fsync", Path(os.readlink(f"/proc/self/fd/{fd}")).name))
        return real_fsync(fd)

    def rename(a, b):
        events.append(("rename", Path(b).name))
        return real_rename(a, b)

    def open_(path, flags, *args, **kwargs):
        if flags & os.O_CREAT:
            events.append(("create", Path(path).name))
        return real_open(path, flags, *args, **kwargs)

    from eagleconv.io import staging

    real_publish = staging.rename_noreplace

    def publish(a, b):  # the writer publishes with renameat2(RENAME_NOREPLACE) where it can
        events.append(("rename", Path(b).name))
        return real_publish(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(staging, "rename_noreplace", publish)
    src = drafter(producer="specforge")
    out = tmp_path / "out"
    convert(src, out, "vllm", max_shard_size=2048)
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    assert len(shards) > 1
    names = events
    index_created = names.index(("create", "model.safetensors.index.json"))
    published = names.index(("rename", "out"))
    for shard in shards:
        assert names.index(("fsync", shard)) < index_created < published
    assert ("fsync", "model.safetensors.index.json") in names[:published]
    assert ("fsync", "config.json") in names[:published]
    assert tensor_bytes(out) == renamed(tensor_bytes(src))



def test_no_fsync_skips_every_fsync_but_still_publishes_atomically(drafter, tmp_path, monkeypatch):
    calls: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd))[1])
    src = drafter(producer="specforge")
    convert(src, tmp_path / "durable", "vllm", max_shard_size=2048)
    assert calls, "the default must fsync"
    calls.clear()
    convert(src, tmp_path / "fast", "vllm", max_shard_size=2048, durable=False)
    assert calls == []
    assert tensor_bytes(tmp_path / "fast") == tensor_bytes(tmp_path / "durable")
    assert not list(tmp_path.glob(".fast.*"))
