"""llama.cpp's own converter as a second opinion on ``convert --to gguf`` (issue 24, deliverable 5).

For every producer fixture llama.cpp b11434's ``convert_hf_to_gguf.py`` accepts, eagleconv's GGUF must hold
the same tensors (names, shapes, dtypes, bytes) and the same metadata, both at ``--outtype f32``.  The one
intended difference: ``eagle3.target_layers``.  Their converter copies the top-level
``eagle_aux_hidden_state_layer_ids`` verbatim whatever the producer's numbering, and reads nothing nested
(SpecForge and ModelOpt keep theirs in ``eagle_config``), falling back to ``[2, N//2, N-3]``; eagleconv writes
the ids the checkpoint records, translated into llama.cpp's numbering (the input of layer id).
Runs where llama.cpp's source is here (``EAGLECONV_LLAMACPP_SRC``, or the llama.cpp cache's ``src/``) with torch, transformers and sentencepiece; skips saying which is missing otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from eagleconv.conversion import convert  # noqa: E402
from eagleconv.readers.loading import load_drafter  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
ACCEPTED = ["specforge-llama-eagle3", "modelopt-llama-eagle3", "eagle-llama-eagle3", "tiny-pair/eagle3"]


def _cached_build_src() -> str | None:
    """The cached llama.cpp build's src/ (.ci/llamacpp-env --cached names the build's directory)."""
    env = Path(__file__).resolve().parents[2] / ".ci" / "llamacpp-env"
    proc = subprocess.run(["bash", str(env), "--cached"], capture_output=True, text=True)
    return str(Path(proc.stdout.strip()) / "src") if proc.returncode == 0 else None


def _llamacpp_src() -> Path | None:
    candidates = [os.environ.get("EAGLECONV_LLAMACPP_SRC"), _cached_build_src()]
    for c in candidates:
        if c and (Path(c) / "convert_hf_to_gguf.py").is_file():
            return Path(c)
    return None


def _skip_reason() -> str | None:
    if _llamacpp_src() is None:
        return "llama.cpp's source (convert_hf_to_gguf.py) is not here: set EAGLECONV_LLAMACPP_SRC or run .ci/llamacpp-env"
    for module in ("torch", "transformers", "sentencepiece"):
        try:
            __import__(module)
        except ImportError:
            return f"llama.cpp's converter needs {module}, which is not installed"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


LAYERS = 20  # the fixtures' ids are stated for a 16-layer target; 20 keeps them apart from llama.cpp's default


def hf_target(directory: Path, *, hidden: int, vocab: int, layers: int = LAYERS) -> Path:
    """An HF target directory as their converter reads it: config.json and a SentencePiece tokenizer.model."""
    import random

    import sentencepiece as spm

    directory.mkdir(parents=True)
    rng = random.Random(0)
    syllables = ["ka", "to", "ri", "me", "su", "no", "la", "pi", "do", "ve", "zo", "xa", "be", "fi", "gu", "qu"]
    text = "\n".join(" ".join("".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(12))
                     for _ in range(2000))
    (directory / "corpus.txt").write_text(text)
    spm.SentencePieceTrainer.train(input=str(directory / "corpus.txt"), model_prefix=str(directory / "tokenizer"),
                                   vocab_size=min(vocab, 100), model_type="bpe", bos_id=1, eos_id=2, unk_id=0,
                                   pad_id=-1, minloglevel=2)
    (directory / "corpus.txt").unlink()
    (directory / "tokenizer.vocab").unlink()
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab, "hidden_size": hidden,
        "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": hidden,
        "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2}))
    return directory


def theirs(src: Path, target: Path, out: Path, outtype: str = "f32") -> subprocess.CompletedProcess:
    root = _llamacpp_src()
    assert root is not None
    env = {**os.environ, "PYTHONPATH": str(root / "gguf-py"), "NO_LOCAL_GGUF": ""}
    return subprocess.run([sys.executable, str(root / "convert_hf_to_gguf.py"), str(src), "--target-model-dir",
                           str(target), "--outfile", str(out), "--outtype", outtype],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def contents(path: Path) -> tuple[dict, dict]:
    r = gguf.GGUFReader(path)
    kv = {k: (tuple(f.types), f.contents()) for k, f in r.fields.items() if not k.startswith("GGUF.")}
    tensors = {t.name: (t.tensor_type.name, tuple(int(d) for d in t.shape), np.asarray(t.data).tobytes())
               for t in r.tensors}
    return kv, tensors


@pytest.mark.parametrize("name", ACCEPTED)
def test_same_tensors_and_metadata_as_llamacpp_converter(name: str, tmp_path: Path) -> None:
    src = FIXTURES / name
    spec = load_drafter(src, allow_pickle=True).spec
    assert spec is not None
    target = hf_target(tmp_path / "target", hidden=spec.target_hidden_size, vocab=spec.vocab_size)
    done = theirs(src, target, tmp_path / "theirs.gguf")
    assert done.returncode == 0, done.stderr[-2000:]
    convert(src, tmp_path / "mine.gguf", "gguf", target=target, outtype="f32", allow_pickle=True)
    their_kv, their_tensors = contents(tmp_path / "theirs.gguf")
    my_kv, my_tensors = contents(tmp_path / "mine.gguf")
    assert my_tensors.keys() == their_tensors.keys()
    for tensor, value in my_tensors.items():
        assert value == their_tensors[tensor], tensor
    layers = "eagle3.target_layers"
    assert list(my_kv) == list(their_kv)  # the same keys in the same order (issue 34: the header's bytes)
    assert {k: v for k, v in my_kv.items() if k != layers} == {k: v for k, v in their_kv.items() if k != layers}
    default = [2, LAYERS // 2, LAYERS - 3]
    recorded = spec.aux.ids_as("hidden_state_index")
    assert my_kv[layers][1] == (list(recorded) if recorded is not None else default)
    top_level = json.loads((src / "config.json").read_text()).get("eagle_aux_hidden_state_layer_ids")
    assert their_kv[layers][1] == (top_level or default)


@pytest.mark.parametrize("outtype", ["bf16", "f16"])
def test_outtype_rounds_as_llamacpp_converter_does(outtype: str, tmp_path: Path) -> None:
    """--outtype bf16/f16 from an F32 drafter: the same bytes as their converter's (gguf.quants rounding; norms F32)."""
    src = FIXTURES / "tiny-pair/eagle3"
    spec = load_drafter(src).spec
    assert spec is not None
    target = hf_target(tmp_path / "target", hidden=spec.target_hidden_size, vocab=spec.vocab_size)
    done = theirs(src, target, tmp_path / "theirs.gguf", outtype)
    assert done.returncode == 0, done.stderr[-2000:]
    convert(src, tmp_path / "mine.gguf", "gguf", target=target, outtype=outtype)
    assert contents(tmp_path / "mine.gguf") == contents(tmp_path / "theirs.gguf")
    assert list(contents(tmp_path / "mine.gguf")[0]) == list(contents(tmp_path / "theirs.gguf")[0])  # key order


from tests.support.ci_cache import smollm2_pair as _smollm2_pair  # noqa: E402


@pytest.mark.slow
@pytest.mark.skipif(_smollm2_pair() is None, reason="no built SmolLM2 pair (fixtures/smollm2/build.py)")
def test_smollm2_eagle3_with_the_target_gguf_equals_theirs_with_the_hf_target(tmp_path: Path) -> None:
    """The user's path: `--target target.gguf` (the GGUF llama.cpp serves) gives the file llama.cpp's converter
    writes from the target's HF directory (a BPE tokenizer.json: GPT-2 vocab, merges, the smollm pre-tokenizer)."""
    pair = _smollm2_pair()
    assert pair is not None
    root = _llamacpp_src()
    assert root is not None
    env = {**os.environ, "PYTHONPATH": str(root / "gguf-py")}
    subprocess.run([sys.executable, str(root / "convert_hf_to_gguf.py"), str(pair / "target"), "--outfile",
                    str(tmp_path / "target.gguf"), "--outtype", "f32"], cwd=root, env=env, check=True,
                   capture_output=True, timeout=600)
    done = theirs(pair / "eagle3", pair / "target", tmp_path / "theirs.gguf")
    assert done.returncode == 0, done.stderr[-2000:]
    convert(pair / "eagle3", tmp_path / "mine.gguf", "gguf", target=tmp_path / "target.gguf", outtype="f32")
    assert contents(tmp_path / "mine.gguf") == contents(tmp_path / "theirs.gguf")
