"""Conversions between every pair of layouts preserve tensor bytes exactly."""

from __future__ import annotations

import hashlib
import itertools
import json

import pytest

from eagleconv import convert, inspect
from eagleconv.formats import LAYOUTS
from eagleconv.io.reader import open_checkpoint
from eagleconv.synthetic import DrafterRecipe, canonical_tensors


def tensor_digests(path) -> dict[str, str]:
    """sha256 of every tensor's raw bytes, by name, read through eagleconv's own reader."""
    with open_checkpoint(path, allow_pickle=True) as store:
        return {name: hashlib.sha256(store.read_raw(name).tobytes()).hexdigest() for name in store.tensors}


def canonical_digests(recipe: DrafterRecipe) -> dict[str, str]:
    import torch

    out = {}
    for name, t in canonical_tensors(recipe).items():
        out[name] = hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
    return out


def as_canonical(path) -> dict[str, str]:
    """Digests keyed by canonical name (via the checkpoint's detected layout)."""
    from eagleconv.readers.loading import load_drafter

    loaded = load_drafter(path, allow_pickle=True)
    try:
        digests = tensor_digests(path)
        return {c: digests[n] for c, n in loaded.read.canonical.items()}
    finally:
        loaded.close()


# Layouts a plain 3-aux Llama EAGLE-3.1 drafter with d2t/t2d and no embeddings can live in.
EAGLE31_LAYOUTS = ["specforge", "torchspec", "vllm", "speculators", "automodel"]


def test_issue_chain_specforge_vllm_speculators_specforge(drafter, tmp_path):
    src = drafter(producer="specforge", eagle31=True)
    v = tmp_path / "v"
    s = tmp_path / "s"
    back = tmp_path / "back"
    convert(src, v, "vllm")
    convert(v, s, "speculators")
    convert(s, back, "specforge")

    assert tensor_digests(back) == tensor_digests(src)
    v_names = set(tensor_digests(v))
    assert any(n.startswith("layers.0.") for n in v_names)
    assert not any(n.startswith(("model.", "midlayer.")) for n in v_names)
    v_cfg = json.loads((v / "config.json").read_text())
    assert v_cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    s_cfg = json.loads((s / "config.json").read_text())
    assert s_cfg["speculators_model_type"] == "eagle3"
    assert s_cfg["transformer_layer_config"]["hidden_size"] == 32
    # The drafter's meaning survives the trip: same spec (ids renumbered back), same flags.
    assert inspect(back).spec.model_dump(exclude={"extra"}) == inspect(src).spec.model_dump(exclude={"extra"})
    assert json.loads((back / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 7, 12]


@pytest.mark.parametrize("first,second", list(itertools.permutations(EAGLE31_LAYOUTS, 2)))
def test_every_pair_round_trips_bytes(drafter, tmp_path, first, second):
    src = drafter(producer="specforge", eagle31=True, seed=3)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    convert(src, a, first)
    convert(a, b, second)
    convert(b, c, first)
    assert tensor_digests(c) == tensor_digests(a)
    assert as_canonical(b) == as_canonical(src)
    assert inspect(c).spec.model_dump(exclude={"extra"}) == inspect(a).spec.model_dump(exclude={"extra"})


@pytest.mark.parametrize("producer", sorted(n for n, layout in LAYOUTS.items() if not layout.needs_target))
def test_every_producer_fixture_reaches_vllm_with_identical_bytes(drafter, tmp_path, producer):
    recipe = DrafterRecipe(producer=producer, eagle31=producer not in ("eagle", "modelopt"), seed=5)
    src = drafter(**{k: getattr(recipe, k) for k in ("producer", "eagle31", "seed")})
    out = tmp_path / "out"
    convert(src, out, "vllm", allow_pickle=True)
    expected = canonical_digests(recipe)
    got = as_canonical(out)
    for name, digest in got.items():
        assert digest == expected[name], name
    assert set(got) <= set(expected)
    cfg = json.loads((out / "config.json").read_text())
    if producer in ("eagle", "automodel"):  # these producers record no aux ids: none may be invented
        assert "eagle_aux_hidden_state_layer_ids" not in cfg and "eagle_aux_hidden_state_layer_ids" not in cfg.get(
            "eagle_config", {})
    else:
        assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 8, 13]


def test_modelopt_to_specforge_derives_t2d_exactly(drafter, tmp_path):
    src = drafter(producer="modelopt", seed=7)
    out = tmp_path / "sf"
    report = convert(src, out, "specforge")
    derived = [r for r in report.plan if r.action == "derive"]
    assert [r.destination for r in derived] == ["t2d"]
    # The derived t2d equals the one the producer originally computed.
    assert as_canonical(out)["t2d"] == canonical_digests(DrafterRecipe(producer="modelopt", seed=7))["t2d"]


def test_to_modelopt_drops_t2d_as_derivable_and_round_trips(drafter, tmp_path):
    src = drafter(producer="specforge", seed=2)
    mo, back = tmp_path / "mo", tmp_path / "back"
    report = convert(src, mo, "modelopt")
    assert [(r.source, r.action) for r in report.dropped] == [("t2d", "drop")]
    assert "t2d" not in tensor_digests(mo)
    convert(mo, back, "specforge")
    assert tensor_digests(back) == tensor_digests(src)


@pytest.mark.parametrize("layout", ["torchspec", "vllm", "modelopt"])
def test_mla_drafter_round_trips(drafter, tmp_path, layout):
    src = drafter(producer="torchspec", architecture="deepseek_mla", eagle31=layout != "modelopt",
                  embed_tokens=layout != "modelopt")
    a, b = tmp_path / "a", tmp_path / "b"
    convert(src, a, layout)
    convert(a, b, "torchspec")
    expected = tensor_digests(src)
    if layout == "modelopt":  # t2d is dropped (derivable) and torchspec does not require it back
        expected.pop("t2d")
    assert tensor_digests(b) == expected
    spec = inspect(b).spec
    assert spec.architecture == "deepseek_mla" and spec.mla is not None
    assert spec.rope == inspect(src).spec.rope


def test_mla_vllm_output_uses_a_model_type_vllm_detects_as_mla(drafter, tmp_path):
    src = drafter(producer="torchspec", architecture="deepseek_mla", eagle31=True)
    out = tmp_path / "v"
    report = convert(src, out, "vllm")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Eagle3DeepseekV2ForCausalLM"]
    assert cfg["model_type"] == "deepseek_v2"  # deepseek_v3 is rewritten into DeepSeek MTP by vLLM 0.32 and refused
    assert any("kimi_k2 -> deepseek_v2" in c for c in report.config_changes)
    # TorchSpec numbers kimi_k2 ids as layer outputs; vLLM as hidden-state indices (+1).
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 8, 13]


@pytest.mark.parametrize("layout", ["vllm", "speculators"])
def test_qwen3_drafter_round_trips(drafter, tmp_path, layout):
    src = drafter(producer="vllm", architecture="qwen3", eagle31=True)
    a, b = tmp_path / "a", tmp_path / "b"
    convert(src, a, layout)
    convert(a, b, "vllm")
    assert tensor_digests(b) == tensor_digests(src)
    assert inspect(b).architecture == "qwen3"
    if layout == "speculators":
        assert json.loads((a / "config.json").read_text())["transformer_layer_config"]["model_type"] == "qwen3"


def test_sharded_output_reads_back_identically(drafter, tmp_path):
    src = drafter(producer="specforge", eagle31=True, layers=1, embed_tokens=False)
    out, back = tmp_path / "sharded", tmp_path / "back"
    report = convert(src, out, "vllm", max_shard_size=8 * 1024)
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    assert len(shards) > 1 and "model.safetensors.index.json" in report.files_written
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == shards
    convert(out, back, "specforge")
    assert tensor_digests(back) == tensor_digests(src)


def test_eagle_pickle_source_converts_with_allow_pickle(drafter, tmp_path):
    src = drafter(producer="eagle", seed=11)
    out = tmp_path / "v"
    report = convert(src, out, "vllm", allow_pickle=True)
    assert report.source_format == "eagle"
    assert as_canonical(out) == {k: v for k, v in canonical_digests(DrafterRecipe(producer="eagle", seed=11)).items()
                                 if k != "embed_tokens.weight"}


def test_embeddings_need_explicit_drop_for_specforge(drafter, tmp_path):
    from eagleconv.errors import ConversionError

    src = drafter(producer="torchspec", eagle31=True)  # TorchSpec ships embed_tokens
    with pytest.raises(ConversionError, match="--drop embed_tokens"):
        convert(src, tmp_path / "x", "specforge")
    assert not (tmp_path / "x").exists()
    report = convert(src, tmp_path / "y", "specforge", drop=["embed_tokens"])
    assert [r.source for r in report.dropped] == ["embed_tokens.weight"]
    assert "embed_tokens.weight" not in tensor_digests(tmp_path / "y")


@pytest.mark.parametrize("layouts", [("vllm", "speculators"), ("torchspec", "automodel")])
def test_drafter_narrower_than_its_target_round_trips(drafter, tmp_path, layouts):
    """Llama-3.3-70B style: target_hidden_size != hidden_size, own embedding."""
    from eagleconv.synthetic import WIDE_TARGET

    src = drafter(producer="speculators", eagle31=True, dims=WIDE_TARGET, embed_tokens=True)
    spec = inspect(src).spec
    assert (spec.hidden_size, spec.target_hidden_size, spec.embed_tokens) == (32, 48, "drafter")
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    convert(src, a, layouts[0])
    convert(a, b, layouts[1])
    convert(b, c, "speculators")
    assert tensor_digests(c) == tensor_digests(src)
    # Everything but the verifier name survives (only speculators records it; the report says so).
    assert inspect(c).spec.model_dump(exclude={"extra", "verifier"}) == spec.model_dump(exclude={"extra", "verifier"})
    assert inspect(b).spec.target_hidden_size == 48
