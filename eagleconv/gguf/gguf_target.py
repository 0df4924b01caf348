"""The target's side of a llama.cpp draft GGUF: tokenizer metadata, layer count, vocab and hidden size.

llama.cpp's converter reads them from ``--target-model-dir``; eagleconv reads them from ``--target``:

- a GGUF file (the target as llama.cpp serves it): every ``tokenizer.*`` key is copied verbatim, so the
  draft's vocab is exactly the one ``common_speculative_are_compatible`` compares against;
- an HF model directory: ``config.json`` (``text_config`` merged, as the converter does) and its tokenizer, in
  the converter's order (``conversion/llama.py`` ``set_vocab``): a SentencePiece ``tokenizer.model``
  (``_set_vocab_sentencepiece``), else a ``tokenizer.json`` that gguf's ``LlamaHfVocab`` reads (a byte-fallback
  llama BPE: ``_set_vocab_llama_hf``), else a GPT-2 BPE ``tokenizer.json`` (``_set_vocab_gpt2``: the vocab through
  transformers' AutoTokenizer, the pre-tokenizer named from llama.cpp's hash table in ``gguf_bpe_pre``, merges
  and special tokens by gguf's ``SpecialVocab``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FormatError, MissingExtraError, UnsafeInputError, UsageError
from .gguf_file import is_gguf, read_header
from .gguf_writer import KeyValue


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
    vocab_kind: str = "sentencepiece"  # an HF target's tokenizer: "sentencepiece" | "llama_hf" | "gpt2"

    def tokenizer_keys(self, vocab_size: int) -> list[KeyValue]:
        if self.sentencepiece_dir is None:
            return self.tokenizer
        read = {"sentencepiece": sentencepiece_keys, "llama_hf": llama_hf_keys, "gpt2": gpt2_keys}[self.vocab_kind]
        keys = read(self.sentencepiece_dir, vocab_size)
        if vocab_size == GRANITE_VOCAB:  # conversion/llama.py set_vocab: "Apply to granite small models only"
            import gguf

            keys = [k for k in keys if k.key != "tokenizer.ggml.add_bos_token"]
            keys.append(KeyValue("tokenizer.ggml.add_bos_token", False, gguf.GGUFValueType.BOOL))
        return keys


GRANITE_VOCAB = 49152  # llama.cpp's converter writes add_bos_token = false for a llama drafter of this vocab size


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
    _check_sizes({f"{arch}.block_count": layers, f"{arch}.embedding_length": hidden, f"{arch}.vocab_size": vocab}, path)
    keys = [KeyValue(key, value, gguf.GGUFValueType(vtype), gguf.GGUFValueType(sub) if sub is not None else None)
            for key, (vtype, sub, value) in kv.items() if key.startswith("tokenizer.")]
    if "tokenizer.ggml.model" not in kv:
        raise FormatError("--target GGUF has no tokenizer (tokenizer.ggml.model)", path)
    return TargetMeta(str(path), int(layers), int(vocab), int(hidden), keys,
                      [f"target metadata from {path.name}: {arch}, {layers} layers, vocab {vocab}; "
                       f"its {len(keys)} tokenizer.* keys copied verbatim"])


def _check_sizes(sizes: dict[str, Any], path: Path) -> None:
    """The target's layer count, hidden size and vocab: positive integers within eagleconv.support.bounds' limits (a
    target GGUF is held to what its config.json would be)."""
    from ..support.bounds import MAX_DIM, MAX_LAYERS, MAX_VOCAB

    for (key, value), limit in zip(sizes.items(), (MAX_LAYERS, MAX_DIM, MAX_VOCAB)):
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit:
            raise UnsafeInputError(f"{key} is {value!r}, not an integer from 1 to eagleconv's limit of {limit} "
                                   "(docs/security.md)", path)


# The target directory's files llama.cpp's converter (gguf.SpecialVocab, LlamaHfVocab) and transformers' tokenizer
# read: each checked before either opens it (inside the directory, capped, and JSON through the strict reader).
# config.json is not among them: the one reader of a target's config (config.target.read_target_config) reads it.
SIDE_JSON = ("tokenizer_config.json", "added_tokens.json", "special_tokens_map.json", "chat_template.json",
             "tokenizer.json", "vocab.json")
SIDE_RAW = ("tokenizer.model", "merges.txt", "chat_template.jinja")
MAX_SIDE_BYTES = 64 * 1024 * 1024  # tokenizer.json of a 256k vocab is ~33 MiB (Gemma 3); a config ~ KiB


def check_side_files(path: Path) -> None:
    """Refuse a target directory whose side files are hostile: a symlink out of it (``io.paths`` policy), a file
    past :data:`MAX_SIDE_BYTES`, JSON that the strict reader refuses (BOM, non-UTF-8, nesting, duplicate keys) or
    that is not an object, a chat template that is not UTF-8.  One line naming the file, exit 2."""
    import os

    from ..support.bounds import read_capped
    from ..io.paths import resolve_inside
    from ..support.jsonio import load_json

    for name in (*SIDE_JSON, *SIDE_RAW):
        if not os.path.lexists(path / name):
            continue
        file = resolve_inside(path, name)
        if name in SIDE_JSON:
            if not isinstance(load_json(file, max_bytes=MAX_SIDE_BYTES), dict):
                raise FormatError(f"{name} is not a JSON object", file)
        else:
            data = read_capped(file, name, MAX_SIDE_BYTES)
            if name.endswith(".jinja"):
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise UnsafeInputError(f"not UTF-8 at byte {exc.start}", file) from None


def _from_hf_dir(path: Path) -> TargetMeta:
    from ..config.target import read_target_config
    from ..io.paths import resolve_inside

    if not (path / "config.json").is_file():
        raise UsageError("--target directory has no config.json", path)
    config_path = resolve_inside(path, "config.json")  # the path policy, as for the side files
    check_side_files(path)
    # The one reader (strict JSON, bounds, typed fields: no layer count 0, -5, true or 1e9), read once; then the
    # converter's own rule: text_config's fields over the top level's.
    _, config = read_target_config(config_path)
    if isinstance(config.get("text_config"), dict):
        config = {**config, **config["text_config"]}
    missing = next((k for k in ("num_hidden_layers", "vocab_size", "hidden_size") if k not in config), None)
    if missing is not None:
        raise FormatError(f"config.json has no {missing}", config_path)
    layers, vocab, hidden = config["num_hidden_layers"], config["vocab_size"], config["hidden_size"]
    kind, what = _vocab_kind(path)
    return TargetMeta(str(path), layers, vocab, hidden, sentencepiece_dir=path, vocab_kind=kind, notes=[
        f"target metadata from {path}: {layers} layers, vocab {vocab}; {what}"])


def _vocab_kind(path: Path) -> tuple[str, str]:
    """Which of llama.cpp's converter's readers takes this directory's tokenizer (its order), and a note."""
    if (path / "tokenizer.model").is_file():
        return "sentencepiece", "SentencePiece vocab from tokenizer.model"
    file = path / "tokenizer.json"
    if not file.is_file():
        raise UsageError("--target directory has neither tokenizer.model nor tokenizer.json: pass the target's "
                         "tokenizer, or --target TARGET.gguf", path)
    from ..support.jsonio import load_json

    tokenizer = load_json(file, max_bytes=MAX_SIDE_BYTES)
    model = tokenizer.get("model") if isinstance(tokenizer, dict) else None
    decoder = tokenizer.get("decoder") if isinstance(tokenizer, dict) else None
    if not isinstance(model, dict):
        raise FormatError("tokenizer.json has no model object", file)
    # gguf.LlamaHfVocab's own test: a byte-fallback BPE with a Sequence decoder (llama 3's is refused: GPT-2 path)
    if model.get("type") == "BPE" and model.get("byte_fallback", False) and not model.get("ignore_merges", False) \
            and isinstance(decoder, dict) and decoder.get("type") == "Sequence":
        return "llama_hf", "llama BPE vocab from tokenizer.json (gguf's LlamaHfVocab)"
    if model.get("type") != "BPE":
        raise UsageError(f"--target's tokenizer.json is a {model.get('type')} model, which llama.cpp's llama "
                         "converter does not read: pass --target TARGET.gguf", path)
    return "gpt2", "GPT-2 BPE vocab from tokenizer.json (pre-tokenizer from llama.cpp b11434's hash table)"


def _auto_tokenizer(path: Path) -> Any:
    from ..support._extras import need

    need("transformers", "reading a tokenizer.json target as llama.cpp's converter does", path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def gpt2_keys(path: Path, vocab_size: int) -> list[KeyValue]:
    """tokenizer.* as llama.cpp's ``_set_vocab_gpt2`` writes them (``get_vocab_base`` + ``SpecialVocab``)."""
    import gguf

    from .gguf_bpe_pre import BPE_PRE, CHKTXT

    T = gguf.TokenType
    tokenizer = _auto_tokenizer(path)
    vocab: dict[str, int] = tokenizer.vocab
    if max(vocab.values()) >= vocab_size:
        raise FormatError(f"tokenizer.json has token id {max(vocab.values())}, past the drafter's vocab_size "
                          f"{vocab_size}", path / "tokenizer.json")
    digest = hashlib.sha256(str(tokenizer.encode(CHKTXT)).encode()).hexdigest()
    pre = BPE_PRE.get(digest)
    if pre is None:
        raise UsageError(f"tokenizer.json's BPE pre-tokenizer (hash {digest[:12]}...) is not one llama.cpp b11434's "
                         "converter knows, and it refuses such a target too: pass --target TARGET.gguf", path)
    reverse = {i: text for text, i in vocab.items()}
    added, decoder = tokenizer.get_added_vocab(), tokenizer.added_tokens_decoder
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(int(T.UNUSED))
            continue
        text = reverse[i]
        if text in added:
            if not decoder[i].normalized:  # llama.cpp assumes CONTROL/USER_DEFINED tokens are pre-normalised
                text = tokenizer.decode(tokenizer.encode(text, add_special_tokens=False))
            if decoder[i].special or _looks_special(text):
                types.append(int(T.CONTROL))
            else:
                text = text.replace("\u2581", " ")
                types.append(int(T.USER_DEFINED))
        else:
            types.append(int(T.NORMAL))
        tokens.append(text)
    V = gguf.GGUFValueType
    return [*_prefix_space(path), KeyValue("tokenizer.ggml.model", "gpt2", V.STRING),
            KeyValue("tokenizer.ggml.pre", pre, V.STRING),
            KeyValue("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING),
            KeyValue("tokenizer.ggml.token_type", types, V.ARRAY, V.INT32),
            *special_keys(path, None, load_merges=True)]


def _looks_special(text: str) -> bool:
    """The converter's ``does_token_look_special``: added tokens it marks CONTROL though not flagged special."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
            or (text.startswith("<unused") and text.endswith(">")))


def llama_hf_keys(path: Path, vocab_size: int) -> list[KeyValue]:
    """tokenizer.* as llama.cpp's ``_set_vocab_llama_hf`` writes them (gguf's own ``LlamaHfVocab``)."""
    import gguf

    _auto_tokenizer(path)  # the extra check, with its message; LlamaHfVocab imports transformers itself
    vocab = gguf.LlamaHfVocab(path)
    tokens, scores, types = [], [], []
    for text, score, kind in vocab.all_tokens():
        tokens.append(text)
        scores.append(score)
        types.append(int(kind))
    V = gguf.GGUFValueType
    return [*_prefix_space(path), KeyValue("tokenizer.ggml.model", "llama", V.STRING),
            KeyValue("tokenizer.ggml.pre", "default", V.STRING),
            KeyValue("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING),
            KeyValue("tokenizer.ggml.scores", scores, V.ARRAY, V.FLOAT32),
            KeyValue("tokenizer.ggml.token_type", types, V.ARRAY, V.INT32), *special_keys(path, len(tokens))]


def _prefix_space(path: Path) -> list[KeyValue]:
    """conversion/llama.py set_vocab: tokenizer_config.json's add_prefix_space, written first whatever the vocab."""
    import gguf

    config_file = path / "tokenizer_config.json"
    if config_file.is_file():
        from ..support.jsonio import load_json

        prefix = load_json(config_file).get("add_prefix_space")  # an object: check_side_files
        if prefix is not None:
            return [KeyValue("tokenizer.ggml.add_space_prefix", bool(prefix), gguf.GGUFValueType.BOOL)]
    return []


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
    try:
        sp.LoadFromFile(str(path / "tokenizer.model"))
    except (RuntimeError, OSError) as exc:  # sentencepiece's "Internal: ... ModelProto" on any other bytes
        raise FormatError(f"not a SentencePiece model ({str(exc).strip().splitlines()[-1][:120]})",
                          path / "tokenizer.model") from None
    tokens = [f"[PAD{i}]".encode() for i in range(vocab_size)]
    scores = [-10000.0] * vocab_size
    types = [int(T.UNUSED)] * vocab_size
    for i in range(min(sp.vocab_size(), vocab_size)):
        kind = (T.UNKNOWN if sp.IsUnknown(i) else T.CONTROL if sp.IsControl(i) else T.UNUSED if sp.IsUnused(i)
                else T.BYTE if sp.IsByte(i) else T.NORMAL)
        tokens[i], scores[i], types[i] = sp.IdToPiece(i).encode(), sp.GetScore(i), int(kind)
    added = path / "added_tokens.json"
    if added.is_file():
        from ..support.jsonio import load_json

        for text, i in load_json(added).items():  # an object: check_side_files
            if not isinstance(i, int) or isinstance(i, bool) or i < 0:
                raise FormatError(f"{text!r} has id {i!r}, not a token id (an integer from 0)", added)
            if i < vocab_size:  # the converter's rule: a larger id is ignored ("id is out of range")
                tokens[i], scores[i], types[i] = text.encode(), -1000.0, int(T.USER_DEFINED)
    V = gguf.GGUFValueType
    keys = _prefix_space(path)
    keys += [KeyValue("tokenizer.ggml.model", "llama", V.STRING), KeyValue("tokenizer.ggml.pre", "default", V.STRING),
            KeyValue("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING),
            KeyValue("tokenizer.ggml.scores", scores, V.ARRAY, V.FLOAT32),
            KeyValue("tokenizer.ggml.token_type", types, V.ARRAY, V.INT32)]
    return keys + special_keys(path, len(tokens))


def special_keys(path: Path, n_vocab: int | None, *, load_merges: bool = False) -> list[KeyValue]:
    """gguf.SpecialVocab's keys (bos/eos ids, add_bos, chat template, merges...), captured in its order."""
    import gguf

    capture = _Capture()
    gguf.SpecialVocab(path, load_merges=load_merges, n_vocab=n_vocab).add_to_gguf(capture)  # type: ignore[arg-type]
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
