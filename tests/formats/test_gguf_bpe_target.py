"""convert --to gguf --target DIR where the target's tokenizer is only a tokenizer.json (BPE).

llama.cpp's converter reads such a directory with ``_set_vocab_llama_hf`` (a byte-fallback llama BPE) or
``_set_vocab_gpt2`` (a GPT-2 byte-level BPE, its pre-tokenizer named by a hash table); eagleconv must write the
same tokenizer keys.  Checked against their converter's output where llama.cpp's source is here: a tiny llama BPE
built with ``tokenizers``, and SmolLM2's real GPT-2 tokenizer.json where the pair is built.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from click.testing import CliRunner  # noqa: E402

from eagleconv.cli.main import cli  # noqa: E402
from eagleconv.conversion import convert  # noqa: E402
from tests.formats.test_gguf_llamacpp_converter import (  # noqa: E402
    _llamacpp_src, _skip_reason, _smollm2_pair, contents, theirs)

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "fixtures" / "tiny-pair"
needs_theirs = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")
SYLLABLES = ["ka", "to", "ri", "me", "su", "no", "la", "pi", "do", "ve", "zo", "xa", "be", "fi", "gu", "qu"]


def corpus() -> list[str]:
    import random

    rng = random.Random(0)
    return [" ".join("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(12))
            for _ in range(500)]


def target_dir(directory: Path, tokenizer: object, *, vocab: int, hidden: int, config: dict | None = None) -> Path:
    """An HF target directory with only tokenizer.json (+ tokenizer_config.json) for its tokenizer."""
    directory.mkdir(parents=True)
    tokenizer.save(str(directory / "tokenizer.json"))  # type: ignore[attr-defined]
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        **(config or {})}))
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab, "hidden_size": hidden,
        "num_hidden_layers": 20, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": hidden,
        "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2}))
    return directory


def llama_bpe(vocab: int) -> object:
    """A byte-fallback llama-style BPE (what gguf's LlamaHfVocab reads): ▁ for spaces, <0xNN> byte tokens."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tok.train_from_iterator(corpus(), trainers.BpeTrainer(vocab_size=vocab - 8, special_tokens=specials,
                                                          show_progress=False))
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    return tok


def gpt2_bpe(vocab: int) -> object:
    """A byte-level GPT-2 BPE of our own: its pre-tokenizer hash is in no table, llama.cpp's included."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus(), trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"],
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                          show_progress=False))
    return tok


@needs_theirs
def test_llama_bpe_tokenizer_json_target_is_written_as_llamacpp_writes_it(tmp_path: Path) -> None:
    src = TINY / "eagle3"
    target = target_dir(tmp_path / "target", llama_bpe(512), vocab=512, hidden=256)
    done = theirs(src, target, tmp_path / "theirs.gguf")
    assert done.returncode == 0, done.stderr[-2000:]
    convert(src, tmp_path / "mine.gguf", "gguf", target=target, outtype="f32")
    mine, their = contents(tmp_path / "mine.gguf"), contents(tmp_path / "theirs.gguf")
    assert mine[0]["tokenizer.ggml.model"][1] == "llama"
    assert mine == their


@needs_theirs
def test_unknown_gpt2_pre_tokenizer_is_refused_as_llamacpp_refuses_it(tmp_path: Path) -> None:
    src = TINY / "eagle3"
    target = target_dir(tmp_path / "target", gpt2_bpe(300), vocab=512, hidden=256)
    done = theirs(src, target, tmp_path / "theirs.gguf")
    assert done.returncode != 0 and "pre-tokenizer was not recognized" in done.stderr
    result = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "mine.gguf"), "--to", "gguf",
                                      "--target", str(target)])
    assert result.exit_code == 2 and "pre-tokenizer" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "mine.gguf").exists()


@pytest.mark.slow
@needs_theirs
@pytest.mark.skipif(_smollm2_pair() is None, reason="no built SmolLM2 pair (fixtures/smollm2/build.py)")
def test_smollm2_hf_target_with_only_tokenizer_json_equals_theirs(tmp_path: Path) -> None:
    """SmolLM2's target directory has a GPT-2 tokenizer.json and no tokenizer.model: the file equals theirs, byte
    for byte in every tensor and every key (tokens, types, merges, the smollm pre-tokenizer, add_bos_token)."""
    pair = _smollm2_pair()
    assert pair is not None and not (pair / "target" / "tokenizer.model").exists()
    done = theirs(pair / "eagle3", pair / "target", tmp_path / "theirs.gguf")
    assert done.returncode == 0, done.stderr[-2000:]
    convert(pair / "eagle3", tmp_path / "mine.gguf", "gguf", target=pair / "target", outtype="f32")
    mine = contents(tmp_path / "mine.gguf")
    assert mine[0]["tokenizer.ggml.pre"][1] == "smollm" and mine[0]["tokenizer.ggml.model"][1] == "gpt2"
    assert mine == contents(tmp_path / "theirs.gguf")


@pytest.mark.skipif(_llamacpp_src() is None, reason="llama.cpp's source is not here")
def test_bpe_pre_table_is_llamacpps() -> None:
    """eagleconv/gguf/gguf_bpe_pre.py is what .ci/llamacpp_bpe_pre.py reads from llama.cpp's converter source."""
    done = subprocess.run([sys.executable, str(REPO / ".ci" / "llamacpp_bpe_pre.py"), str(_llamacpp_src()), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, "run: python .ci/llamacpp_bpe_pre.py LLAMACPP_SRC"
