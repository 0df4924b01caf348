"""Hostile GGUF files and hostile --target directories (issue 36 items 4, 5, 7, 9, 10, 11, 17, 18).

Each file is made here from the tiny pair's eagle3 GGUF, byte by byte (tests/support/gguf_bytes.py), with one
bomb in it; each must be refused by inspect, validate and convert alike in one line naming the file and the key,
exit 2, nothing written: the bounds config.json gets (eagleconv.support.bounds, docs/security.md "GGUF files").
"""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

gguf = pytest.importorskip("gguf")

from eagleconv.cli.main import cli  # noqa: E402
from eagleconv.conversion import convert  # noqa: E402
from eagleconv.gguf.gguf_target import read_target  # noqa: E402
from tests.formats.test_gguf import make_target, target_for  # noqa: E402
from tests.support.gguf_bytes import (  # noqa: E402
    ARRAY, BOOL, FLOAT32, INT32, STRING, UINT8, UINT32, UINT64, Gguf, Hole)

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "fixtures" / "tiny-pair"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-gguf")
    convert(PAIR / "eagle3", out / "eagle3.gguf", "gguf", target=target_for(PAIR / "eagle3", out))
    return out / "eagle3.gguf"


def commands(path: Path, out: Path) -> dict[str, list[str]]:
    return {"inspect": ["inspect", str(path)],
            "validate": ["validate", str(path), "--engine", "llama.cpp", "--target", str(PAIR / "target")],
            "convert": ["convert", str(path), str(out), "--to", "vllm"]}


def refused_everywhere(path: Path, tmp_path: Path, *words: str) -> None:
    """inspect, validate and convert each refuse ``path``: exit 2, one line naming it and ``words``, nothing written."""
    for name, args in commands(path, tmp_path / "out").items():
        result = CliRunner().invoke(cli, args)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2, (name, result.output[-1500:])
        assert len(lines) == 1 and str(path) in lines[0] and all(w in lines[0] for w in words), (name, lines)
        assert "internal error" not in lines[0] and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


# key -> (GGUF type, value, element type): each what config.json's bounds refuse, stated in the GGUF instead
BOMBS = {
    "eagle3.block_count": (UINT64, 10 ** 9, None),  # item 4: validate grew for 144 s in expected_tensors
    "eagle3.context_length": (UINT64, 2 ** 62, None),
    "eagle3.vocab_size": (UINT64, 2 ** 40, None),
    "eagle3.embedding_length": (UINT64, 2 ** 40, None),
    "eagle3.rope.freq_base": (FLOAT32, float("inf"), None),
    "eagle3.attention.layer_norm_rms_epsilon": (FLOAT32, float("nan"), None),
    "eagle3.target_layers": (ARRAY, [-1, 2, 3], INT32),
    "eagle3.feed_forward_length": (BOOL, True, None),
}


@pytest.mark.parametrize("key", list(BOMBS))
def test_metadata_is_bounded_as_config_json_is(key: str, tiny_gguf: Path, tmp_path: Path) -> None:
    vtype, value, sub = BOMBS[key]
    path = Gguf.read(tiny_gguf).set(key, vtype, value, sub).write(tmp_path / "bomb.gguf")
    start = time.monotonic()
    refused_everywhere(path, tmp_path, key)
    assert time.monotonic() - start < 30


def test_a_written_target_layers_below_zero_is_refused_by_validate(tiny_gguf: Path, tmp_path: Path) -> None:
    """Item 10: the [2, 0, -3] a 0-layer target used to produce is refused, not called "ok"."""
    path = Gguf.read(tiny_gguf).set("eagle3.target_layers", ARRAY, [2, 0, -3], INT32).write(tmp_path / "t.gguf")
    refused_everywhere(path, tmp_path, "eagle3.target_layers", "-3")


def test_a_sparse_array_bomb_is_refused_before_it_is_read(tiny_gguf: Path, tmp_path: Path) -> None:
    """Item 5: 3e8 UINT8 elements (290 MB stated, a hole on disk) used to take 2.7 GB and 34 s to inspect."""
    g = Gguf.read(tiny_gguf)
    g.kv["general.bomb"] = (ARRAY, UINT8, Hole(300_000_000))
    path = g.write(tmp_path / "sparse.gguf")
    assert os.stat(path).st_blocks * 512 < 20_000_000  # the test costs no disk
    start = time.monotonic()
    refused_everywhere(path, tmp_path, "general.bomb", "300000000")
    assert time.monotonic() - start < 30


def test_a_256k_token_vocabulary_still_reads(tmp_path: Path) -> None:
    """The array budget leaves room for the largest published tokenizer (Gemma 3: 262,144 tokens)."""
    g = Gguf.read(make_target(tmp_path / "small.gguf", layers=8, hidden=64, vocab=4))
    g.set("tokenizer.ggml.tokens", ARRAY, [f"tok{i}" for i in range(262144)], STRING)
    g.set("tokenizer.ggml.token_type", ARRAY, [1] * 262144, INT32)
    g.set("tokenizer.ggml.scores", ARRAY, [0.0] * 262144, FLOAT32)
    target = read_target(g.write(tmp_path / "t.gguf"))
    tokens = next(k.value for k in target.tokenizer if k.key == "tokenizer.ggml.tokens")
    assert target.vocab_size == len(tokens) == 262144 and tokens[-1] == "tok262143"


def test_duplicate_tensor_names_are_refused_as_gguf_refuses_them(tiny_gguf: Path, tmp_path: Path) -> None:
    """Item 7: a second fc.weight of random values was validated "ok" and converted silently."""
    g = Gguf.read(tiny_gguf)
    name, ggml, ne, _ = next(t for t in g.tensors if t[0] == "fc.weight")
    pad = -len(g.data) % 32
    other = np.random.default_rng(0).standard_normal(ne[0] * ne[1]).astype(np.float32).tobytes()
    g.tensors.append((name, ggml, ne, len(g.data) + pad))
    g.data += b"\0" * pad + other
    path = g.write(tmp_path / "dup.gguf")
    with pytest.raises(ValueError, match="duplicated tensor"):
        gguf.GGUFReader(path)
    refused_everywhere(path, tmp_path, "'fc.weight' appears twice")


def test_overlapping_tensors_are_refused(tiny_gguf: Path, tmp_path: Path) -> None:
    g = Gguf.read(tiny_gguf)
    first, second = g.tensors[1], g.tensors[2]
    g.tensors[2] = (second[0], second[1], second[2], first[3])  # the second's bytes are the first's
    refused_everywhere(g.write(tmp_path / "overlap.gguf"), tmp_path, "share bytes", first[0], second[0])


def test_misaligned_offsets_and_a_bool_alignment_are_refused(tiny_gguf: Path, tmp_path: Path) -> None:
    g = Gguf.read(tiny_gguf)
    name, ggml, ne, offset = g.tensors[-1]
    g.tensors[-1] = (name, ggml, ne, offset + 4)
    g.data += b"\0" * 4
    refused_everywhere(g.write(tmp_path / "misaligned.gguf"), tmp_path, name, "general.alignment 32")
    path = Gguf.read(tiny_gguf).set("general.alignment", BOOL, True).write(tmp_path / "bool.gguf")
    with pytest.raises(ValueError, match="alignment"):  # gguf's reader refuses it too
        gguf.GGUFReader(path)
    refused_everywhere(path, tmp_path, "general.alignment", "UINT32")
    ok = Gguf.read(tiny_gguf).set("general.alignment", UINT32, 32).write(tmp_path / "u32.gguf")
    assert CliRunner().invoke(cli, ["inspect", str(ok)]).exit_code == 0


def test_a_gguf_that_is_not_eagle3_says_so(tiny_gguf: Path, tmp_path: Path) -> None:
    path = Gguf.read(tiny_gguf).set("general.architecture", STRING, "llama").write(tmp_path / "llama.gguf")
    refused_everywhere(path, tmp_path, "general.architecture is 'llama'", "--target")


# -- convert --to gguf --target DIR: the target's side files --------------------------------------------------

def sentencepiece_target(directory: Path, **files: bytes | str | None) -> Path:
    """An HF target directory with a real (tiny) SentencePiece tokenizer.model; ``files`` replace or add files."""
    import sentencepiece as spm

    directory.mkdir()
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["ka to ri me su no la pi do ve zo xa be fi gu"] * 50),
                                   model_writer=model, vocab_size=40, model_type="bpe", minloglevel=2)
    (directory / "tokenizer.model").write_bytes(model.getvalue())
    (directory / "config.json").write_text(json.dumps({
        "model_type": "llama", "vocab_size": 512, "hidden_size": 256, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256, "rms_norm_eps": 1e-5}))
    (directory / "tokenizer_config.json").write_text(json.dumps({"add_prefix_space": True}))
    for name, data in files.items():
        name = name.replace("__", ".")
        if data is None:
            continue
        if isinstance(data, str):
            data = data.encode()
        (directory / name).write_bytes(data)
    return directory


def convert_to_gguf(target: Path, tmp_path: Path, src: Path = PAIR / "eagle3") -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "d.gguf"), "--to", "gguf", "--target",
                                      str(target)])
    return result.exit_code, result.output


def config_with(**fields: object) -> str:
    base = {"model_type": "llama", "vocab_size": 512, "hidden_size": 256, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256}
    return json.dumps(base | fields)


HOSTILE_TARGETS = {
    "tokenizer_config BOM": dict(tokenizer_config__json=b"\xef\xbb\xbf{}"),
    "tokenizer_config deep": dict(tokenizer_config__json="[" * 100_000 + "]" * 100_000),
    "tokenizer_config not UTF-8": dict(tokenizer_config__json=b'{"add_prefix_space": "\xff"}'),
    "tokenizer_config a list": dict(tokenizer_config__json="[1, 2]"),
    "added_tokens nested": dict(added_tokens__json='{"<x>": {"a": 1}}'),
    "added_tokens a string id": dict(added_tokens__json='{"<x>": "5"}'),
    "added_tokens id -1": dict(added_tokens__json='{"<x>": -1}'),
    "garbage tokenizer.model": dict(tokenizer__model=b"\x08\x01garbage" * 100),
    "layers 0": dict(config__json=config_with(num_hidden_layers=0)),
    "layers -5": dict(config__json=config_with(num_hidden_layers=-5)),
    "layers true": dict(config__json=config_with(num_hidden_layers=True)),
    "layers 1e9": dict(config__json=config_with(num_hidden_layers=10 ** 9)),
    "vocab 1e12": dict(config__json=config_with(vocab_size=10 ** 12)),
    "vocab a string": dict(config__json=config_with(vocab_size="512")),
}
NAMED = {"tokenizer_config": "tokenizer_config.json", "added_tokens": "added_tokens.json",
         "garbage": "tokenizer.model", "layers": "num_hidden_layers", "vocab": "vocab_size"}


@pytest.mark.parametrize("case", list(HOSTILE_TARGETS))
def test_hostile_target_side_files_are_one_line(case: str, tmp_path: Path) -> None:
    target = sentencepiece_target(tmp_path / "target", **HOSTILE_TARGETS[case])  # type: ignore[arg-type]
    code, output = convert_to_gguf(target, tmp_path)
    lines = output.strip().splitlines()
    assert code == 2 and len(lines) == 1, output[-1500:]
    assert NAMED[case.split()[0]] in lines[0] and "internal error" not in lines[0], lines
    assert not (tmp_path / "d.gguf").exists()


def test_a_target_side_file_linked_to_a_system_file_is_refused(tmp_path: Path) -> None:
    target = sentencepiece_target(tmp_path / "target")
    (target / "tokenizer_config.json").unlink()
    (target / "tokenizer_config.json").symlink_to("/etc/passwd")
    code, output = convert_to_gguf(target, tmp_path)
    assert code == 2 and "resolves outside" in output and "tokenizer_config.json" in output, output
    assert not (tmp_path / "d.gguf").exists()


def test_a_sentencepiece_target_with_added_tokens_converts(tmp_path: Path) -> None:
    """The clean directory the hostile ones are made from: it converts, and an added token lands at its id."""
    target = sentencepiece_target(tmp_path / "target", added_tokens__json='{"<x>": 45, "<far>": 9999}')
    code, output = convert_to_gguf(target, tmp_path)
    assert code == 0, output
    tokens = gguf.GGUFReader(tmp_path / "d.gguf").fields["tokenizer.ggml.tokens"].contents()
    assert tokens[45] == "<x>" and tokens[-1] == "[PAD511]" and len(tokens) == 512


def test_default_target_layers_below_zero_are_refused_not_written(tmp_path: Path) -> None:
    """Item 10: a drafter with no aux ids and a 2-layer target gave [2, 1, -1] (llama.cpp's [2, N//2, N-3])."""
    src = tmp_path / "src"
    src.mkdir()
    config = json.loads((PAIR / "eagle3" / "config.json").read_text())
    for key in ("eagle_aux_hidden_state_layer_ids", "eagle_config"):
        config.pop(key)
    (src / "config.json").write_text(json.dumps(config))
    (src / "model.safetensors").write_bytes((PAIR / "eagle3" / "model.safetensors").read_bytes())
    target = sentencepiece_target(tmp_path / "target", config__json=config_with(num_hidden_layers=2))
    code, output = convert_to_gguf(target, tmp_path, src)
    assert code == 1 and "[2, 1, -1]" in output and "EC013" in output, output
    assert not (tmp_path / "d.gguf").exists()


@pytest.mark.parametrize("layers", [0, 10 ** 9])
def test_a_target_gguf_is_bounded_as_its_config_would_be(layers: int, tmp_path: Path) -> None:
    """A --target GGUF's sizes are held to config.json's bounds (block_count 0 gave a drafter without aux ids
    eagle3.target_layers [2, 0, -3])."""
    target = make_target(tmp_path / "target.gguf", layers=layers, hidden=256, vocab=512)
    code, output = convert_to_gguf(target, tmp_path)
    assert code == 2 and "llama.block_count" in output and len(output.strip().splitlines()) == 1, output
    assert not (tmp_path / "d.gguf").exists()
