"""The target's side of a llama.cpp draft GGUF: tokenizer metadata, layer count, vocab and hidden size.

llama.cpp's converter reads them from ``--target-model-dir``; eagleconv reads them from ``--target``:

- a GGUF file (the target as llama.cpp serves it): every ``tokenizer.*`` key is copied verbatim, so the
  draft's vocab is exactly the one ``common_speculative_are_compatible`` compares against;
- an HF model directory: ``config.json`` (``text_config`` merged, as the converter does) and a SentencePiece
  ``tokenizer.model``, written as the converter's ``_set_vocab_sentencepiece`` writes it.  A directory with
  only ``tokenizer.json`` is refused with the way out (its GPT-2 vocab needs the converter's pre-tokenizer
  hash table): pass the target's GGUF instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import FormatError, MissingExtraError, UsageError
from .io.gguf_file import KeyValue, is_gguf, read_header


@dataclass
class TargetMeta:
    """What the draft GGUF takes from the target."""

    source: str
    num_layers: int
    vocab_size: int
    hidden_size: int
    tokenizer: list[KeyValue] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sentencepiece_dir: Path | None = None  # an HF target: its tokenizer keys depend on the drafter's vocab_size

    def tokenizer_keys(self, vocab_size: int) -> list[KeyValue]:
        return sentencepiece_keys(self.sentencepiece_dir, vocab_size) if self.sentencepiece_dir else self.tokenizer


def read_target(path: str | Path) -> TargetMeta:
    """The target's metadata from a GGUF file or an HF directory (see the module docstring)."""
    path = Path(path)
    if not path.exists():
        raise UsageError("--target: no such file or directory", path)
    if path.is_file():
        if not is_gguf(path):
            raise UsageError("--target is a file but not a GGUF (pass the target's .gguf or its HF directory)", path)
        return _from_gguf(path)
    return _from_hf_dir(path)


def _from_gguf(path: Path) -> TargetMeta:
    import gguf

    header = read_header(path)
    kv = header.kv

    def get(key: str) -> Any:
        if key not in kv:
            raise FormatError(f"--target GGUF lacks {key}", path)
        return kv[key][2]
    arch = get("general.architecture")
    layers, hidden = get(f"{arch}.block_count"), get(f"{arch}.embedding_length")
    tokens = kv.get("tokenizer.ggml.tokens")
    vocab = len(tokens[2]) if tokens is not None else get(f"{arch}.vocab_size")
    keys = [KeyValue(key, value, gguf.GGUFValueType(vtype), gguf.GGUFValueType(sub) if sub is not None else None)
            for key, (vtype, sub, value) in kv.items() if key.startswith("tokenizer.")]
    if "tokenizer.ggml.model" not in kv:
        raise FormatError("--target GGUF has no tokenizer (tokenizer.ggml.model)", path)
    return TargetMeta(str(path), int(layers), int(vocab), int(hidden), keys,
                      [f"target metadata from {path.name}: {arch}, {layers} layers, vocab {vocab}; "
                       f"its {len(keys)} tokenizer.* keys copied verbatim"])


def _from_hf_dir(path: Path) -> TargetMeta:
    from .jsonio import load_json

    config_path = path / "config.json"
    if not config_path.is_file():
        raise UsageError("--target directory has no config.json", path)
    config = load_json(config_path)
    if not isinstance(config, dict):
        raise FormatError("config.json is not a JSON object", config_path)
    if isinstance(config.get("text_config"), dict):
        config = {**config, **config["text_config"]}
    try:
        layers, vocab, hidden = (int(config[k]) for k in ("num_hidden_layers", "vocab_size", "hidden_size"))
    except (KeyError, TypeError, ValueError) as exc:
        raise FormatError(f"config.json lacks a usable {exc}", config_path) from None
    if not (path / "tokenizer.model").is_file():
        raise UsageError("--target directory has no SentencePiece tokenizer.model; eagleconv writes a GPT-2 "
                         "(tokenizer.json) vocab only from the target's GGUF, which carries llama.cpp's own: pass "
                         "--target TARGET.gguf (convert the target with llama.cpp's convert_hf_to_gguf.py first)", path)
    return TargetMeta(str(path), layers, vocab, hidden, sentencepiece_dir=path, notes=[
        f"target metadata from {path}: {layers} layers, vocab {vocab}; SentencePiece vocab from tokenizer.model"])


def sentencepiece_keys(path: Path, vocab_size: int) -> list[KeyValue]:
    """tokenizer.* as llama.cpp's ``_set_vocab_sentencepiece`` writes them, padded to the drafter's vocab_size."""
    import gguf

    try:
        from sentencepiece import SentencePieceProcessor
    except ImportError:
        raise MissingExtraError("reading a SentencePiece tokenizer.model needs the sentencepiece package "
                                "(pip install 'eagleconv[sentencepiece]'), as llama.cpp's converter does",
                                "sentencepiece", "sentencepiece") from None
    T = gguf.TokenType
    sp = SentencePieceProcessor()
    sp.LoadFromFile(str(path / "tokenizer.model"))
    tokens = [f"[PAD{i}]".encode() for i in range(vocab_size)]
    scores = [-10000.0] * vocab_size
    types = [int(T.UNUSED)] * vocab_size
    for i in range(min(sp.vocab_size(), vocab_size)):
        kind = (T.UNKNOWN if sp.IsUnknown(i) else T.CONTROL if sp.IsControl(i) else T.UNUSED if sp.IsUnused(i)
                else T.BYTE if sp.IsByte(i) else T.NORMAL)
        tokens[i], scores[i], types[i] = sp.IdToPiece(i).encode(), sp.GetScore(i), int(kind)
    added = path / "added_tokens.json"
    if added.is_file():
        for text, i in json.loads(added.read_text(encoding="utf-8")).items():
            if i < vocab_size:
                tokens[i], scores[i], types[i] = text.encode(), -1000.0, int(T.USER_DEFINED)
    V = gguf.GGUFValueType
    keys = []
    config_file = path / "tokenizer_config.json"
    if config_file.is_file():
        prefix = json.loads(config_file.read_text(encoding="utf-8")).get("add_prefix_space")
        if prefix is not None:
            keys.append(KeyValue("tokenizer.ggml.add_space_prefix", bool(prefix), V.BOOL))
    keys += [KeyValue("tokenizer.ggml.model", "llama", V.STRING), KeyValue("tokenizer.ggml.pre", "default", V.STRING),
            KeyValue("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING),
            KeyValue("tokenizer.ggml.scores", scores, V.ARRAY, V.FLOAT32),
            KeyValue("tokenizer.ggml.token_type", types, V.ARRAY, V.INT32)]
    return keys + special_keys(path, len(tokens))


def special_keys(path: Path, n_vocab: int) -> list[KeyValue]:
    """gguf.SpecialVocab's keys (bos/eos ids, add_bos, chat template...), captured in its order."""
    import gguf

    capture = _Capture()
    gguf.SpecialVocab(path, n_vocab=n_vocab).add_to_gguf(capture)  # type: ignore[arg-type]
    return capture.keys


class _Capture:
    """Stands in for GGUFWriter under gguf.SpecialVocab.add_to_gguf, recording the keys it adds."""

    def __init__(self) -> None:
        import gguf

        self.keys: list[KeyValue] = []
        self._writer = gguf.GGUFWriter(None, "eagle3")
        self._writer.kv_data = [{}]

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._writer, name)

        def record(*args: Any, **kwargs: Any) -> Any:
            before = dict(self._writer.kv_data[0])
            out = method(*args, **kwargs)
            for key, value in self._writer.kv_data[0].items():
                if key not in before:
                    self.keys.append(KeyValue(key, value.value, value.type, value.sub_type))
            return out
        return record
