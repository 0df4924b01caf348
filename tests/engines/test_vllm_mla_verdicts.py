"""The MLA verdict matrix, as seen from pytest (no vLLM needed).

Every MLA variant of eagleconv.validation.parity_mla was run through real vLLM 0.32 by ``.ci/vllm-parity --mla-verdicts
--record`` (fixtures/mla-variants/vllm-0.32.0-outcomes.json).  Here eagleconv's prediction for each is checked
against what vLLM did, against the committed target metadata (config.json + the tensor index of the seeded target
that the tier builds), and what eagleconv writes for vLLM from MLA input is checked against what vLLM loaded as MLA.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("safetensors")

from eagleconv.validation import parity_mla as mla
from eagleconv.validation.parity import agrees, predict

RECORDED = json.loads(mla.RECORD.read_text())["outcomes"] if mla.RECORD.exists() else {}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Each variant's checkpoint, built once for the module (0.1-0.4 s each: Kimi-sized latent projections)."""
    root, done = tmp_path_factory.mktemp("mla-variants"), {}

    def get(variant):
        if variant.name not in done:
            done[variant.name] = mla.build_variant(variant, root)
        return done[variant.name]
    return get


def _target(routing: str):
    return mla.MLA_VARIANTS_DIR / f"target-{routing}"


def test_the_committed_targets_are_what_the_tier_builds():
    """The targets' configs are target_config()'s; the tier checks the built weights' names against the index."""
    for routing in ("noaux_tc", "unset"):
        assert json.loads((_target(routing) / "config.json").read_text()) == mla.target_config(routing)
        names = json.loads((_target(routing) / "model.safetensors.index.json").read_text())["weight_map"]
        assert sum(n.endswith("mlp.gate.e_score_correction_bias") for n in names) == 3  # the MoE layers 1..3


@pytest.mark.parametrize("variant", mla.VARIANTS, ids=lambda v: v.name)
def test_prediction_matches_what_vllm_did(variant, built):
    assert variant.name in RECORDED, f"{variant.name}: not recorded; run .ci/vllm-parity --mla-verdicts --record"
    outcome, findings = predict(built(variant), _target(variant.routing))
    observed = RECORDED[variant.name]["observed"]
    assert agrees(outcome, observed), (outcome, observed, findings)
    if outcome != "intended":  # every finding that predicts a change names the way out
        assert findings, variant.name


# The variants whose cause is stated in config.json (or in the target's metadata): lint, which reads no tensors,
# must predict them too.
CONFIG_STATED = ("model_type deepseek_v3", "model_type deepseek_v32", "model_type kimi_k2", "q_lora_rank null",
                 "latent width 80", "latent width 320", "rope_interleave true", "rope_interleave false",
                 "yarn mscale_all_dim 0.707", "yarn without mscale fields", "target topk_method unset",
                 "aux ids only under eagle_config")


@pytest.mark.parametrize("name", CONFIG_STATED)
def test_lint_predicts_what_the_config_states(name, built):
    from eagleconv import lint
    from eagleconv.validation.parity import outcome_of

    variant = next(v for v in mla.VARIANTS if v.name == name)
    config = built(variant) / "config.json"
    report = lint(config, engines=("vllm:0.32",), target=_target(variant.routing))
    outcome, findings = outcome_of(report.findings)
    assert agrees(outcome, RECORDED[name]["observed"]), (outcome, findings)


def test_the_bases_ran_and_were_held_as_mla():
    for base in mla.BASES:
        held = RECORDED[f"base {base}"]["vllm"]["held_as"]
        assert held["model_type"] == "deepseek_v2" and held["use_mla"], held


def test_what_eagleconv_writes_for_vllm_loads_as_mla(tmp_path):
    """convert --to vllm / upgrade / downgrade of an MLA drafter: the model_type written is the one vLLM loaded,
    kept (not rewritten into DeepSeek MTP) and ran as MLA; convert of the committed TorchSpec Kimi fixture writes
    the same model_type."""
    import eagleconv

    written = {name: r for name, r in RECORDED.items() if r["kind"] == "written"}
    assert len(written) == 5
    for name, r in written.items():
        held = r["vllm"].get("held_as")
        assert held and held["model_type"] == r["written_model_type"] and held["use_mla"], (name, r["vllm"])
    fixture = mla.REPO / "fixtures" / "torchspec-kimi-mla-eagle31"
    assert json.loads((fixture / "config.json").read_text())["model_type"] == "kimi_k2"
    eagleconv.convert(fixture, tmp_path / "converted", "vllm")
    eagleconv.downgrade(fixture, tmp_path / "downgraded", allow_lossy=True, to="vllm")
    eagleconv.upgrade(tmp_path / "downgraded", tmp_path / "upgraded")
    for out, name in (("converted", "convert --to vllm of a TorchSpec kimi_k2 EAGLE-3.1 drafter"),
                      ("downgraded", "downgrade --to vllm of a TorchSpec kimi_k2 EAGLE-3.1 drafter"),
                      ("upgraded", "upgrade of the EAGLE-3 base (fc_norm + norm_output)")):
        config = json.loads((tmp_path / out / "config.json").read_text())
        assert config["model_type"] == written[name]["written_model_type"], (out, config["model_type"])


@pytest.mark.parametrize("arch", ["phi3", "qwen3"])
def test_what_convert_writes_for_phi3_and_qwen3_is_what_vllm_ran(arch, tmp_path):
    """.ci/vllm_written_archs.py ran convert --to vllm's output for a TorchSpec Phi-3 / Qwen3 EAGLE-3.1 drafter in
    vLLM 0.32 (Phi-3: the Llama label over the fused qkv_proj / gate_up_proj) and simulate drafted exactly as vLLM;
    convert still writes that label and those tensors."""
    from safetensors import safe_open

    from eagleconv import convert
    from eagleconv.synthetic import DrafterRecipe, TinyDims, make_drafter

    record = json.loads((mla.MLA_VARIANTS_DIR / "written-archs-vllm-0.32.0.json").read_text())["cases"]
    ran = record[f"{arch}: convert --to vllm of a TorchSpec EAGLE-3.1 drafter"]
    assert ran["vllm"]["status"] == "ok" and ran["simulate_equals_vllm"]
    src = make_drafter(tmp_path / "src", DrafterRecipe(producer="torchspec", architecture=arch, eagle31=True,
                                                       dims=TinyDims(hidden=64, target_hidden=64, head_dim=16)))
    assert convert(src, tmp_path / "out", "vllm").ok
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == ran["architectures"]
    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as f:
        projections = sorted({n.split(".")[-2] for n in f.keys() if n.endswith("_proj.weight")})
    assert projections == ran["projections"]
