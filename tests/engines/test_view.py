"""engines.view: a checkpoint's drafter as each engine builds it, the one source validate --forward and simulate read.

Real checkpoints (the committed tiny pair, edited with parity.build_variant) read through each profile: the flags
and layers the engine runs with, the tensors it fills where the checkpoint has none, and what it refuses.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from eagleconv.engines import PROFILES, resolve_engines
from eagleconv.engines.view import Fill, serving_view, view_drafter
from eagleconv.forward.engine import fill_tensors
from eagleconv.readers.loading import load_drafter
from eagleconv.validation.parity import Variant, build_variant
from eagleconv.config.target import load_target

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "fixtures" / "tiny-pair"
TARGET_LAYERS = 4


def loaded(path: Path):
    drafter = load_drafter(path)
    drafter.store.close()
    return drafter


def variant(tmp_path: Path, base: str, edit) -> Path:
    return build_variant(Variant("v", base, "test", edit), tmp_path)


def vllm(path: Path):
    return serving_view(resolve_engines("vllm:0.32")[0], loaded(path), (1, 2, 3), TARGET_LAYERS)


def llamacpp(path: Path):
    return serving_view(resolve_engines("llama.cpp")[0], loaded(path), (1, 2, 3), TARGET_LAYERS,
                        target=load_target(PAIR / "target"))


def test_every_engine_views_the_clean_drafter_as_it_means_it():
    drafter = loaded(PAIR / "eagle3")
    for profile in [*resolve_engines("all"), *resolve_engines("llama.cpp")]:  # the engines that serve it
        view = view_drafter(profile, drafter, (1, 2, 3), TARGET_LAYERS)
        assert view.spec is not None and view.fills == {}, profile.label
        assert view.report.engine == profile.label
    served = vllm(PAIR / "eagle3")
    assert served.refused is None and served.capture == (1, 2, 3) and served.fills == {} and served.notes == []
    assert served.spec == drafter.require_spec()


def test_vllm_fills_what_its_loader_leaves_and_names_it(tmp_path):
    def strip(config, tensors):
        for name in ("d2t", "lm_head.weight", "norm.weight"):
            tensors.pop(name)

    view = vllm(variant(tmp_path, "eagle3", strip))
    assert view.refused is None
    assert view.fills == {"norm.weight": Fill("unit_norm", shape=(256,)),
                          "lm_head.weight": Fill("target_lm_head", shape=(256, 256)),
                          "d2t": Fill("zero_offsets", shape=(256,))}
    assert [n.split(":")[0] for n in view.notes] == [
        "norm.weight missing", "lm_head missing with draft vocab 256 < vocab 512", "d2t missing"]
    head = torch.arange(512 * 256, dtype=torch.float64).reshape(512, 256)
    made = fill_tensors(view.spec, view.fills, head)
    assert torch.equal(made["norm.weight"], torch.ones(256)) and made["d2t"].dtype == torch.int64
    assert not made["d2t"].any() and torch.equal(made["lm_head.weight"], head[:256].float())


def test_vllm_refuses_a_weight_its_loader_would_leave_uninitialised(tmp_path):
    view = vllm(variant(tmp_path, "eagle3", lambda c, t: t.pop("layers.0.mlp.up_proj.weight")))
    assert view.refused is not None and view.refused.startswith("layers.0.mlp.up_proj.weight is missing; vLLM leaves")


def test_vllm_refuses_fewer_captured_layers_than_fc_takes(tmp_path):
    view = vllm(variant(tmp_path, "eagle3", lambda c, t: (c.update(eagle_aux_hidden_state_layer_ids=[1, 1, 3]),
                                                          c.pop("eagle_config"))))
    assert view.capture == (1, 3) and "builds fc for 3" in (view.refused or "")


def test_llamacpp_runs_without_the_switches_it_lacks_and_with_the_targets_vocab(tmp_path):
    def norm_output_no_d2t(config, tensors):
        config.update(norm_output=True, draft_vocab_size=512)
        tensors.pop("d2t")
        tensors.pop("t2d")
        tensors.pop("lm_head.weight")

    path = variant(tmp_path, "eagle3", norm_output_no_d2t)
    forward = view_drafter(resolve_engines("llama.cpp")[0], loaded(path), (1, 2, 3), TARGET_LAYERS)
    assert forward.spec is not None and forward.spec.flags.norm_output  # the forward view keeps what it cannot read
    view = llamacpp(path)
    assert view.refused is None and view.spec is not None and not view.spec.flags.norm_output
    assert view.spec.draft_vocab_size == 512
    assert view.fills == {"lm_head.weight": Fill("target_lm_head", shape=(512, 256))}
    assert view.notes[1:] == ["no d2t: llama.cpp drafts over the target's whole vocabulary",
                              "no lm_head: llama.cpp uses the target's output projection"]


def test_llamacpp_refuses_what_its_converter_stops_on():
    view = llamacpp(PAIR / "eagle31")  # fc_norm tensors: "Can not map tensor"
    assert view.refused is not None and view.refused.startswith("llama.cpp b11434 cannot serve it: ")


def test_simulate_refuses_an_engine_whose_serving_is_not_modelled():
    from eagleconv.forward.native_target import NativeTarget
    from eagleconv.simulation import SimulateError, engine_drafter, simulate

    assert PROFILES["sglang " + resolve_engines("sglang")[0].version].serve is None
    with pytest.raises(SimulateError, match="simulate models how vllm, llama.cpp serve a drafter, not sglang"):
        engine_drafter(PAIR / "eagle3", "sglang", NativeTarget(PAIR / "target"))
    # simulate refuses it from the profile (no decode_loop) before it loads a target: this one does not exist
    with pytest.raises(SimulateError, match=r"names a decode loop \(vllm, llama.cpp\), not sglang"):
        simulate(PAIR / "eagle3", PAIR / "no-such-target", engine="sglang", threads=1)


def test_vllm_judges_shapes_by_canonical_name_whatever_the_stored_names(tmp_path):
    from eagleconv.validation.parity import VARIANTS

    marker = next(v for v in VARIANTS if v.name == "midlayer.* names under eagleconv's vllm marker")
    path = build_variant(marker, tmp_path)
    assert any(n.startswith("midlayer.") for n in loaded(path).read.canonical.values())
    view = vllm(path)
    assert view.refused is None and view.fills == {} and view.capture == (1, 2, 3)

    def widen(config, tensors):
        tensors["midlayer.post_attention_layernorm.weight"] = torch.ones(257)

    view = vllm(variant(tmp_path, "eagle3", lambda c, t: (marker.edit(c, t), widen(c, t))))
    assert view.refused == ("vLLM fails at load: AssertionError: layers.0.post_attention_layernorm.weight is [257], "
                            "the parameter is [256]")
