"""eagleconv's own DeepSeek-V3 target forward (simulate's default runtime for the MLA pair) against transformers.

Targets: fixtures/mla-pair's dense and MoE targets (the pair the vLLM parity tier runs in real vLLM with the
transformers runtime), and seeded ones written by transformers itself covering what the pair does not: q_proj
without a q latent, group-limited routing (n_group 4, topk_group 2), norm_topk_prob false, a non-zero
e_score_correction_bias, two shared experts, yarn RoPE with mscale in the softmax scale.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from eagleconv.errors import UsageError  # noqa: E402
from eagleconv.forward.inputs import Target  # noqa: E402
from eagleconv.forward.native_target import NativeTarget, NativeUnsupported, open_target  # noqa: E402
from tests.forward.test_native_target import _edit  # noqa: E402

MLA_PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "mla-pair"
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 16,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.8, "mscale_all_dim": 0.707}
SEEDED = {
    "q_proj-grouped-routing": dict(q_lora_rank=None),
    "q_latent-yarn": dict(q_lora_rank=24, rope_parameters=YARN),
}


def seeded_target(tmp_path: Path, kind: str) -> Path:
    torch.manual_seed(0)
    config = transformers.DeepseekV3Config(
        vocab_size=300, hidden_size=64, intermediate_size=96, moe_intermediate_size=16, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
        v_head_dim=12, n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=3, n_group=4, topk_group=2,
        norm_topk_prob=False, routed_scaling_factor=1.5, first_k_dense_replace=1, initializer_range=0.2,
        topk_method="noaux_tc", scoring_func="sigmoid", **SEEDED[kind])
    model = transformers.DeepseekV3ForCausalLM(config)
    with torch.no_grad():  # norms away from 1 and the routing bias away from 0, so a skipped one shows
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(torch.randn_like(p) * 0.3)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn_like(b) * 0.1)
    model.save_pretrained(tmp_path / kind)
    return tmp_path / kind


def native_logits(target: NativeTarget, seq: list[int]) -> torch.Tensor:
    w = target.w
    with torch.no_grad():
        h, _ = target.layers(w.embed(torch.tensor([seq])), torch.arange(len(seq)), lambda j: None, {})
        return w.linear(target.architecture.rms_norm(target.ops, h, w, "norm.weight", target.eps), "lm_head.weight")[0]


def assert_same_target(native: NativeTarget, reference: Target, sequences: list[list[int]],
                       logits_atol: float = 1e-5) -> None:
    """Every captured state and the logits close, and the same greedy token after every position."""
    ids = list(range(reference.num_layers + 1))
    for seq in sequences:
        greedy_n, states_n = native.forward(seq, ids)
        greedy_r, states_r = reference.forward(seq, ids)
        for i in ids:
            # float32 rounding scales with the state, not with each element: a 0.1 element beside a 35 one carries
            # the 35's rounding (3.4e-5 seen on an AMD EPYC, 1e-6 of the scale); a skipped norm, bias or group
            # mask moves states by far more than 4e-6 of their scale
            atol = max(2e-5, 4e-6 * float(states_r[i].abs().max()))
            torch.testing.assert_close(states_n[i], states_r[i], rtol=2e-5, atol=atol, msg=f"aux id {i}")
        with torch.no_grad():
            logits = reference.model(torch.tensor([seq])).logits[0]
        torch.testing.assert_close(native_logits(native, seq), logits, rtol=1e-5, atol=logits_atol)
        assert torch.equal(greedy_n, greedy_r)


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_mla_pair_targets_match_transformers(kind):
    prompts = json.loads((MLA_PAIR / kind / "prompts.json").read_text())
    native = open_target(MLA_PAIR / kind / "target")
    assert native.runtime == "eagleconv", getattr(native, "fallback", None)
    assert isinstance(native, NativeTarget)
    assert_same_target(native, Target(MLA_PAIR / kind / "target"), prompts[:2] + [[(7 * i + 3) % 512 for i in range(100)]])


@pytest.mark.parametrize("kind", sorted(SEEDED))
def test_transformers_written_deepseek_targets_match(tmp_path, kind):
    path = seeded_target(tmp_path, kind)
    native = open_target(path)
    assert isinstance(native, NativeTarget), getattr(native, "fallback", None)
    # initializer_range 0.2: states up to ~35, logits up to ~20; float32 rounding 1e-6 of that (assert_same_target)
    assert_same_target(native, Target(path), [[1, 5, 9, 200, 17, 3, 3, 42], list(range(40, 120))], logits_atol=4e-5)


@pytest.mark.parametrize("kind,drafter", [("dense", "eagle3"), ("moe", "eagle31")])
def test_simulate_is_the_same_in_both_runtimes(tmp_path, kind, drafter):
    """The bar: simulate's whole report (tokens, every round's drafts, counters) is byte-identical to the transformers
    runtime's, which the parity tier proved equal to vLLM's on this pair.  The drafter is converted --to vllm as the
    tier does; the KV-cached decode keeps MLA's values (32 wide) beside its keys (96 wide)."""
    from eagleconv.conversion import convert
    from eagleconv.simulation import simulate

    out = tmp_path / drafter
    assert convert(MLA_PAIR / kind / drafter, out, "vllm").ok
    prompts = json.loads((MLA_PAIR / kind / "prompts.json").read_text())
    reports = {rt: simulate(out, MLA_PAIR / kind / "target", prompts, num_speculative_tokens=3, max_tokens=32,
                            target_runtime=rt).model_dump() for rt in ("auto", "transformers")}
    auto, reference = reports["auto"], reports["transformers"]
    assert (auto.pop("target_runtime"), reference.pop("target_runtime")) == ("eagleconv", "transformers")
    for report in (auto, reference):  # the notes say how many cores other processes kept busy at the time
        report["notes"] = [n for n in report["notes"] if "cores" not in n]
    assert json.dumps(auto, sort_keys=True) == json.dumps(reference, sort_keys=True)
    assert auto["num_accepted_tokens"] > 0


def _moe_copy(tmp_path: Path, remove: str | None = None, **change: Any) -> Path:
    """The MoE target copied, with ``remove`` dropped from its config and test_native_target's ``_edit`` applied."""
    path = tmp_path / "target"
    shutil.copytree(MLA_PAIR / "moe" / "target", path)
    if remove:
        cfg = json.loads((path / "config.json").read_text())
        del cfg[remove]
        (path / "config.json").write_text(json.dumps(cfg))
    return _edit(path, **change)


@pytest.mark.parametrize("change,reason", [
    (dict(config={"topk_method": "greedy"}), "topk_method = 'greedy'"),
    (dict(config={"scoring_func": "softmax"}), "scoring_func = 'softmax'"),
    (dict(remove="scoring_func"), "scoring_func = None"),
    (dict(config={"moe_layer_freq": 2}), "moe_layer_freq = 2"),
    (dict(config={"rope_interleave": False}), "rope_interleave = False"),
    (dict(remove="q_lora_rank"), "config states no q_lora_rank"),
    (dict(remove="n_group"), "config states no n_group"),
    (dict(config={"n_group": 3}), "n_group 3"),
    (dict(config={"attention_bias": True}), "attention_bias = True"),
    (dict(config={"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}}),
     "yarn rope with beta_fast, beta_slow, mscale, mscale_all_dim unstated"),
    (dict(config={"rope_scaling": {"type": "linear", "factor": 4.0}}), "rope scaling 'linear'"),
    (dict(drop="model.layers.2.mlp.gate.e_score_correction_bias"), "missing: layers.2.mlp.gate.e_score_correction"),
    (dict(add="model.layers.1.mlp.gate.bias"), "unread tensors: layers.1.mlp.gate.bias"),
])
def test_what_eagleconv_does_not_run_falls_back(tmp_path, change, reason):
    path = _moe_copy(tmp_path, **change)
    with pytest.raises(NativeUnsupported, match=reason.replace("(", r"\(").replace(")", r"\)")):
        NativeTarget(path)
    with pytest.raises(UsageError, match="--target-runtime transformers"):
        open_target(path, "eagleconv")


def test_auto_names_why_it_falls_back(tmp_path):
    target = open_target(_moe_copy(tmp_path, config={"topk_method": "greedy"}), "auto")
    assert target.runtime == "transformers" and "topk_method = 'greedy'" in (target.fallback or "")
