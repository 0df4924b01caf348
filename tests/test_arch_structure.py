"""Architectures as modules, typed RoPE / rms_norm_eps, the torch tensor reader, and computed tensors in conversion."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from eagleconv import architectures
from eagleconv.canonical import CANONICAL_NAME, expected_tensors
from eagleconv.conversion import Computed, Transform, convert
from eagleconv.drafter import Rope
from eagleconv.io.torch_tensors import tensor_bytes
from eagleconv.loading import open_tensors
from eagleconv.loading import load_drafter
from eagleconv.report import StepDivergence
from eagleconv.schemas import config_model_for
from eagleconv.synthetic import DrafterRecipe, canonical_tensors

ARCHS = architectures.names()  # the registry, never a hand list


def spec_of(path: Path):
    loaded = load_drafter(path)
    try:
        return loaded.require_spec(), loaded.read.notes
    finally:
        loaded.close()


# -- the registry -------------------------------------------------------------------

def test_every_module_in_the_package_is_a_registered_architecture():
    package = Path(architectures.__file__).parent
    modules = {p.stem for p in package.glob("*.py")} - {"__init__", "base"}
    assert set(architectures.names()) == modules
    for name in ARCHS:
        assert architectures.get(name).name == name
    with pytest.raises(KeyError, match="known: " + ", ".join(sorted(modules))):
        architectures.get("gpt_oss")


@pytest.mark.parametrize("arch", ARCHS)
def test_expected_tensors_are_exactly_the_synthetic_drafter(arch, drafter):
    """The architecture's shapes and its synthetic tensors are two statements of one fact; they must agree."""
    recipe = DrafterRecipe(producer="vllm", architecture=arch, layers=2, embed_tokens=True)
    spec, _ = spec_of(drafter(producer="vllm", architecture=arch, layers=2, embed_tokens=True))
    assert spec.architecture == arch
    present = {n: tuple(t.shape) for n, t in canonical_tensors(recipe).items()}
    expected = expected_tensors(spec)
    assert {n: e.shape for n, e in expected.items() if n in present} == present
    assert {n for n, e in expected.items() if e.required} <= set(present)
    assert all(CANONICAL_NAME.match(n) for n in present)


def test_detection_uses_tensors_when_the_config_has_no_model_type(drafter, tmp_path):
    for arch in ("qwen3", "deepseek_mla"):
        path = drafter(producer="vllm", architecture=arch)
        config = json.loads((path / "config.json").read_text())
        del config["model_type"]
        if arch == "deepseek_mla":
            del config["kv_lora_rank"]
        (path / "config.json").write_text(json.dumps(config))
        loaded = load_drafter(path)
        assert loaded.read.spec is None or loaded.read.spec.architecture == arch
        if arch == "qwen3":
            assert loaded.read.spec.architecture == "qwen3"
            assert "model_type = qwen3 (absent from config; inferred from the tensors)" in loaded.read.notes
        else:  # an MLA drafter without kv_lora_rank is recognised, and the missing rank is reported, not guessed
            assert "kv_lora_rank" in loaded.read.missing
        loaded.close()
    # config-only detection does not fall back for a model_type nobody claims
    assert architectures.detect("mistral", {}, fallback=False) is None
    assert architectures.detect("mistral", {}).name == "llama"
    assert architectures.detect("kimi_k2", {}).name == "deepseek_mla"
    assert config_model_for({"model_type": "kimi_k2"}).__name__ == "DeepseekMlaEagle3Config"
    assert config_model_for({"model_type": "qwen3"}).__name__ == "LlamaEagle3Config"


# -- typed RoPE and rms_norm_eps ------------------------------------------------------

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}


def test_rope_reads_both_spellings_into_the_same_typed_fields():
    legacy = Rope.from_config({"rope_theta": 500000.0, "rope_scaling": LLAMA3})
    modern = Rope.from_config({"rope_parameters": {"rope_theta": 500000.0, **LLAMA3}})
    typed = lambda r: r.model_dump(exclude={"stated"})  # noqa: E731
    assert typed(legacy) == typed(modern)
    assert legacy.scaling == "llama3" and legacy.theta == 500000.0 and legacy.low_freq_factor == 1.0
    assert legacy.original_max_position_embeddings == 8192
    # the old "type" key, and yarn on an MLA drafter runs as deepseek_yarn
    mla = Rope.from_config({"rope_theta": 1e4, "rope_scaling": {"type": "yarn", "factor": 40, "mscale_all_dim": 1.0}},
                           interleaved=True)
    assert (mla.scaling, mla.factor, mla.mscale_all_dim, mla.interleaved) == ("deepseek_yarn", 40.0, 1.0, True)
    assert Rope.from_config({}).scaling == "none" and Rope.from_config({}).theta is None


@pytest.mark.parametrize("stated,problem", [
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "needs low_freq_factor"),
    ({"rope_scaling": {"rope_type": "su"}}, "not one eagleconv models"),
    ({"rope_theta": 1e4, "rope_parameters": {"rope_theta": 5e5}}, "disagree"),
    ({"rope_theta": "big"}, "must be a number"),
])
def test_rope_never_guesses(stated, problem):
    with pytest.raises(ValueError, match=problem):
        Rope.from_config(stated)


def test_unknown_rope_type_is_a_read_error_not_a_default(drafter):
    path = drafter(producer="vllm")
    config = json.loads((path / "config.json").read_text())
    config["rope_scaling"] = {"rope_type": "longrope2", "factor": 2.0}
    (path / "config.json").write_text(json.dumps(config))
    loaded = load_drafter(path)
    assert loaded.read.spec is None and any("longrope2" in e for e in loaded.read.errors)
    loaded.close()


def test_rms_norm_eps_and_theta_config_else_layout_default_else_unknown(drafter, tmp_path):
    # stated: taken as is
    spec, _ = spec_of(drafter(producer="vllm"))
    assert spec.rms_norm_eps == 1e-5 and spec.rope.theta == 500000.0 and spec.defaulted == ()
    # absent from a vllm-layout config: vLLM's documented defaults, reported, and qwen3's theta differs
    for arch, theta in (("llama", 10000.0), ("qwen3", 1000000.0)):
        path = drafter(producer="vllm", architecture=arch)
        config = json.loads((path / "config.json").read_text())
        del config["rms_norm_eps"], config["rope_theta"]
        (path / "config.json").write_text(json.dumps(config))
        spec, notes = spec_of(path)
        assert (spec.rms_norm_eps, spec.rope.theta) == (1e-6, theta)
        assert set(spec.defaulted) == {"rms_norm_eps", "rope_theta"}
        assert any(n.startswith("rms_norm_eps = 1e-06 (absent from config; the vllm layout") for n in notes)
        # conversion writes what the source stated, not the assumed defaults
        out = tmp_path / f"out-{arch}"
        convert(path, out, "speculators")
        written = json.loads((out / "config.json").read_text())["transformer_layer_config"]
        assert "rms_norm_eps" not in written and "rope_theta" not in written
        convert(path, tmp_path / f"vllm-{arch}", "vllm")
        written = json.loads((tmp_path / f"vllm-{arch}" / "config.json").read_text())
        assert "rms_norm_eps" not in written and "rope_theta" not in written
    # absent from a layout that documents no default: unknown, and said so
    path = drafter(producer="specforge")
    config = json.loads((path / "config.json").read_text())
    del config["rms_norm_eps"]
    (path / "config.json").write_text(json.dumps(config))
    spec, notes = spec_of(path)
    assert spec.rms_norm_eps is None
    assert any(n.startswith("rms_norm_eps: absent from config and the specforge layout documents no default") for n in notes)


def test_transformers5_rope_parameters_roundtrip_unchanged(drafter, tmp_path):
    path = drafter(producer="vllm")
    config = json.loads((path / "config.json").read_text())
    del config["rope_theta"]
    config["rope_parameters"] = {"rope_theta": 500000.0, **LLAMA3}
    (path / "config.json").write_text(json.dumps(config))
    spec, _ = spec_of(path)
    assert spec.rope.scaling == "llama3" and spec.rope.theta == 500000.0
    convert(path, tmp_path / "out", "specforge")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["rope_parameters"] == config["rope_parameters"]
    again, _ = spec_of(tmp_path / "out")
    assert again.rope == spec.rope


# -- the torch tensor reader -------------------------------------------------------------

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
    code = ("import sys, eagleconv.io.torch_tensors, eagleconv.loading, eagleconv.conversion\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- computed tensors through the one writer ----------------------------------------------

def test_a_transform_writes_computed_tensors_beside_copied_bytes(drafter, tmp_path):
    src = drafter(producer="vllm")
    original = load_file(str(src / "model.safetensors"))
    doubled = original["norm.weight"].float() * 2

    def double_norm(loaded) -> Transform:
        dtype, shape, data = tensor_bytes(doubled.to(torch.bfloat16))
        return Transform("test", loaded.require_spec(), computed={"norm.weight": Computed("norm.weight", dtype, shape, data,
                                                                                          "doubled")},
                         removed={"t2d": "not needed"}, exact=False,
                         divergence=[StepDivergence(step=1, top1_agreement=0.5, max_abs_err=1.0, max_rel_err=0.1)])

    report = convert(src, tmp_path / "out", None, transform=double_norm)
    rows = {r.destination or r.source: r for r in report.plan}
    assert rows["norm.weight"].action == "computed" and rows["norm.weight"].reason == "doubled"
    assert rows["t2d"].action == "drop"
    assert rows["fc.weight"].action == "copy"
    assert report.exact is False and report.divergence[0].top1_agreement == 0.5
    written = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert torch.equal(written["norm.weight"], doubled.to(torch.bfloat16))
    assert "t2d" not in written
    for name, tensor in original.items():
        if name not in ("norm.weight", "t2d"):
            assert torch.equal(written[name], tensor), name
    # a plain convert is exact and reports no divergence
    plain = convert(src, tmp_path / "plain", "specforge")
    assert plain.exact is True and plain.divergence == [] and {r.action for r in plain.plan} <= {"copy", "drop", "derive"}


@pytest.mark.parametrize("producer", ["eagle", "specforge", "torchspec", "vllm", "speculators", "automodel", "modelopt"])
def test_every_layout_reads_transformers5_rope_parameters(drafter, producer):
    path = drafter(producer=producer)
    config = json.loads((path / "config.json").read_text())
    decoder = config["transformer_layer_config"] if producer == "speculators" else config
    decoder.pop("rope_theta", None)
    decoder["rope_parameters"] = {"rope_theta": 250000.0, **LLAMA3}
    (path / "config.json").write_text(json.dumps(config))
    loaded = load_drafter(path, allow_pickle=True)
    spec = loaded.require_spec()
    loaded.close()
    assert (spec.rope.theta, spec.rope.scaling, spec.rope.high_freq_factor) == (250000.0, "llama3", 4.0)
    assert "rope_theta" not in spec.defaulted
