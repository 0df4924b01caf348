"""Hostile and malformed inputs: each is refused with a clear, specific error and nothing is read or written."""

from __future__ import annotations

import json
import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eagleconv.errors import FormatError, UnsafeInputError
from eagleconv.io.reader import open_checkpoint
from eagleconv.io.safetensors_header import parse_header_bytes, read_header
from eagleconv.support.jsonio import load_json


def write_safetensors(path, header: dict | bytes, data: bytes = b"", prefix_len: int | None = None) -> None:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(raw) if prefix_len is None else prefix_len
    path.write_bytes(struct.pack("<Q", n) + raw + data)


def ok_header(**extra) -> dict:
    h = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "BF16", "shape": [2], "data_offsets": [8, 12]}}
    h.update(extra)
    return h


def test_valid_file_parses(tmp_path):
    p = tmp_path / "x.safetensors"
    write_safetensors(p, ok_header(), b"\0" * 12)
    header = read_header(p)
    assert {e.name: (e.dtype, e.shape, e.nbytes) for e in header.entries.values()} == {
        "a": ("F32", (2,), 8), "b": ("BF16", (2,), 4)}


def test_zero_size_and_scalar_tensors_are_legal(tmp_path):
    p = tmp_path / "x.safetensors"
    h = {"empty": {"dtype": "F32", "shape": [0, 4], "data_offsets": [0, 0]},
         "scalar": {"dtype": "I64", "shape": [], "data_offsets": [0, 8]}}
    write_safetensors(p, h, b"\0" * 8)
    assert set(read_header(p).entries) == {"empty", "scalar"}


@pytest.mark.parametrize("header,data,match", [
    (ok_header(), b"\0" * 11, "truncated"),
    (ok_header(), b"\0" * 13, "trailing bytes"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "BF16", "shape": [2], "data_offsets": [6, 10]}},
     b"\0" * 10, "overlaps"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "BF16", "shape": [2], "data_offsets": [10, 14]}},
     b"\0" * 14, "gap"),
    ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, "needs 12"),
    ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8, "invalid shape"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8, "invalid data_offsets"),
    ({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, "unknown dtype"),
    ({"__metadata__": {"format": 1}, **ok_header()}, b"\0" * 12, "strings to strings"),
    ({"a": {"dtype": "F32", "shape": [2 ** 62, 2 ** 62], "data_offsets": [0, 8]}}, b"\0" * 8, "needs"),
])
def test_bad_headers_are_refused(tmp_path, header, data, match):
    p = tmp_path / "x.safetensors"
    write_safetensors(p, header, data)
    with pytest.raises(UnsafeInputError, match=match) as info:
        read_header(p)
    assert str(p) in str(info.value)


def test_duplicate_key_in_header_is_ec001(tmp_path):
    p = tmp_path / "x.safetensors"
    raw = b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    write_safetensors(p, raw, b"\0" * 4)
    with pytest.raises(UnsafeInputError) as info:
        read_header(p)
    assert info.value.code == "EC001" and "duplicate key 'a'" in str(info.value)


def test_huge_header_length_is_refused_before_allocating(tmp_path):
    p = tmp_path / "x.safetensors"
    write_safetensors(p, ok_header(), b"\0" * 12, prefix_len=2 ** 63)
    with pytest.raises(UnsafeInputError, match="exceeds"):
        read_header(p)


def test_header_length_past_end_of_file(tmp_path):
    p = tmp_path / "x.safetensors"
    write_safetensors(p, ok_header(), b"", prefix_len=10_000)
    with pytest.raises(UnsafeInputError, match="past the end"):
        read_header(p)


def test_zip_pickle_disguised_as_safetensors(tmp_path):
    p = tmp_path / "model.safetensors"
    p.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(UnsafeInputError, match="zip archive"):
        read_header(p)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_header_parser_never_crashes(data):
    """Arbitrary bytes after the length prefix either parse or raise UnsafeInputError, nothing else."""
    from pathlib import Path

    try:
        parse_header_bytes(Path("fuzz.safetensors"), struct.pack("<Q", len(data)), data, 8 + len(data))
    except UnsafeInputError:
        pass


def test_json_duplicate_keys_and_nan_refused(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"hidden_size": 32, "hidden_size": 64}')
    with pytest.raises(UnsafeInputError, match="duplicate key 'hidden_size'"):
        load_json(p)
    p.write_text('{"rope_theta": NaN}')
    with pytest.raises(UnsafeInputError, match="NaN"):
        load_json(p)


# -- checkpoint directories ---------------------------------------------------

def make_sharded(tmp_path, weight_map: dict, shards: dict[str, dict]):
    d = tmp_path / "ckpt"
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    for name, header in shards.items():
        size = max((v["data_offsets"][1] for v in header.values()), default=0)
        write_safetensors(d / name, header, b"\0" * size)
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return d


def one(name):
    return {name: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}


@pytest.mark.parametrize("shard_name", [
    "../outside.safetensors", "/etc/passwd.safetensors", "C:evil.safetensors", "..\\x.safetensors",
    "sub/model.safetensors", "model.bin", "\\\\server\\share.safetensors",
])
def test_index_shard_names_are_validated(tmp_path, shard_name):
    d = make_sharded(tmp_path, {"a": shard_name}, {"model-1.safetensors": one("a")})
    with pytest.raises(UnsafeInputError, match="shard name"):
        open_checkpoint(d)


def test_index_and_headers_must_agree_both_ways(tmp_path):
    d = make_sharded(tmp_path, {"a": "s1.safetensors", "ghost": "s1.safetensors"}, {"s1.safetensors": one("a")})
    with pytest.raises(UnsafeInputError, match="no shard contains: ghost"):
        open_checkpoint(d)
    d2 = make_sharded(tmp_path / "2", {"a": "s1.safetensors"},
                      {"s1.safetensors": {**one("a"), "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}})
    with pytest.raises(UnsafeInputError, match="does not list: b"):
        open_checkpoint(d2)


def test_tensor_in_two_shards_is_refused(tmp_path):
    d = make_sharded(tmp_path, {"a": "s1.safetensors"}, {"s1.safetensors": one("a"), "s2.safetensors": one("a")})
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}}))
    with pytest.raises(UnsafeInputError, match="stored in two shards"):
        open_checkpoint(d)


def test_symlink_escaping_the_checkpoint_is_refused(tmp_path):
    outside = tmp_path / "secret.safetensors"
    write_safetensors(outside, one("a"), b"\0" * 4)
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text("{}")
    os.symlink(outside, d / "model.safetensors")
    with pytest.raises(UnsafeInputError, match="resolves outside"):
        open_checkpoint(d)


def test_symlink_inside_the_checkpoint_is_followed(tmp_path):
    d = tmp_path / "ckpt"
    (d / "blobs").mkdir(parents=True)
    write_safetensors(d / "blobs" / "x", one("a"), b"\0" * 4)
    (d / "config.json").write_text("{}")
    os.symlink(d / "blobs" / "x", d / "model.safetensors")
    assert set(open_checkpoint(d).tensors) == {"a"}


def test_non_regular_file_is_refused(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text("{}")
    os.mkfifo(d / "model.safetensors")
    with pytest.raises(UnsafeInputError, match="not a regular file"):
        open_checkpoint(d)


def test_pickles_are_refused_without_allow_pickle(drafter):
    src = drafter(producer="eagle")
    with pytest.raises(UnsafeInputError, match="--allow-pickle"):
        open_checkpoint(src)
    assert set(open_checkpoint(src, allow_pickle=True).tensors) >= {"fc.weight", "midlayer.self_attn.q_proj.weight"}


def test_hostile_pickle_is_refused_even_with_allow_pickle(tmp_path):
    import pickle

    class Boom:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text("{}")
    import torch

    torch.save({"fc.weight": torch.zeros(1), "x": Boom()}, d / "pytorch_model.bin", pickle_module=pickle)
    with pytest.raises(UnsafeInputError, match="weights-only unpickler refused"):
        open_checkpoint(d, allow_pickle=True)
    assert not (tmp_path / "pwned").exists()


def test_multiple_safetensors_without_index_are_refused(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text("{}")
    write_safetensors(d / "a.safetensors", one("a"), b"\0" * 4)
    write_safetensors(d / "b.safetensors", one("b"), b"\0" * 4)
    with pytest.raises(UnsafeInputError, match="no model.safetensors.index.json"):
        open_checkpoint(d)


def test_missing_weights_and_missing_path(tmp_path):
    with pytest.raises(UnsafeInputError, match="no such file"):
        open_checkpoint(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FormatError, match="no weights found"):
        open_checkpoint(tmp_path / "empty")


def test_tensor_count_is_capped(tmp_path, monkeypatch):
    from eagleconv.io import safetensors_header

    monkeypatch.setattr(safetensors_header, "MAX_TENSORS", 3)
    header = {f"t{i}": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(4)}
    p = tmp_path / "x.safetensors"
    write_safetensors(p, header, b"\0" * 4)
    with pytest.raises(UnsafeInputError, match="exceed the limit of 3"):
        read_header(p)


def test_writer_refuses_the_reserved_metadata_name():
    from eagleconv.io.safetensors_header import build_header

    with pytest.raises(ValueError, match="__metadata__"):
        build_header([("__metadata__", "F32", (1,), 4)], None)


def test_built_header_is_padded_and_parses_back(tmp_path):
    from eagleconv.io.safetensors_header import build_header

    prefix, offsets = build_header([("a", "F32", (2,), 8), ("b", "BF16", (3,), 6)], {"format": "pt"})
    assert (len(prefix) - 8) % 8 == 0 and offsets == [0, 8]
    p = tmp_path / "x.safetensors"
    p.write_bytes(prefix + b"\0" * 14)
    header = read_header(p)
    assert header.metadata == {"format": "pt"} and header.entries["b"].shape == (3,)
    from safetensors import safe_open

    with safe_open(str(p), "np") as f:  # the reference parser agrees
        assert sorted(f.keys()) == ["a", "b"]
