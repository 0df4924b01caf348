"""Typed RoPE and rms_norm_eps: both rope spellings read into the same typed fields in every layout, never guessed;
rms_norm_eps and theta come from the config, else the layout's default, else are unknown."""

from __future__ import annotations

import json

import pytest

from eagleconv.conversion import convert
from eagleconv.spec.drafter import Rope
from eagleconv.readers.loading import load_drafter
from tests.support.loaded import spec_of


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
