"""Architectures as modules: every module is a registered architecture, its expected tensors are the synthetic
drafter's, and detection uses tensors when the config names no model_type."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagleconv import architectures
from eagleconv.spec.canonical import CANONICAL_NAME, expected_tensors
from eagleconv.readers.loading import load_drafter
from eagleconv.formats.base.reading import config_model_for
from eagleconv.synthetic import DrafterRecipe, canonical_tensors
from tests.support.loaded import spec_of

ARCHS = architectures.names()  # the registry, never a hand list


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
