"""``convert --to gguf`` writes, byte for byte, what gguf-py's own writer writes for llama.cpp's rules (issue 34).

For every fixture that converts to GGUF (and the SmolLM2 pair, where it is built), at each ``--outtype``, the file
is rebuilt here from the *source* checkpoint, independently of eagleconv's plan and writer: each tensor's values
computed by llama.cpp's converter's rules as ``convert_hf_to_gguf.py`` states them (``LlamaModel.permute`` on
attn_q / attn_k, ``d2t + arange`` as I64, 1-D tensors F32, the other floats at the outtype with gguf.quants'
rounding), the metadata copied key by key in the file's order, and everything written by ``gguf.GGUFWriter``
(header, alignment, padding).  Any change to a stored byte, a tensor's place or the framing fails here; that the
metadata's values are llama.cpp's is tests/formats/test_gguf_llamacpp_converter.py's check.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("sentencepiece")

from eagleconv.conversion import convert  # noqa: E402
from eagleconv.formats.gguf import GgufLayout  # noqa: E402
from eagleconv.formats.base.renames import rename  # noqa: E402
from eagleconv.readers.loading import load_drafter  # noqa: E402
from tests.formats.test_gguf_llamacpp_converter import hf_target  # noqa: E402
from tests.support.ci_cache import smollm2_pair  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
# Every committed drafter a plain convert takes to GGUF (the others are refused: EAGLE-3.1 flags, MLA, Qwen3, Phi-3).
CONVERTIBLE = ["tiny-pair/eagle3", "specforge-llama-eagle3", "modelopt-llama-eagle3", "eagle-llama-eagle3"]
NUMPY = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4"}


def as_f32(raw: bytes, dtype: str) -> np.ndarray:
    if dtype == "BF16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, NUMPY[dtype]).astype(np.float32)


def permute(rows: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's ``LlamaModel.permute`` (convert_hf_to_gguf.py), on a [rows, cols] array."""
    return rows.reshape(heads, 2, rows.shape[0] // heads // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def stored(name: str, raw: bytes, dtype: str, shape: tuple[int, ...], heads: dict[str, int],
           outtype: str | None) -> np.ndarray:
    """The tensor as llama.cpp's converter stores it: (array, with BF16 as its uint16 bits)."""
    if name == "d2t":
        ids = np.frombuffer(raw, NUMPY[dtype]).astype(np.int64)
        return ids + np.arange(ids.size, dtype=np.int64)
    want = "F32" if len(shape) <= 1 or name.endswith("_norm.weight") else (outtype or dtype).upper()
    if want == dtype:  # kept: the stored bits themselves
        values = np.frombuffer(raw, NUMPY[dtype]).reshape(shape)
    else:
        f32 = as_f32(raw, dtype).reshape(shape)
        values = (f32 if want == "F32" else f32.astype(np.float16) if want == "F16"
                  else np.asarray(gguf.quants.quantize(f32, gguf.GGMLQuantizationType.BF16)).view("<u2").reshape(shape))
    if name in heads:
        values = permute(values, heads[name])
    return np.ascontiguousarray(values)


def reference(ours: Path, source: Path, outtype: str | None, out: Path) -> bytes:
    """The file gguf-py's writer makes of ``source`` by llama.cpp's rules, in ``ours``'s key and tensor order."""
    loaded = load_drafter(source, allow_pickle=True)
    try:
        spec = loaded.spec
        assert spec is not None
        heads = {"blk.0.attn_q.weight": spec.num_attention_heads,
                 "blk.0.attn_k.weight": spec.num_key_value_heads or spec.num_attention_heads}
        reader = gguf.GGUFReader(ours)
        writer = gguf.GGUFWriter(out, "eagle3")
        for key, field in reader.fields.items():
            if key.startswith("GGUF.") or key == "general.architecture":
                continue
            types = [gguf.GGUFValueType(t) for t in field.types]
            writer.add_key_value(key, field.contents(), types[0], types[1] if len(types) > 1 else None)
        for tensor in reader.tensors:
            canonical = rename(GgufLayout.renames, tensor.name, to_canonical=True)
            name_in_source = loaded.read.canonical[canonical]
            info = loaded.store.tensors[name_in_source]
            values = stored(tensor.name, loaded.store.read_bytes(name_in_source), info.dtype, tuple(info.shape),
                            heads, outtype)
            if values.dtype == np.uint16:  # BF16 bits: gguf takes them as bytes with the raw type
                writer.add_tensor(tensor.name, values.view(np.uint8), raw_dtype=gguf.GGMLQuantizationType.BF16)
            else:
                writer.add_tensor(tensor.name, values)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    finally:
        loaded.close()
    return out.read_bytes()


def check(source: Path, target: Path, outtype: str | None, tmp_path: Path) -> None:
    ours = tmp_path / f"ours-{outtype}.gguf"
    convert(source, ours, "gguf", target=target, outtype=outtype, allow_pickle=True)
    assert ours.read_bytes() == reference(ours, source, outtype, tmp_path / f"reference-{outtype}.gguf")


@pytest.mark.parametrize("name", CONVERTIBLE)
def test_each_fixture_is_written_as_gguf_py_writes_llamacpp_rules(name: str, tmp_path: Path) -> None:
    source = FIXTURES / name
    spec = load_drafter(source, allow_pickle=True).spec
    assert spec is not None
    target = hf_target(tmp_path / "target", hidden=spec.target_hidden_size, vocab=spec.vocab_size)
    for outtype in (None, "f32", "f16", "bf16"):
        check(source, target, outtype, tmp_path)


def test_the_reference_sees_a_changed_byte(tmp_path: Path) -> None:
    """The comparison is not vacuous: one stored value changed (a rule dropped: Q's rows left in HF order) differs."""
    source = FIXTURES / "tiny-pair/eagle3"
    spec = load_drafter(source).spec
    assert spec is not None
    target = hf_target(tmp_path / "target", hidden=spec.target_hidden_size, vocab=spec.vocab_size)
    ours = tmp_path / "ours.gguf"
    convert(source, ours, "gguf", target=target)
    good = reference(ours, source, None, tmp_path / "reference.gguf")
    assert ours.read_bytes() == good
    unpermuted = globals()["permute"]
    try:
        globals()["permute"] = lambda rows, heads: rows
        assert reference(ours, source, None, tmp_path / "unpermuted.gguf") != good
    finally:
        globals()["permute"] = unpermuted


@pytest.mark.slow
@pytest.mark.skipif(smollm2_pair() is None, reason="no built SmolLM2 pair (.ci/smollm2)")
def test_smollm2_is_written_as_gguf_py_writes_llamacpp_rules(tmp_path: Path) -> None:
    """The real pair (~40 s: two 0.1 GB files rebuilt in numpy): its dtype kept (kernel copies) and --outtype bf16.
    The target is the GGUF llama.cpp serves; the tokenizer keys from its HF directory are the converter test's."""
    pair = smollm2_pair()
    assert pair is not None
    target = pair / "llamacpp-target-f32.gguf"
    if not target.exists():
        pytest.skip(f"the SmolLM2 pair has no {target.name}")
    for outtype in (None, "bf16"):
        check(pair / "eagle3", target, outtype, tmp_path)
